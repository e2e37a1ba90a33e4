"""JoinGroup: v0-9

Behavior:
- Delegates to the group coordinator (``coordinator/group``), which parks the request until
  the rebalance completes; only this connection waits, the coordinator keeps serving others.
- A member without an id gets MEMBER_ID_REQUIRED and a generated id (v4+); v0-3 members are
  added at once. The leader's response carries every member's metadata for the selected
  protocol; a session timeout outside group.min/max.session.timeout.ms is
  INVALID_SESSION_TIMEOUT; an illegal group.instance.id is INVALID_GROUP_ID.
- Coordinator errors: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE.
- With an authorizer: READ on the group, else GROUP_AUTHORIZATION_FAILED.

Version notes:
- v1 rebalance timeout (v0: the session timeout); v2 throttle time; v4 member id required
  (KIP-394); v5 group.instance.id (KIP-345); v6 flexible; v7 protocol type in the response,
  nullable protocol name; v8 reason (KIP-800); v9 skip_assignment (static leader rejoin).
"""

import datetime
import re

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext

_LEGAL_INSTANCE_ID = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def millis(value) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def client_host(ctx: RequestContext) -> str:
    """Kafka reports the client address as ``InetAddress.toString()``: "/127.0.0.1"."""
    peer = getattr(ctx.connection, "peer", None)
    return f"/{peer[0]}" if peer else ""


def _failed(code: ErrorCode, request) -> dict:
    return {"error_code": code, "generation_id": -1, "protocol_type": None, "protocol_name": None,
            "leader": "", "member_id": request.member_id, "members": []}


@register(11, 0, 9)
async def handle_join_group(ctx: RequestContext, request) -> dict:
    v = ctx.api_version
    group_instance_id = getattr(request, "group_instance_id", None) if v >= 5 else None
    session_timeout_ms = millis(request.session_timeout)
    if group_instance_id is not None and not _LEGAL_INSTANCE_ID.match(group_instance_id):
        result = _failed(ErrorCode.invalid_group_id, request)
    elif not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        result = _failed(ErrorCode.group_authorization_failed, request)
    else:
        result = await ctx.services.group_coordinator.classic.join_group(
            group_id=request.group_id, member_id=request.member_id,
            group_instance_id=group_instance_id, require_known_member_id=v >= 4,
            client_id=ctx.header.client_id or "", client_host=client_host(ctx),
            rebalance_timeout_ms=millis(request.rebalance_timeout) if v >= 1 else session_timeout_ms,
            session_timeout_ms=session_timeout_ms, protocol_type=request.protocol_type,
            protocols=[(p.name, p.metadata) for p in request.protocols],
            reason=getattr(request, "reason", None))
    if v < 7 and result["protocol_name"] is None:
        result = {**result, "protocol_name": ""}
    return {"throttle_time": 0, **result}
