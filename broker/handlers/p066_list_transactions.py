"""ListTransactions: v0-1

Behavior:
- Every transactional id this broker coordinates (not Dead), filtered by state names and
  producer ids; unknown state names come back in ``unknown_state_filters`` (KIP-664).
- v1 duration filter: only transactions started more than that many milliseconds ago.
- COORDINATOR_LOAD_IN_PROGRESS while any ``__transaction_state`` partition is loading.
- With an authorizer: only the transactions whose id the caller may DESCRIBE.

Version notes:
- v0 flexible; v1 duration_filter (KIP-994); v2 (transactional id pattern) is not advertised.
"""

from protocol.api import register

from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext


@register(66, 0, 1)
async def handle_list_transactions(ctx: RequestContext, request) -> dict:
    duration = getattr(request, "duration_filter", -1)
    error, states, unknown = ctx.services.txn_coordinator.list_transactions(
        list(request.state_filters), list(request.producer_id_filters), -1 if duration is None else duration)
    if ctx.services.authorizer is not None:
        states = [s for s in states
                  if authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, s["transactional_id"])]
    return {"throttle_time": 0, "error_code": error, "unknown_state_filters": unknown,
            "transaction_states": states}
