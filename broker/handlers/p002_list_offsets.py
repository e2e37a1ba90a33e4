"""ListOffsets: v1-7

Behavior:
- Timestamp -2: the log start offset; -1: the high watermark (read_uncommitted) or the last
  stable offset (read_committed); -3 (v7, KIP-734): the record with the largest timestamp;
  -4 (earliest local) as -2; any other: the first record whose timestamp is at or after it,
  or offset -1 and timestamp -1 if there is none.
- An older client leader epoch gets FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH.

Version notes:
- v2 isolation level; v4 current/returned leader epoch; v6 flexible; v7 max timestamp.
"""

from protocol.api import register
from protocol.errors import ErrorCode, KafkaError
from storage.log import EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

from ..server import RequestContext
from .p001_fetch import READ_COMMITTED


@register(2, 1, 7)
async def handle_list_offsets(ctx: RequestContext, request) -> dict:
    isolation = getattr(request, "isolation_level", 0)
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            try:
                parts.append(_list_offset(ctx, t.name, p, isolation))
            except KafkaError as exc:
                parts.append({"partition_index": p.partition_index, "error_code": exc.code,
                              "timestamp": -1, "offset": -1, "leader_epoch": -1})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def _list_offset(ctx: RequestContext, topic: str, p, isolation: int) -> dict:
    part = ctx.services.replica_manager.leader_partition(topic, p.partition_index,
                                                       getattr(p, "current_leader_epoch", -1))
    plog = part.log
    limit = plog.last_stable_offset if isolation == READ_COMMITTED else plog.high_watermark
    ts = int(p.timestamp)
    found_ts, offset = -1, -1
    if ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        offset = plog.log_start_offset
    elif ts == LATEST_TIMESTAMP:
        offset = limit
    elif ts == MAX_TIMESTAMP:
        hit = plog.offset_of_max_timestamp(limit)
        if hit:
            offset, found_ts = hit
    elif ts < 0:
        raise KafkaError(ErrorCode.invalid_request, f"unsupported special timestamp {ts}")
    else:
        hit = plog.offset_for_timestamp(ts, limit)
        if hit:
            offset, found_ts = hit
    return {"partition_index": p.partition_index, "error_code": 0, "timestamp": found_ts,
            "offset": offset, "leader_epoch": part.leader_epoch}
