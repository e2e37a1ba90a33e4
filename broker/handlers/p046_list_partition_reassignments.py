"""ListPartitionReassignments: v0

Behavior:
- Lists the partitions being reassigned (all of them when the topic list is null, else the
  listed ones that are): current replicas with the replicas being added and removed.
  Partitions that do not exist or are not being reassigned are left out, as Kafka does.
- With an authorizer: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED.

Version notes:
- v0 flexible.
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, authorize_cluster
from ..request_context import RequestContext


@register(46, 0, 0)
async def handle_list_partition_reassignments(ctx: RequestContext, request) -> dict:
    metadata = ctx.services.metadata
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None,
                "topics": []}
    if request.topics is None:
        wanted = [(t.name, i) for t in metadata.topics.values() for i in range(len(t.partitions))]
    else:
        wanted = [(t.name, i) for t in request.topics for i in t.partition_indexes]
    by_topic: dict[str, list[dict]] = {}
    for topic, index in wanted:
        state = metadata.partition(topic, index)
        if state is None or not (state.adding_replicas or state.removing_replicas):
            continue
        by_topic.setdefault(topic, []).append({
            "partition_index": index, "replicas": state.replicas,
            "adding_replicas": state.adding_replicas, "removing_replicas": state.removing_replicas})
    return {"throttle_time": 0, "error_code": 0, "error_message": None,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
