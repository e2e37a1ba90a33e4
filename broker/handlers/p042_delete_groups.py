"""DeleteGroups: v0-2

Behavior:
- Deletes each Empty group: its committed offsets and its group metadata are tombstoned in
  ``__consumer_offsets`` and it is forgotten. A group with members gets NON_EMPTY_GROUP; an
  unknown one GROUP_ID_NOT_FOUND; coordinator errors per group. A KIP-848 consumer group
  without members is deleted the same way (its consumer-group records tombstoned too).
- A share group (KIP-932) likewise, once empty: its share-partition state is deleted first
  (the data path's ``delete_group_state``), then its share-group records are tombstoned.
- With an authorizer: DELETE on the group, else GROUP_AUTHORIZATION_FAILED.

Version notes:
- v1 no change (throttle on quota violation); v2 flexible.
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext


@register(42, 0, 2)
async def handle_delete_groups(ctx: RequestContext, request) -> dict:
    refused = {g for g in request.groups_names if not authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, g)}
    results = await ctx.services.group_coordinator.delete_groups([g for g in request.groups_names if g not in refused])
    results.update(dict.fromkeys(refused, ErrorCode.group_authorization_failed))
    return {"throttle_time": 0,
            "results": [{"group_id": g, "error_code": results[g]} for g in dict.fromkeys(request.groups_names)]}
