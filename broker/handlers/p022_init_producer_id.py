"""InitProducerId: v0-5

Behavior:
- Without a transactional id (idempotent producers): a fresh producer id from the
  controller's blocks of 1000, epoch 0. Like Kafka, a supplied producer id/epoch (KIP-360)
  is not reused for an idempotent producer: it simply gets a new id.
- With a transactional id: answered by the transaction coordinator (not implemented yet:
  COORDINATOR_NOT_AVAILABLE, which clients retry).

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
        return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available,
                "producer_id": -1, "producer_epoch": -1}
    pid = ctx.broker.producer_ids.generate_producer_id()
    return {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0}
