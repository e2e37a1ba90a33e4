"""ShareGroupDescribe: v1

Behavior:
- For each group id: its state (Empty, Stable), group epoch, assignment epoch, assignor
  ("simple") and members (member id, rack, member epoch, client id and host, subscribed topic
  names, assigned partitions with topic id and name), as Kafka's ``ShareGroup.asDescribedGroup``.
- GROUP_ID_NOT_FOUND with "Group <id> not found." for an unknown id and "Group <id> is not a
  share group." for a classic group; INVALID_GROUP_ID for an empty id; coordinator errors
  (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE) per group.
- Authorized operations when asked, for a group answered without error: READ, DELETE,
  DESCRIBE, DESCRIBE_CONFIGS and ALTER_CONFIGS (there is no authorizer), as for other groups.
- With an authorizer: DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED for it.

Version notes:
- v1 only, as Kafka 4.3.1; flexible.
"""

from protocol.api import register

from ..authorization import UNAUTHORIZED_GROUP, AclOperation, ResourceType, authorize, group_operations
from ..request_context import RequestContext


@register(77, 1, 1)
async def handle_share_group_describe(ctx: RequestContext, request) -> dict:
    coordinator = ctx.services.share_group_coordinator
    groups = []
    for group_id in request.group_ids:
        described = coordinator.describe(group_id)
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.update(UNAUTHORIZED_GROUP)
        described["authorized_operations"] = group_operations(
            bool(request.include_authorized_operations) and described["error_code"] == 0, ctx, group_id)
        groups.append(described)
    return {"throttle_time": 0, "groups": groups}
