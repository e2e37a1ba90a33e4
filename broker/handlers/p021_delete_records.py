"""DeleteRecords: v0-2

Behavior:
- For each partition, advances the log start offset to ``offset`` (-1: the high watermark)
  on the leader and answers once every ISR follower has followed (their log start offsets
  come with their fetches; REQUEST_TIMED_OUT at the request's timeout);
  whole segments below it are removed, and consumers starting at "earliest" begin there. The
  result's low_watermark is the new log start offset; an offset at or below the current
  start changes nothing and returns the current start.
- An offset above the high watermark, or negative other than -1: OFFSET_OUT_OF_RANGE.
- An unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION; an internal topic:
  INVALID_TOPIC_EXCEPTION; a topic whose cleanup.policy lacks ``delete``: POLICY_VIOLATION
  (Kafka's ReplicaManager / Partition.deleteRecordsOnLeader). Failed partitions report
  low_watermark -1.
- As Kafka, the new log start offset reaches the log-start-offset checkpoint on the next
  periodic checkpoint or clean shutdown.
- With an authorizer: DELETE on the topic, else TOPIC_AUTHORIZATION_FAILED.

Version notes:
- v1 same layout (throttling); v2 flexible.
"""

import time

import structlog

from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, ResourceType, denied
from ..replica_manager import INTERNAL_TOPICS
from ..request_context import RequestContext

HIGH_WATERMARK = -1

log = structlog.get_logger("broker.admin")


@register(21, 0, 2)
async def handle_delete_records(ctx: RequestContext, request) -> dict:
    topics = []
    deadline = time.monotonic() + request.timeout.total_seconds()
    unauthorized = denied(ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics))
    for t in request.topics:
        parts = []
        for p in t.partitions:
            try:
                if t.name in unauthorized:
                    raise KafkaError(ErrorCode.topic_authorization_failed)
                low = _delete(ctx, t.name, p.partition_index, p.offset)
                low = await _replicated_low_watermark(ctx, t.name, p.partition_index, low, deadline)
                parts.append({"partition_index": p.partition_index, "low_watermark": low, "error_code": 0})
            except KafkaError as exc:
                parts.append({"partition_index": p.partition_index, "low_watermark": -1,
                              "error_code": exc.code})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


async def _replicated_low_watermark(ctx: RequestContext, topic: str, partition: int, offset: int,
                                    deadline: float) -> int:
    """Wait until every ISR follower's log start offset reached ``offset`` (Kafka's
    DelayedDeleteRecords); REQUEST_TIMED_OUT at the request's timeout."""
    rm = ctx.services.replica_manager
    part = rm.leader_partition(topic, partition)
    while part.low_watermark < offset:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KafkaError(ErrorCode.request_timed_out, "followers did not delete the records in time")
        await rm.wait_for_data([part], remaining)
        part = rm.leader_partition(topic, partition)
    return offset


def _delete(ctx: RequestContext, topic: str, partition: int, offset: int) -> int:
    part = ctx.services.replica_manager.leader_partition(topic, partition)
    if topic in INTERNAL_TOPICS:
        raise KafkaError(ErrorCode.invalid_topic_exception, f"Cannot delete records of internal topic {topic}")
    plog = part.log
    if not plog.config.delete:
        raise KafkaError(ErrorCode.policy_violation,
                         f"Records of partition {topic}-{partition} can not be deleted due to the configured policy")
    if offset == HIGH_WATERMARK:
        offset = plog.high_watermark
    if offset < 0:
        raise KafkaError(ErrorCode.offset_out_of_range,
                         f"The offset {offset} for partition {topic}-{partition} is not valid")
    before = plog.log_start_offset
    after = plog.delete_records_before(offset)
    if after != before:
        log.info("log_start_offset_incremented", topic=topic, partition=partition, before=before,
                 after=after, reason="delete_records")
        part.wake_waiters()  # fetch sessions that read it to its end tell the new log start
    return after
