"""TxnOffsetCommit: v0-5

Behavior:
- Offsets committed inside a transaction: appended to ``__consumer_offsets`` as a
  transactional batch and held pending by the group coordinator until the transaction's
  marker lands (COMMIT makes them visible, ABORT drops them); OffsetFetch with require_stable
  answers UNSTABLE_OFFSET_COMMIT meanwhile.
- KIP-890 verification first (``transaction.partition.verification.enable``): the group's
  ``__consumer_offsets`` partition must be in the producer's transaction (AddOffsetsToTxn),
  else TRANSACTION_ABORTABLE (v4+; INVALID_TXN_STATE before, as Kafka 4.3.1 answers them); a
  stale producer epoch is INVALID_PRODUCER_EPOCH. The transaction
  coordinator is asked where it is (AddPartitionsToTxn v4 verify_only to its broker);
  while it cannot answer, COORDINATOR_NOT_AVAILABLE (retriable). A marker that ends the
  transaction while it is verified makes the append INVALID_TXN_STATE (Kafka's
  verification guard): the offsets never join a transaction that already ended.
- v5 (transaction version 2, KIP-890 part 2): the group's partition is added to the
  transaction (AddPartitionsToTxn v4 without verify_only to the coordinator's broker) instead
  of verified, whatever the verification setting, so the producer sends no AddOffsetsToTxn.
- KIP-447 fencing (v3+): a stale generation gets ILLEGAL_GENERATION, an unknown member
  UNKNOWN_MEMBER_ID; for a KIP-848 consumer group any member epoch but the member's is
  ILLEGAL_GENERATION too (this API has no STALE_MEMBER_EPOCH).
- With an authorizer: WRITE on the transactional id (else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the group (else GROUP_AUTHORIZATION_FAILED),
  READ on each topic (else TOPIC_AUTHORIZATION_FAILED).

Version notes:
- v2 committed leader epoch; v3 generation, member id, group instance id (KIP-447); v3+
  flexible; before v2 COORDINATOR_LOAD_IN_PROGRESS is answered as COORDINATOR_NOT_AVAILABLE;
  v4 may answer TRANSACTION_ABORTABLE; v5 adds the partition implicitly (above).
"""

from coordinator.group.metadata import OFFSETS_TOPIC
from coordinator.group.state import OffsetAndMetadata
from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, ResourceType, authorize, denied
from ..request_context import RequestContext


async def _verify(ctx: RequestContext, request) -> tuple[int, object | None]:
    """Kafka's verification of the group's offsets partition, errors as Kafka maps them for
    TxnOffsetCommit; the transaction coordinator may be on another broker. Also the
    verification guard taken before the wait, which the append then requires."""
    broker = ctx.services
    add = ctx.api_version >= ADD_VERSION
    if not (add or broker.config["transaction.partition.verification.enable"]) or not request.transactional_id \
            or broker.group_coordinator.coordinator_error(request.group_id):
        return 0, None  # (group errors first, as in Kafka: the group coordinator answers them)
    try:
        tp = (OFFSETS_TOPIC, broker.group_coordinator.partition_for(request.group_id))
    except KafkaError:
        return 0, None
    guard = broker.replica_manager.start_verification(*tp, request.producer_id, request.producer_epoch, add)
    code = (await broker.txn_services.verify_partitions(request.transactional_id, request.producer_id,
                                                        request.producer_epoch, [tp], add=add))[tp]
    if code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch):
        return ErrorCode.invalid_producer_epoch, None
    if code == ErrorCode.transaction_abortable and ctx.api_version < ABORTABLE_VERSION:
        return ErrorCode.invalid_txn_state, None
    if code in _RETRIABLE:
        return ErrorCode.coordinator_not_available, None
    return code, guard


def _authorization_errors(ctx: RequestContext, request) -> tuple[int, set]:
    """WRITE on the transactional id, READ on the group (each failing the whole request), and
    the topics without READ (TOPIC_AUTHORIZATION_FAILED), as Kafka's KafkaApis."""
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return ErrorCode.transactional_id_authorization_failed, set()
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ErrorCode.group_authorization_failed, set()
    return 0, denied(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))


# A coordinator that cannot answer yet: the producer retries the commit.
_RETRIABLE = (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
              ErrorCode.concurrent_transactions, ErrorCode.network_exception, ErrorCode.request_timed_out)


ADD_VERSION = 5  # the group's partition joins the transaction implicitly (transaction version 2)
ABORTABLE_VERSION = 4  # KIP-890: older clients know TRANSACTION_ABORTABLE as INVALID_TXN_STATE


@register(28, 0, 5)
async def handle_txn_offset_commit(ctx: RequestContext, request) -> dict:
    error, unauthorized = _authorization_errors(ctx, request)
    guard = None
    if not error:
        error, guard = await _verify(ctx, request)
    if error:
        errors: dict = {}
        default = error
    else:
        offsets = {(t.name, p.partition_index): OffsetAndMetadata(
            offset=p.committed_offset, leader_epoch=getattr(p, "committed_leader_epoch", -1),
            metadata=p.committed_metadata or "")
            for t in request.topics for p in t.partitions if t.name not in unauthorized}
        errors = await ctx.services.group_coordinator.offsets.txn_offset_commit(
            group_id=request.group_id, producer_id=request.producer_id, producer_epoch=request.producer_epoch,
            member_id=getattr(request, "member_id", ""), group_instance_id=getattr(request, "group_instance_id", None),
            generation_id=getattr(request, "generation_id", -1), offsets=offsets, verification_guard=guard)
        default = 0
        errors.update({(t.name, p.partition_index): ErrorCode.topic_authorization_failed
                       for t in request.topics if t.name in unauthorized for p in t.partitions})

    def code(tp) -> int:
        c = errors.get(tp, default)
        if c == ErrorCode.coordinator_load_in_progress and ctx.api_version < 2:
            return ErrorCode.coordinator_not_available
        return c

    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": code((t.name, p.partition_index))}
                                        for p in t.partitions]}
        for t in request.topics]}
