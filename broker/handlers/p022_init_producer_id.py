"""InitProducerId: v0-5 (v6 with ``unstable.api.versions.enable``)

Behavior:
- producer_id/producer_epoch (v3+): both -1, or both set (KIP-360: the producer's current id
  and epoch, for an epoch bump after an error); exactly one of them -1 is INVALID_REQUEST.
- Without a transactional id (idempotent producers): a fresh producer id from the
  controller's blocks of 1000, epoch 0. Like Kafka, a supplied producer id/epoch is not
  reused for an idempotent producer: it simply gets a new id.
- With a transactional id (the transaction coordinator): "" is INVALID_REQUEST; a timeout
  outside (0, ``transaction.max.timeout.ms``] INVALID_TRANSACTION_TIMEOUT; otherwise the
  next epoch (a new producer id when the epochs are exhausted). An ongoing transaction of an
  older incarnation is fenced: aborted at epoch + 1, CONCURRENT_TRANSACTIONS until that is
  done (the client retries and gets epoch + 2). A stale KIP-360 id/epoch is PRODUCER_FENCED;
  COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR as the coordinator's state says.
- v6 (KIP-939, two-phase commit), as Kafka 4.3.1 answers it: ``enable2Pc`` needs
  TWO_PHASE_COMMIT on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and
  ``transaction.two.phase.commit.enable`` (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED too); the
  transaction then has no timeout (the request's is not checked); ``keepPreparedTxn`` is
  UNSUPPORTED_VERSION; the ongoing transaction's producer id and epoch are answered -1.
- PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH before v4.
- With an authorizer: WRITE on the transactional id (else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without one, IDEMPOTENT_WRITE on the cluster or WRITE
  on some topic (KIP-679), else CLUSTER_AUTHORIZATION_FAILED.

Version notes:
- v2 flexible; v3 producer id/epoch for epoch bumps (KIP-360); v4 PRODUCER_FENCED may replace
  INVALID_PRODUCER_EPOCH; v5 (TRANSACTION_ABORTABLE for clients) answered as v4; v6 (unstable
  in Kafka 4.3.1, advertised only as Kafka advertises it) enable2Pc and keepPreparedTxn.
"""

from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import (
    AclOperation,
    ResourceType,
    authorize,
    authorize_by_resource_type,
    authorize_cluster,
)
from ..request_context import RequestContext


def _authorization_error(ctx: RequestContext, transactional_id: str | None, two_phase_commit: bool) -> int:
    """WRITE on the transactional id (and TWO_PHASE_COMMIT for a 2PC producer); without one
    IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679), as Kafka's KafkaApis."""
    if transactional_id is not None:
        if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return ErrorCode.transactional_id_authorization_failed
        if two_phase_commit and not authorize(ctx, AclOperation.TWO_PHASE_COMMIT, ResourceType.TRANSACTIONAL_ID,
                                              transactional_id):
            return ErrorCode.transactional_id_authorization_failed
    elif not (authorize_cluster(ctx, AclOperation.IDEMPOTENT_WRITE)
              or authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC)):
        return ErrorCode.cluster_authorization_failed
    return 0


@register(22, 0, 5, unstable_max=6)
async def handle_init_producer_id(ctx: RequestContext, request) -> dict:
    pid, epoch = getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1)
    if (pid == -1) != (epoch == -1):
        return {"throttle_time": 0, "error_code": ErrorCode.invalid_request, "producer_id": -1,
                "producer_epoch": -1}
    expected = None if pid == -1 else (pid, epoch)
    two_phase_commit = getattr(request, "enable2_pc", False)
    refused = _authorization_error(ctx, request.transactional_id, two_phase_commit)
    if refused:
        return {"throttle_time": 0, "error_code": refused, "producer_id": -1, "producer_epoch": -1}
    if request.transactional_id is None:
        try:
            pid = ctx.services.producer_ids.generate_producer_id()
        except KafkaError as exc:  # the next producer-id block is still being allocated
            return {"throttle_time": 0, "error_code": exc.code, "producer_id": -1, "producer_epoch": -1}
        return {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0}
    try:
        error, pid, epoch = await ctx.services.txn_coordinator.init_producer_id(
            request.transactional_id, int(request.transaction_timeout.total_seconds() * 1000), expected,
            enable_two_phase_commit=two_phase_commit,
            keep_prepared_txn=getattr(request, "keep_prepared_txn", False))
    except KafkaError as exc:
        error, pid, epoch = exc.code, -1, -1
    if error == ErrorCode.producer_fenced and ctx.api_version < 4:
        error = ErrorCode.invalid_producer_epoch
    return {"throttle_time": 0, "error_code": error, "producer_id": pid, "producer_epoch": epoch}
