"""LeaveGroup: v0-5

Behavior:
- Removes the member(s) and starts a rebalance for the rest. v3+ takes a batch of members,
  each answered on its own (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID); a member given only by
  group.instance.id (empty member id) is removed administratively. v0-2 carry one member whose
  error is the top-level error.
- With an authorizer: READ on the group, else GROUP_AUTHORIZATION_FAILED.

Version notes:
- v1 throttle time; v3 batch of members with group.instance.id (KIP-345); v4 flexible;
  v5 reason per member (KIP-800).
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext


@register(13, 0, 5)
async def handle_leave_group(ctx: RequestContext, request) -> dict:
    v = ctx.api_version
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "members": []}
    if v >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
        reasons = [getattr(m, "reason", None) for m in request.members]
        reason = next((r for r in reasons if r), None)
    else:
        members = [(request.member_id, None)]
        reason = None
    error, results = ctx.services.group_coordinator.classic.leave_group(
        group_id=request.group_id, members=members, reason=reason)
    if v < 3:
        if not error and results:
            error = results[0][2]
        return {"throttle_time": 0, "error_code": error}
    return {"throttle_time": 0, "error_code": error,
            "members": [{"member_id": m, "group_instance_id": i, "error_code": e} for m, i, e in results]}
