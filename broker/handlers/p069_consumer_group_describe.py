"""ConsumerGroupDescribe: v0-1 (KIP-848)

Behavior:
- For each group id: the consumer group's state (Empty, Assigning, Reconciling, Stable), group
  epoch, assignment epoch, the assignor in use, and its members with their subscriptions,
  current assignment and target assignment (topic id and name, partitions). Logic in
  :mod:`coordinator.group.consumer_coordinator`.
- An unknown group gets GROUP_ID_NOT_FOUND "Group <id> not found."; a classic group
  GROUP_ID_NOT_FOUND "Group <id> is not a consumer group."; an empty group id
  INVALID_GROUP_ID; coordinator errors per group.
- Authorized operations (when asked, for a group answered without error): READ, DELETE,
  DESCRIBE, DESCRIBE_CONFIGS and ALTER_CONFIGS, as DescribeGroups (broker/authorization.py).
- With an authorizer: DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED for it.

Version notes:
- v0 first version; v1 member type (KIP-1099: 1 for a member using the consumer protocol).
"""

from protocol.api import register

from ..authorization import UNAUTHORIZED_GROUP, AclOperation, ResourceType, authorize, group_operations
from ..request_context import RequestContext


@register(69, 0, 1)
async def handle_consumer_group_describe(ctx: RequestContext, request) -> dict:
    include_ops = bool(getattr(request, "include_authorized_operations", False))
    consumer = ctx.services.group_coordinator.consumer
    groups = []
    for group_id in request.group_ids:
        described = consumer.describe(group_id)
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.update(UNAUTHORIZED_GROUP)
        described["authorized_operations"] = group_operations(include_ops and described["error_code"] == 0, ctx, group_id)
        groups.append(described)
    return {"throttle_time": 0, "groups": groups}
