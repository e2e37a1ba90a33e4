"""AddPartitionsToTxn: v0-5

Behavior:
- v0-3 (clients): adds the partitions to the producer's transaction (Ongoing), written to
  ``__transaction_state`` before the answer; partitions already in an ongoing transaction are
  answered without a write.
- A partition missing from the cluster metadata gets UNKNOWN_TOPIC_OR_PARTITION and every
  other partition OPERATION_NOT_ATTEMPTED (nothing is added); otherwise every partition gets
  the coordinator's answer: INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED
  (INVALID_PRODUCER_EPOCH before v2), CONCURRENT_TRANSACTIONS while the previous commit/abort
  is completing, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...
- v4-5 (broker to coordinator, KIP-890): a batch of transactions; ``verify_only`` ones are
  checked, not changed: NONE for a partition in the ongoing transaction, TRANSACTION_ABORTABLE
  for one that is not; the others (a Produce v12+ or TxnOffsetCommit v5+ adding its partition,
  KIP-890 part 2) are added under transaction version 2.
- With an authorizer: v0-3 need WRITE on the transactional id (else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED everywhere) and on each topic (else
  TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED); v4+ (from brokers)
  CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED.

Version notes:
- v2 PRODUCER_FENCED; v3 flexible; v4 batched by transaction with verify_only and a
  top-level error code; v5 may answer TRANSACTION_ABORTABLE (so does v4 in Kafka 4.x).
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize, authorize_cluster, denied
from ..request_context import RequestContext


def _unknown_partitions(broker, partitions: set[tuple[str, int]]) -> set[tuple[str, int]]:
    unknown = set()
    for topic, p in partitions:
        state = broker.metadata.topics.get(topic)
        if state is None or not 0 <= p < len(state.partitions):
            unknown.add((topic, p))
    return unknown


async def _add(ctx: RequestContext, txn_id: str, pid: int, epoch: int, topics: dict[str, list[int]],
               verify_only: bool) -> dict[tuple[str, int], int]:
    broker = ctx.services
    partitions = {(t, p) for t, ps in topics.items() for p in ps}
    if not verify_only:  # a broker's verification was authorized as CLUSTER_ACTION
        refused = _authorization_errors(ctx, txn_id, partitions)
        if refused:
            return refused
    unknown = _unknown_partitions(broker, partitions)
    if unknown:
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                for tp in partitions}
    coordinator = broker.txn_coordinator
    if verify_only:
        return await coordinator.verify_partitions(txn_id, pid, epoch, sorted(partitions))
    # Kafka's transactionVersionForAddPartitionsToTxn: v4+ adds come from a TV2 produce.
    code = await coordinator.add_partitions(txn_id, pid, epoch, partitions,
                                            transaction_version=2 if ctx.api_version >= 4 else 0)
    if code == ErrorCode.producer_fenced and ctx.api_version < 2:
        code = ErrorCode.invalid_producer_epoch
    return {tp: code for tp in partitions}


def _authorization_errors(ctx: RequestContext, txn_id: str, partitions: set) -> dict | None:
    """WRITE on the transactional id (else every partition fails with
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and on each topic (else TOPIC_AUTHORIZATION_FAILED,
    the others OPERATION_NOT_ATTEMPTED), as Kafka's KafkaApis."""
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return {tp: ErrorCode.transactional_id_authorization_failed for tp in partitions}
    unauthorized = denied(ctx, AclOperation.WRITE, ResourceType.TOPIC, {t for t, _ in partitions})
    if not unauthorized:
        return None
    return {tp: ErrorCode.topic_authorization_failed if tp[0] in unauthorized else ErrorCode.operation_not_attempted
            for tp in partitions}


def _topic_results(topics: dict[str, list[int]], errors: dict[tuple[str, int], int]) -> list[dict]:
    return [{"name": t, "results_by_partition": [{"partition_index": p, "partition_error_code": errors[(t, p)]}
                                                 for p in dict.fromkeys(ps)]}
            for t, ps in topics.items()]


@register(24, 0, 5)
async def handle_add_partitions_to_txn(ctx: RequestContext, request) -> dict:
    if ctx.api_version < 4:
        topics: dict[str, list[int]] = {}
        for t in request.v3_and_below_topics:
            topics.setdefault(t.name, []).extend(t.partitions)
        errors = await _add(ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                            request.v3_and_below_producer_epoch, topics, verify_only=False)
        return {"throttle_time": 0, "results_by_topic_v3_and_below": _topic_results(topics, errors)}
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):  # v4+ comes from brokers
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "results_by_transaction": []}
    results = []
    for txn in request.transactions:
        topics = {}
        for t in txn.topics:
            topics.setdefault(t.name, []).extend(t.partitions)
        errors = await _add(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, topics,
                            verify_only=txn.verify_only)
        results.append({"transactional_id": txn.transactional_id, "topic_results": _topic_results(topics, errors)})
    return {"throttle_time": 0, "error_code": 0, "results_by_transaction": results}
