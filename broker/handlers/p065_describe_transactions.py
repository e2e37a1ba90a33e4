"""DescribeTransactions: v0

Behavior:
- For each transactional id this broker coordinates: its state name (Empty, Ongoing,
  PrepareCommit, ...), timeout, start time (-1 before the first transaction), producer id
  and epoch, and partitions (KIP-664).
- Unknown (or expiring) id: TRANSACTIONAL_ID_NOT_FOUND; "" INVALID_REQUEST; not coordinated
  here: NOT_COORDINATOR; partition loading: COORDINATOR_LOAD_IN_PROGRESS. Errors carry zeros
  in the other fields, as in Kafka.

Version notes:
- v0 only (flexible).
"""

from protocol.api import register

from ..server import RequestContext


@register(65, 0, 0)
async def handle_describe_transactions(ctx: RequestContext, request) -> dict:
    coordinator = ctx.services.txn_coordinator
    return {"throttle_time": 0,
            "transaction_states": [coordinator.describe(t) for t in request.transactional_ids]}
