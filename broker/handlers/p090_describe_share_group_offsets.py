"""DescribeShareGroupOffsets: v0-1 (KIP-932)

Behavior:
- As Kafka 4.3.1's group coordinator service: no group or coordinator check (the state is read
  from the share coordinators), so an unknown group is described like a group that never
  fetched. Each requested partition gets its share-partition start offset and leader epoch,
  -1 for a partition the group never fetched; an unknown topic is answered with the zero topic
  id and start offset -1 on each partition, without error. A null topic list describes every
  share-partition with state (``coordinator/share/admin.py``).
- With an authorizer: DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED for it.

Version notes:
- v1 adds ``lag`` (KIP-1226): -1 where it cannot be computed.
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext


@register(90, 0, 1)
async def handle_describe_share_group_offsets(ctx: RequestContext, request) -> dict:
    admin = ctx.services.share_offsets
    groups = []
    for group in request.groups:
        topics = None if group.topics is None else [(t.topic_name, list(t.partitions)) for t in group.topics]
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group.group_id):
            groups.append({"group_id": group.group_id, "error_code": ErrorCode.group_authorization_failed,
                           "error_message": None, "topics": []})
            continue
        groups.append(await admin.describe(group.group_id, topics))
    return {"throttle_time": 0, "groups": groups}
