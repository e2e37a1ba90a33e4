"""DeleteShareGroupState: v0 (KIP-932, inter-broker)

Behavior:
- The share coordinator (``coordinator/share/persister.py``) forgets each share-partition's
  state: a tombstone appended to ``__share_group_state`` with acks=all. NOT_COORDINATOR where
  another broker leads the state partition, COORDINATOR_LOAD_IN_PROGRESS while it is replayed.
- With an authorizer: CLUSTER_ACTION on the cluster (a broker's request), else
  CLUSTER_AUTHORIZATION_FAILED for every partition.

Version notes:
- v0 only.
"""

from protocol.api import register
from protocol.errors import KafkaError

from ..authorization import AclOperation, authorize_cluster, refused_state_request
from ..server import RequestContext


@register(86, 0, 0)
async def handle_delete_share_group_state(ctx: RequestContext, request) -> dict:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return refused_state_request(request)
    coordinator = ctx.services.share_coordinator
    results = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            key = (request.group_id, topic.topic_id, p.partition)
            try:
                await coordinator.write(coordinator.partition_for(key), key, None)
                partitions.append({"partition": p.partition, "error_code": 0})
            except KafkaError as exc:
                partitions.append({"partition": p.partition, "error_code": exc.code, "error_message": exc.message})
        results.append({"topic_id": topic.topic_id, "partitions": partitions})
    return {"results": results}
