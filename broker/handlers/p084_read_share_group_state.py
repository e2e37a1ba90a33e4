"""ReadShareGroupState: v0 (KIP-932, inter-broker)

Behavior:
- Answered by the share coordinator (``coordinator/share/persister.py``) for the
  share-partitions whose ``__share_group_state`` partition this broker leads: the state
  epoch, start offset and state batches; -1 and no batches for a share-partition with no
  state. NOT_COORDINATOR where another broker leads the state partition,
  COORDINATOR_LOAD_IN_PROGRESS while it is replayed.
- With an authorizer: CLUSTER_ACTION on the cluster (a broker's request), else
  CLUSTER_AUTHORIZATION_FAILED for every partition.

Version notes:
- v0 only. The share-partition leader sends it (``broker/share_remote.py``).
"""

from protocol.api import register
from protocol.errors import KafkaError

from ..authorization import AclOperation, authorize_cluster, refused_state_request
from ..request_context import RequestContext


@register(84, 0, 0)
async def handle_read_share_group_state(ctx: RequestContext, request) -> dict:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return refused_state_request(request, state_epoch=0, start_offset=-1, state_batches=[])
    coordinator = ctx.services.share_coordinator
    results = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            key = (request.group_id, topic.topic_id, p.partition)
            out = {"partition": p.partition, "error_code": 0, "state_epoch": 0, "start_offset": -1,
                   "state_batches": []}
            try:
                state = coordinator.read(coordinator.partition_for(key), key)
            except KafkaError as exc:
                out.update(error_code=exc.code, error_message=exc.message)
                state = None
            if state is not None:
                out.update(state_epoch=state.state_epoch, start_offset=state.start_offset, state_batches=[
                    {"first_offset": b.first_offset, "last_offset": b.last_offset,
                     "delivery_state": b.state.value, "delivery_count": b.delivery_count}
                    for b in state.batches])
            partitions.append(out)
        results.append({"topic_id": topic.topic_id, "partitions": partitions})
    return {"results": results}
