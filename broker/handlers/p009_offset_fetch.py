"""OffsetFetch: v1-9

Behavior:
- Committed offsets of the requested partitions (null topics, v2+: every partition the group
  has committed); a partition without a commit, or a group that does not exist, gives offset
  -1, leader epoch -1, metadata "" and no error.
- require_stable (v7+): a partition with a transactional offset commit still waiting for its
  marker gets UNSTABLE_OFFSET_COMMIT.
- Coordinator errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...): per partition in
  v1, top-level from v2, per group from v8.
- With an authorizer: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED); a requested
  topic without DESCRIBE gets TOPIC_AUTHORIZATION_FAILED, and is left out of an all-topics
  fetch.

Version notes:
- v2 top-level error, null topics = all; v3 throttle time; v5 committed leader epoch;
  v6 flexible; v7 require_stable (KIP-447); v8 batched groups (KIP-709); v9 member id and
  epoch (KIP-848): for a consumer group an unknown member gets UNKNOWN_MEMBER_ID and another
  epoch STALE_MEMBER_EPOCH (per group); ignored for classic groups, as Kafka does.
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize, denied
from ..request_context import RequestContext


def _fetch_group(ctx: RequestContext, group_id: str, topics, require_stable: bool,
                 member_id: str | None = None, member_epoch: int = -1) -> tuple[int, list]:
    v = ctx.api_version
    partitions = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    error, entries = ctx.services.group_coordinator.offsets.fetch_offsets(group_id, partitions, require_stable,
                                                                  member_id, member_epoch)
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        error = ErrorCode.group_authorization_failed
    else:
        entries = _authorized_entries(ctx, entries, all_topics=topics is None)
    if error:
        if v >= 2:
            return error, []
        entries = [(tp, None, error) for tp in partitions or []]
    by_topic: dict[str, list] = {}
    for (topic, partition), commit, perr in entries:
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": commit.offset if commit is not None else -1,
            "committed_leader_epoch": commit.leader_epoch if commit is not None else -1,
            "metadata": commit.metadata if commit is not None else "",
            "error_code": perr})
    return 0, [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


def _authorized_entries(ctx: RequestContext, entries: list, all_topics: bool) -> list:
    """Topics without DESCRIBE: left out of an all-topics fetch, else TOPIC_AUTHORIZATION_FAILED."""
    unauthorized = denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, {tp[0] for tp, _, _ in entries})
    if not unauthorized:
        return entries
    if all_topics:
        return [e for e in entries if e[0][0] not in unauthorized]
    return [(tp, None, ErrorCode.topic_authorization_failed) if tp[0] in unauthorized else (tp, commit, err)
            for tp, commit, err in entries]


@register(9, 1, 9)
async def handle_offset_fetch(ctx: RequestContext, request) -> dict:
    v = ctx.api_version
    require_stable = bool(getattr(request, "require_stable", False)) if v >= 7 else False
    if v >= 8:
        groups = []
        for g in request.groups:
            error, topics = _fetch_group(ctx, g.group_id, g.topics, require_stable,
                                         getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
        return {"throttle_time": 0, "groups": groups}
    error, topics = _fetch_group(ctx, request.group_id, request.topics, require_stable)
    return {"throttle_time": 0, "topics": topics, "error_code": error}
