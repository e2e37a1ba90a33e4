"""OffsetCommit: v2-9

Behavior:
- Each partition of an existing topic is committed for the group; the records are appended to
  ``__consumer_offsets`` (Kafka's OffsetCommitKey / OffsetCommitValue v3) before the answer.
  A partition of an unknown topic gets UNKNOWN_TOPIC_OR_PARTITION; metadata longer than
  offset.metadata.max.bytes OFFSET_METADATA_TOO_LARGE.
- Group checks as Kafka: generation -1 with no member id is a "simple" commit, allowed while the
  group has no members (UNKNOWN_MEMBER_ID otherwise); a member of another generation gets
  ILLEGAL_GENERATION, an unknown one UNKNOWN_MEMBER_ID; REBALANCE_IN_PROGRESS between the
  JoinGroup and SyncGroup answers; a commit for a group that does not exist with a
  generation >= 0 is ILLEGAL_GENERATION.
- A consumer group (KIP-848) checks the member id and member epoch instead
  (``ConsumerGroup.validateOffsetCommit``): STALE_MEMBER_EPOCH for another epoch,
  UNKNOWN_MEMBER_ID for an unknown member, UNSUPPORTED_VERSION below v9 for its members; epoch
  -1 commits only while the group has no members.
- With an authorizer: READ on the group (else GROUP_AUTHORIZATION_FAILED for every partition)
  and on each topic (else TOPIC_AUTHORIZATION_FAILED).

Version notes:
- v2-4 retention time (ignored, as Kafka >= 2.1 does for the log format we write); v3 throttle
  time; v6 committed leader epoch; v7 group.instance.id; v8 flexible; v9 (KIP-848: the
  generation id is the member epoch of a consumer group).
"""

from coordinator.group.state import OffsetAndMetadata
from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize, denied
from ..request_context import RequestContext


@register(8, 2, 9)
async def handle_offset_commit(ctx: RequestContext, request) -> dict:
    v = ctx.api_version
    topics = ctx.services.metadata.topics
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    errors: dict[tuple[str, int], int] = {}
    group_denied = not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    unauthorized = denied(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    for t in request.topics:
        topic = topics.get(t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if group_denied:
                errors[tp] = ErrorCode.group_authorization_failed
            elif t.name in unauthorized:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                errors[tp] = ErrorCode.unknown_topic_or_partition
            else:
                offsets[tp] = OffsetAndMetadata(
                    p.committed_offset, getattr(p, "committed_leader_epoch", -1) if v >= 6 else -1,
                    p.committed_metadata or "")
    if offsets:
        errors.update(await ctx.services.group_coordinator.offsets.commit_offsets(
            group_id=request.group_id, member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None) if v >= 7 else None,
            generation_id=request.generation_id_or_member_epoch, offsets=offsets, api_version=v))
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": errors[(t.name, p.partition_index)]}
            for p in t.partitions]}
        for t in request.topics]}
