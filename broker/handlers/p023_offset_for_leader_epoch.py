"""OffsetForLeaderEpoch: v2-4

Behavior:
- For each partition, the end offset of the requested leader epoch (the start of the next
  higher epoch, or the log end offset for the current one) and the largest epoch at or below
  it, as Kafka's LeaderEpochFileCache computes them; UNDEFINED (-1, -1) for an epoch newer
  than any known.
- An older client leader epoch gets FENCED_LEADER_EPOCH, a newer UNKNOWN_LEADER_EPOCH.

Version notes:
- v2 current leader epoch; v3 replica id; v4 flexible.
"""

from protocol.api import register
from protocol.errors import KafkaError

from ..server import RequestContext


@register(23, 2, 4)
async def handle_offset_for_leader_epoch(ctx: RequestContext, request) -> dict:
    rm = ctx.services.replica_manager
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            try:
                part = rm.leader_partition(t.topic, p.partition, p.current_leader_epoch)
                epoch, end = part.log.leader_epochs.end_offset_for(p.leader_epoch, part.log.log_end_offset)
                parts.append({"error_code": 0, "partition": p.partition, "leader_epoch": epoch,
                              "end_offset": end})
            except KafkaError as exc:
                parts.append({"error_code": exc.code, "partition": p.partition, "leader_epoch": -1,
                              "end_offset": -1})
        topics.append({"topic": t.topic, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
