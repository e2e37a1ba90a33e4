"""EndTxn: v0-4

Behavior:
- Commit or abort: PrepareCommit/PrepareAbort is written to ``__transaction_state`` and
  answered once durable; the markers follow asynchronously, then CompleteCommit/CompleteAbort.
- A retried EndTxn for a completed transaction with the same outcome succeeds; while the
  markers are in flight, CONCURRENT_TRANSACTIONS; the other outcome of a completed
  transaction, or no transaction (Empty), INVALID_TXN_STATE; an unknown id or producer id
  INVALID_PRODUCER_ID_MAPPING; a stale epoch PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2).
- With an authorizer: WRITE on the transactional id, else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

Version notes:
- v2 PRODUCER_FENCED; v3 flexible; v5 (TV2) is not advertised.
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext


@register(26, 0, 4)
async def handle_end_txn(ctx: RequestContext, request) -> dict:
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    code = await ctx.services.txn_coordinator.end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed)
    if code == ErrorCode.producer_fenced and ctx.api_version < 2:
        code = ErrorCode.invalid_producer_epoch
    return {"throttle_time": 0, "error_code": code}
