"""ListTransactions: v0-1

Behavior:
- Every transactional id this broker coordinates (not Dead), filtered by state names and
  producer ids; unknown state names come back in ``unknown_state_filters`` (KIP-664).
- v1 duration filter: only transactions started more than that many milliseconds ago.
- COORDINATOR_LOAD_IN_PROGRESS while any ``__transaction_state`` partition is loading.

Version notes:
- v0 flexible; v1 duration_filter (KIP-994); v2 (transactional id pattern) is not advertised.
"""

from protocol.api import register

from ..server import RequestContext


@register(66, 0, 1)
async def handle_list_transactions(ctx: RequestContext, request) -> dict:
    duration = getattr(request, "duration_filter", -1)
    error, states, unknown = ctx.services.txn_coordinator.list_transactions(
        list(request.state_filters), list(request.producer_id_filters), -1 if duration is None else duration)
    return {"throttle_time": 0, "error_code": error, "unknown_state_filters": unknown,
            "transaction_states": states}
