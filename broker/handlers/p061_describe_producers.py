"""DescribeProducers: v0

Behavior:
- For each requested partition led here: the producers the partition's producer state
  tracks (KIP-664), with epoch, last sequence, last timestamp, coordinator epoch and the
  first offset of the producer's open transaction (-1 if none).
- A partition this broker does not host: UNKNOWN_TOPIC_OR_PARTITION.
- With an authorizer: READ on the topic, else TOPIC_AUTHORIZATION_FAILED.

Version notes:
- v0 only (flexible).
"""

from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, ResourceType, denied
from ..request_context import RequestContext


@register(61, 0, 0)
async def handle_describe_producers(ctx: RequestContext, request) -> dict:
    rm = ctx.services.replica_manager
    unauthorized = denied(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    topics = []
    for t in request.topics:
        parts = []
        for index in t.partition_indexes:
            try:
                if t.name in unauthorized:
                    raise KafkaError(ErrorCode.topic_authorization_failed)
                producers = rm.leader_partition(t.name, index).log.producer_state.producers.values()
                parts.append({"partition_index": index, "error_code": 0, "error_message": None,
                              "active_producers": [
                                  {"producer_id": e.producer_id, "producer_epoch": e.producer_epoch,
                                   "last_sequence": e.last_seq, "last_timestamp": e.last_timestamp,
                                   "coordinator_epoch": e.coordinator_epoch,
                                   "current_txn_start_offset": e.current_txn_first_offset}
                                  for e in producers]})
            except KafkaError as exc:
                parts.append({"partition_index": index, "error_code": exc.code,
                              "error_message": exc.message, "active_producers": []})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
