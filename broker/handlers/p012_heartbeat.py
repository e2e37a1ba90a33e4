"""Heartbeat: v0-4

Behavior:
- Resets the member's session timer. REBALANCE_IN_PROGRESS while the group prepares a
  rebalance (the member must rejoin); ILLEGAL_GENERATION for another generation;
  UNKNOWN_MEMBER_ID for a member the group does not know (also one expired for missing its
  session timeout); FENCED_INSTANCE_ID for a replaced static member. While the group's
  partition is loading the answer is NONE, as in Kafka.
- With an authorizer: READ on the group, else GROUP_AUTHORIZATION_FAILED.

Version notes:
- v1 throttle time; v3 group.instance.id; v4 flexible.
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext


@register(12, 0, 4)
async def handle_heartbeat(ctx: RequestContext, request) -> dict:
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    error = ctx.services.group_coordinator.classic.heartbeat(
        group_id=request.group_id, member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None) if ctx.api_version >= 3 else None,
        generation_id=request.generation_id)
    return {"throttle_time": 0, "error_code": error}
