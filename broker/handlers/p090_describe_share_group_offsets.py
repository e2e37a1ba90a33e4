"""DescribeShareGroupOffsets: v0-1 (KIP-932)

Behavior:
- Per group: a coordinator problem (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
  COORDINATOR_NOT_AVAILABLE) or an empty group id (INVALID_GROUP_ID) is the group's error.
- Each requested partition gets its share-partition start offset and leader epoch, -1 for a
  partition the group never fetched; an unknown topic UNKNOWN_TOPIC_OR_PARTITION on each of
  its partitions. A null topic list describes every share-partition with state
  (``coordinator/share/admin.py``).

Version notes:
- v1 adds ``lag`` (KIP-1226): -1 where it cannot be computed.
"""

from protocol.api import register

from ..server import RequestContext


@register(90, 0, 1)
async def handle_describe_share_group_offsets(ctx: RequestContext, request) -> dict:
    admin = ctx.services.share_offsets
    groups = []
    for group in request.groups:
        topics = None if group.topics is None else [(t.topic_name, list(t.partitions)) for t in group.topics]
        groups.append(await admin.describe(group.group_id, topics))
    return {"throttle_time": 0, "groups": groups}
