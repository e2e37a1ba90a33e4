"""ListGroups: v0-5

Behavior:
- Every group this coordinator knows: classic groups (including Empty groups that only hold
  offsets) with their protocol type, and share groups (KIP-932: protocol type and group type
  "share", state Empty or Stable); COORDINATOR_LOAD_IN_PROGRESS while ``__consumer_offsets`` is
  still being loaded (with the groups loaded so far).
- v4+ states filter and v5+ types filter (case-insensitive): classic groups ("classic", their
  protocol type), KIP-848 consumer groups ("consumer", protocol type "consumer", states
  Empty / Assigning / Reconciling / Stable) and share groups ("share").
- With an authorizer: DESCRIBE on the cluster lists every group, else only the groups with
  DESCRIBE.

Version notes:
- v1 throttle time; v3 flexible; v4 states filter and group state (KIP-518); v5 types filter
  and group type (KIP-848).
"""

from protocol.api import register

from ..authorization import AclOperation, ResourceType, authorize, authorize_cluster
from ..request_context import RequestContext


@register(16, 0, 5)
async def handle_list_groups(ctx: RequestContext, request) -> dict:
    v = ctx.api_version
    states = set(getattr(request, "states_filter", ()) or ()) if v >= 4 else set()
    types = set(getattr(request, "types_filter", ()) or ()) if v >= 5 else set()
    error, groups = ctx.services.group_coordinator.list_groups(states or None, types or None)
    if ctx.services.authorizer is not None and not authorize_cluster(ctx, AclOperation.DESCRIBE):
        groups = [g for g in groups if authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g["group_id"])]
    return {"throttle_time": 0, "error_code": error, "groups": groups}
