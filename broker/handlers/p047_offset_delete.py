"""OffsetDelete: v0

Behavior:
- Deletes a group's committed offsets of the given partitions (``kafka-consumer-groups
  --delete-offsets``, the admin clients' ``deleteConsumerGroupOffsets``): each is tombstoned in
  ``__consumer_offsets`` with acks=all, so it stays deleted across restarts and failovers.
- A topic or partition that does not exist gets UNKNOWN_TOPIC_OR_PARTITION and is not passed
  to the coordinator; a partition without a committed offset succeeds (nothing to delete).
- A partition of a topic that a consumer-protocol group with members is subscribed to gets
  GROUP_SUBSCRIBED_TO_TOPIC; an Empty group's offsets can all be deleted.
- Group errors replace the whole answer (top-level error code, no topics), as Kafka's
  ``OffsetDeleteResponse.Builder.merge``: GROUP_ID_NOT_FOUND for an unknown or dead group,
  NON_EMPTY_GROUP for a group with members that is not using the consumer protocol,
  INVALID_GROUP_ID for "", and the coordinator errors (NOT_COORDINATOR,
  COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE).
- Topics are answered in Kafka's order: those with an unknown partition first (the unknown
  partitions first within them), then the rest, partitions in request order.
- With an authorizer: DELETE on the group (else GROUP_AUTHORIZATION_FAILED), READ on each topic
  (else TOPIC_AUTHORIZATION_FAILED).

Version notes:
- v0 only (not flexible).
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize, denied
from ..request_context import RequestContext


@register(47, 0, 0)
async def handle_offset_delete(ctx: RequestContext, request) -> dict:
    topics = ctx.services.metadata.topics
    if not authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return {"error_code": ErrorCode.group_authorization_failed, "throttle_time": 0, "topics": []}
    unauthorized = denied(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    answered: dict[str, list[dict]] = {}  # Kafka's response builder: topic -> partitions
    valid: list[tuple[str, int]] = []
    for t in request.topics:
        known = topics.get(t.name)
        for p in t.partitions:
            if t.name in unauthorized:
                answered.setdefault(t.name, []).append(_partition(p.partition_index,
                                                                  ErrorCode.topic_authorization_failed))
            elif known is not None and 0 <= p.partition_index < len(known.partitions):
                valid.append((t.name, p.partition_index))
            else:
                answered.setdefault(t.name, []).append(_partition(p.partition_index,
                                                                  ErrorCode.unknown_topic_or_partition))
    error, results = await ctx.services.group_coordinator.offsets.delete_offsets(request.group_id, valid)
    if error:
        return {"error_code": error, "throttle_time": 0, "topics": []}
    for (topic, partition), perr in results.items():
        answered.setdefault(topic, []).append(_partition(partition, perr))
    return {"error_code": 0, "throttle_time": 0,
            "topics": [{"name": name, "partitions": parts} for name, parts in answered.items()]}


def _partition(index: int, error: int) -> dict:
    return {"partition_index": index, "error_code": error}
