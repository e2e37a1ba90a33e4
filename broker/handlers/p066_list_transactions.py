"""ListTransactions: v0-1

Behavior:
- Every transactional id this broker coordinates (not Dead), filtered by state names and
  producer ids; unknown state names come back in ``unknown_state_filters`` (KIP-664).
- v1 duration filter: only transactions that started more than that many milliseconds ago
  (applied to every state, as Kafka does).

Version notes:
- v0 flexible; v1 duration_filter (KIP-994); v2 (TV2 filter) is not advertised.
"""

from protocol.api import register

from ..server import RequestContext


@register(66, 0, 1)
async def handle_list_transactions(ctx: RequestContext, request) -> dict:
    duration = getattr(request, "duration_filter", -1)
    states, unknown = ctx.broker.txn_coordinator.list(list(request.state_filters),
                                                      list(request.producer_id_filters),
                                                      duration if duration is not None else -1)
    return {"throttle_time": 0, "error_code": 0, "unknown_state_filters": unknown,
            "transaction_states": states}
