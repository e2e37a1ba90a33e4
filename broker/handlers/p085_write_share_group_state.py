"""WriteShareGroupState: v0-1 (KIP-932, inter-broker)

Behavior:
- The share coordinator (``coordinator/share/persister.py``) replaces the state of each
  share-partition with the one sent (a full snapshot), appended to ``__share_group_state``
  with acks=all before it answers. NOT_COORDINATOR where another broker leads the state
  partition, COORDINATOR_LOAD_IN_PROGRESS while it is replayed, COORDINATOR_NOT_AVAILABLE
  when the append fails.
- With an authorizer: CLUSTER_ACTION on the cluster (a broker's request), else
  CLUSTER_AUTHORIZATION_FAILED for every partition.

Version notes:
- v1 adds ``delivery_complete_count`` (KIP-1226): not stored, it is recomputed from the
  batches.
"""

from coordinator.share.partition import PersistedState, RecordState, StateBatch
from protocol.api import register
from protocol.errors import KafkaError

from ..authorization import AclOperation, authorize_cluster, refused_state_request
from ..server import RequestContext


@register(85, 0, 1)
async def handle_write_share_group_state(ctx: RequestContext, request) -> dict:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return refused_state_request(request)
    coordinator = ctx.services.share_coordinator
    results = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            key = (request.group_id, topic.topic_id, p.partition)
            state = PersistedState(p.start_offset, p.state_epoch, p.leader_epoch, [
                StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
                for b in p.state_batches])
            try:
                await coordinator.write(coordinator.partition_for(key), key, state)
                partitions.append({"partition": p.partition, "error_code": 0})
            except KafkaError as exc:
                partitions.append({"partition": p.partition, "error_code": exc.code, "error_message": exc.message})
        results.append({"topic_id": topic.topic_id, "partitions": partitions})
    return {"results": results}
