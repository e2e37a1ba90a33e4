"""SyncGroup: v0-5

Behavior:
- The leader's assignment is written to ``__consumer_offsets`` (group metadata) and then
  handed to every member; followers that arrive first wait for it (their connection only).
- Errors as Kafka: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (also while the
  group's partition is still loading), INCONSISTENT_GROUP_PROTOCOL (v5 protocol type/name
  mismatch), FENCED_INSTANCE_ID; a Stable group answers with the member's current assignment.
- With an authorizer: READ on the group, else GROUP_AUTHORIZATION_FAILED.

Version notes:
- v1 throttle time; v3 group.instance.id; v4 flexible; v5 protocol type and name (KIP-559).
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext


@register(14, 0, 5)
async def handle_sync_group(ctx: RequestContext, request) -> dict:
    v = ctx.api_version
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "protocol_type": None,
                "protocol_name": None, "assignment": b""}
    result = await ctx.services.group_coordinator.classic.sync_group(
        group_id=request.group_id, generation_id=request.generation_id, member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None) if v >= 3 else None,
        protocol_type=getattr(request, "protocol_type", None) if v >= 5 else None,
        protocol_name=getattr(request, "protocol_name", None) if v >= 5 else None,
        assignments={a.member_id: a.assignment for a in request.assignments})
    return {"throttle_time": 0, **result}
