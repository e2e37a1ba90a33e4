"""ListOffsets: v1-11

Behavior:
- Timestamp -2: the log start offset; -1: the high watermark (read_uncommitted) or the last
  stable offset (read_committed); -3: the record with the largest timestamp; -4 (earliest
  local): the log start offset, as all of the log is local; -5 (latest tiered) and -6
  (earliest pending upload): offset -1, timestamp -1, leader epoch -1 with no error, which is
  what Kafka answers when remote storage is not enabled on the topic; any other timestamp:
  the first record whose timestamp is at or after it, or offset -1 and timestamp -1 if there
  is none.
- A special timestamp sent below the version that introduced it (-3 v7, -4 v8, -5 v9, -6
  v11), and any other negative timestamp, gets UNSUPPORTED_VERSION for that partition, as
  Kafka 4.3 answers.
- The leader epoch answered with -2 and -4 is the epoch of the record at the log start offset
  (from the leader-epoch cache, as Kafka), with any other timestamp the current leader epoch.
- An older client leader epoch gets FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH.
- With an authorizer, a topic without DESCRIBE gets TOPIC_AUTHORIZATION_FAILED.

Version notes:
- v2 isolation level; v4 current/returned leader epoch; v6 flexible; v7 max timestamp -3
  (KIP-734); v8 earliest local -4 (KIP-405); v9 latest tiered -5 (KIP-1005); v10 timeout_ms
  for remote-storage lookups (KIP-1075): ignored, every answer here is local and immediate;
  v11 earliest pending upload -6 (KIP-1023).
"""

from protocol.api import register
from protocol.errors import ErrorCode, KafkaError
from storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)

from ..authorization import AclOperation, ResourceType, denied
from ..request_context import RequestContext
from .p001_fetch import READ_COMMITTED

# The first version allowed to ask each special timestamp.
SPECIAL_TIMESTAMP_VERSIONS = {LATEST_TIMESTAMP: 0, EARLIEST_TIMESTAMP: 0, MAX_TIMESTAMP: 7,
                              EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9,
                              EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11}
# Lookups in remote storage, which this broker has none of.
TIERED_TIMESTAMPS = (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP)


@register(2, 1, 11)
async def handle_list_offsets(ctx: RequestContext, request) -> dict:
    isolation = getattr(request, "isolation_level", 0)
    unauthorized = denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics))
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            try:
                if t.name in unauthorized:
                    raise KafkaError(ErrorCode.topic_authorization_failed)
                parts.append(_list_offset(ctx, t.name, p, isolation))
            except KafkaError as exc:
                parts.append(_not_found(p.partition_index, exc.code))
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def _not_found(partition_index: int, code: int = 0) -> dict:
    return {"partition_index": partition_index, "error_code": code, "timestamp": -1, "offset": -1,
            "leader_epoch": -1}


def _check_timestamp(ts: int, version: int) -> None:
    if ts < 0 and SPECIAL_TIMESTAMP_VERSIONS.get(ts, version + 1) > version:
        raise KafkaError(ErrorCode.unsupported_version,
                         f"timestamp {ts} is not supported by ListOffsets v{version}")


def _list_offset(ctx: RequestContext, topic: str, p, isolation: int) -> dict:
    ts = int(p.timestamp)
    _check_timestamp(ts, ctx.api_version)
    part = ctx.services.replica_manager.leader_partition(topic, p.partition_index,
                                                       getattr(p, "current_leader_epoch", -1))
    if ts in TIERED_TIMESTAMPS:
        return _not_found(p.partition_index)
    plog = part.log
    limit = plog.last_stable_offset if isolation == READ_COMMITTED else plog.high_watermark
    found_ts, offset, epoch = -1, -1, part.leader_epoch
    if ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        offset = plog.log_start_offset
        epoch = plog.leader_epochs.epoch_for_offset(offset)
    elif ts == LATEST_TIMESTAMP:
        offset = limit
    elif ts == MAX_TIMESTAMP:
        hit = plog.offset_of_max_timestamp(limit)
        if hit:
            offset, found_ts = hit
    else:
        hit = plog.offset_for_timestamp(ts, limit)
        if hit:
            offset, found_ts = hit
    return {"partition_index": p.partition_index, "error_code": 0, "timestamp": found_ts,
            "offset": offset, "leader_epoch": epoch}
