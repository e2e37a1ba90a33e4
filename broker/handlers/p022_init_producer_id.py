"""InitProducerId: v0-5

Behavior:
- Without a transactional id (idempotent producers): a fresh producer id from the
  controller's blocks of 1000, epoch 0. Like Kafka, a supplied producer id/epoch (KIP-360)
  is not reused for an idempotent producer: it simply gets a new id.
- With a transactional id: the transaction coordinator bumps the epoch (or hands out a new
  producer id when the epoch is exhausted), fences an ongoing transaction of an older
  incarnation (aborting it at epoch + 1, CONCURRENT_TRANSACTIONS until that is done), and
  refuses a timeout above ``transaction.max.timeout.ms`` (INVALID_TRANSACTION_TIMEOUT).
- PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH before v4.

Version notes:
- v2 flexible; v3 producer id/epoch for epoch bumps (KIP-360); v4 PRODUCER_FENCED may replace
  INVALID_PRODUCER_EPOCH; v5 same as v4 with TV2 semantics on the coordinator.
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..server import RequestContext


@register(22, 0, 5)
async def handle_init_producer_id(ctx: RequestContext, request) -> dict:
    if request.transactional_id is not None:
        error, pid, epoch = await ctx.broker.txn_coordinator.init_producer_id(
            request.transactional_id, int(request.transaction_timeout.total_seconds() * 1000),
            getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1))
        if error == ErrorCode.producer_fenced and ctx.api_version < 4:
            error = ErrorCode.invalid_producer_epoch
        return {"throttle_time": 0, "error_code": error, "producer_id": pid, "producer_epoch": epoch}
    pid = ctx.broker.producer_ids.generate_producer_id()
    return {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0}
