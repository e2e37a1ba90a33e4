"""EndTxn: v0-5

Behavior:
- Commit or abort: PrepareCommit/PrepareAbort is written to ``__transaction_state`` and
  answered once durable; the markers follow asynchronously, then CompleteCommit/CompleteAbort.
- A retried EndTxn for a completed transaction with the same outcome succeeds; while the
  markers are in flight, CONCURRENT_TRANSACTIONS; the other outcome of a completed
  transaction, or no transaction (Empty), INVALID_TXN_STATE; an unknown id or producer id
  INVALID_PRODUCER_ID_MAPPING; a stale epoch PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2).
- v5 is transaction version 2 (KIP-890 part 2): the coordinator bumps the producer epoch on
  every commit and abort (moving to a new producer id at epoch 0 when the epoch is exhausted)
  and answers the producer id and epoch of the next transaction; a retry at the epoch just
  before succeeds with them again; an abort with nothing in the transaction bumps the epoch.
- With an authorizer: WRITE on the transactional id, else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

Version notes:
- v2 PRODUCER_FENCED; v3 flexible; v4 TRANSACTION_ABORTABLE; v5 the producer id and epoch.
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext

TV2_VERSION = 5  # Kafka's TransactionVersion.transactionVersionForEndTxn


@register(26, 0, 5)
async def handle_end_txn(ctx: RequestContext, request) -> dict:
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return _response(ErrorCode.transactional_id_authorization_failed)
    transaction_version = 2 if ctx.api_version >= TV2_VERSION else 0
    code, producer_id, producer_epoch = await ctx.services.txn_coordinator.end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed,
        transaction_version)
    if code == ErrorCode.producer_fenced and ctx.api_version < 2:
        code = ErrorCode.invalid_producer_epoch
    return _response(code, producer_id, producer_epoch)


def _response(code: int, producer_id: int = -1, producer_epoch: int = -1) -> dict:
    # v0-4 have no producer id and epoch: the encoder leaves out what the version lacks.
    return {"throttle_time": 0, "error_code": code, "producer_id": producer_id, "producer_epoch": producer_epoch}
