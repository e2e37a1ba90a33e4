"""DescribeTransactions: v0

Behavior:
- For each transactional id this broker coordinates: its state name (Empty, Ongoing,
  PrepareCommit, ...), timeout, start time, producer id and epoch, and partitions (KIP-664).
- Unknown id: TRANSACTIONAL_ID_NOT_FOUND; not coordinated here: NOT_COORDINATOR.

Version notes:
- v0 only (flexible).
"""

from protocol.api import register

from ..server import RequestContext


@register(65, 0, 0)
async def handle_describe_transactions(ctx: RequestContext, request) -> dict:
    coordinator = ctx.broker.txn_coordinator
    return {"throttle_time": 0,
            "transaction_states": [coordinator.describe(t) for t in request.transactional_ids]}
