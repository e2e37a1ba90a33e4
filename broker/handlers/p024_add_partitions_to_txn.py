"""AddPartitionsToTxn: v0-3 (from clients)

Behavior:
- Adds the partitions to the producer's transaction (Ongoing), written to
  ``__transaction_state`` before the answer; partitions already in an ongoing transaction
  are answered without a write.
- Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION and the others
  OPERATION_NOT_ATTEMPTED; otherwise every partition gets the coordinator's answer:
  INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2),
  CONCURRENT_TRANSACTIONS while a commit/abort is completing, NOT_COORDINATOR, ...

Version notes:
- v2 PRODUCER_FENCED; v3 flexible; v4-5 (batched, verify-only, broker to broker) are not
  needed on one broker: verification is a local call from the Produce path.
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..server import RequestContext


@register(24, 0, 3)
async def handle_add_partitions_to_txn(ctx: RequestContext, request) -> dict:
    broker = ctx.broker
    topics = {t.name: list(t.partitions) for t in request.v3_and_below_topics}
    partitions = {(t, p) for t, ps in topics.items() for p in ps}
    unknown = {tp for tp in partitions if tp not in broker.replica_manager.partitions}
    if unknown:
        errors = {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                  for tp in partitions}
    else:
        code = await broker.txn_coordinator.add_partitions(
            request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, partitions)
        if code == ErrorCode.producer_fenced and ctx.api_version < 2:
            code = ErrorCode.invalid_producer_epoch
        errors = {tp: code for tp in partitions}
    return {"throttle_time": 0, "results_by_topic_v3_and_below": [
        {"name": t, "results_by_partition": [{"partition_index": p, "partition_error_code": errors[(t, p)]}
                                             for p in ps]}
        for t, ps in topics.items()]}
