"""OffsetForLeaderEpoch: v2-4

Behavior:
- For each partition, the end offset of the requested leader epoch (the start of the next
  higher epoch, or the log end offset for the current one) and the largest epoch at or below
  it, as Kafka's LeaderEpochFileCache computes them; UNDEFINED (-1, -1) for an epoch newer
  than any known.
- An older client leader epoch gets FENCED_LEADER_EPOCH, a newer UNKNOWN_LEADER_EPOCH.
- With an authorizer: CLUSTER_ACTION on the cluster, or DESCRIBE on the topic, else
  TOPIC_AUTHORIZATION_FAILED (Kafka allows either since KIP-320).

Version notes:
- v2 current leader epoch; v3 replica id; v4 flexible.
"""

from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, ResourceType, authorize_cluster, denied
from ..request_context import RequestContext


def _unauthorized_topics(ctx: RequestContext, request):
    """CLUSTER_ACTION on the cluster (a follower) covers every topic, else DESCRIBE on each."""
    if ctx.services.authorizer is not None and authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return set()
    return denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.topic for t in request.topics))


@register(23, 2, 4)
async def handle_offset_for_leader_epoch(ctx: RequestContext, request) -> dict:
    rm = ctx.services.replica_manager
    unauthorized = _unauthorized_topics(ctx, request)
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            try:
                if t.topic in unauthorized:
                    raise KafkaError(ErrorCode.topic_authorization_failed)
                part = rm.leader_partition(t.topic, p.partition, p.current_leader_epoch)
                epoch, end = part.log.leader_epochs.end_offset_for(p.leader_epoch, part.log.log_end_offset)
                parts.append({"error_code": 0, "partition": p.partition, "leader_epoch": epoch,
                              "end_offset": end})
            except KafkaError as exc:
                parts.append({"error_code": exc.code, "partition": p.partition, "leader_epoch": -1,
                              "end_offset": -1})
        topics.append({"topic": t.topic, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
