"""ListGroups: v0-5

Behavior:
- Every group this coordinator knows: classic groups (including Empty groups that only hold
  offsets) with their protocol type, and share groups (KIP-932: protocol type and group type
  "share", state Empty or Stable); COORDINATOR_LOAD_IN_PROGRESS while ``__consumer_offsets`` is
  still being loaded (with the groups loaded so far).
- v4+ states filter and v5+ types filter (case-insensitive: "classic", "share").

Version notes:
- v1 throttle time; v3 flexible; v4 states filter and group state (KIP-518); v5 types filter
  and group type (KIP-848).
"""

from protocol.api import register

from ..server import RequestContext


@register(16, 0, 5)
async def handle_list_groups(ctx: RequestContext, request) -> dict:
    v = ctx.api_version
    states = set(getattr(request, "states_filter", ()) or ()) if v >= 4 else set()
    types = set(getattr(request, "types_filter", ()) or ()) if v >= 5 else set()
    error, groups = ctx.services.group_coordinator.list_groups(states or None, types or None)
    return {"throttle_time": 0, "error_code": error, "groups": groups}
