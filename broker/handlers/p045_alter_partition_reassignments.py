"""AlterPartitionReassignments: v0

Behavior:
- Starts moving each listed partition to its target replica list (KIP-455): the new replicas
  join as followers and copy the log by replication; once every target replica is in the ISR
  the controller drops the others (and moves leadership if the leader is leaving).
- A null replica list cancels the partition's reassignment (NO_REASSIGNMENT_IN_PROGRESS if
  there is none). An empty, duplicated or unregistered replica list is
  INVALID_REPLICA_ASSIGNMENT; an unknown partition UNKNOWN_TOPIC_OR_PARTITION.
- With an authorizer: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED.

Version notes:
- v0 flexible (v1, allowing replication-factor changes to be refused, is not advertised).
"""

from metadata.controller.partition_change import cancel_reassignment, start_reassignment
from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, authorize_cluster
from ..request_context import RequestContext


def _check_target(metadata, replicas: list[int]) -> str | None:
    if not replicas:
        return "The replica list is empty."
    if len(set(replicas)) != len(replicas):
        return f"The replica list {replicas} contains duplicates."
    missing = [r for r in replicas if r not in metadata.registered]
    if missing:
        return f"The replica list {replicas} names brokers that are not registered: {missing}."
    return None


@register(45, 0, 0)
async def handle_alter_partition_reassignments(ctx: RequestContext, request) -> dict:
    metadata = ctx.services.metadata
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None,
                "responses": []}
    results: dict[tuple[str, int], tuple[int, str | None]] = {}
    changes = []
    for topic in request.topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            state = metadata.partition(*key)
            if state is None:
                results[key] = (ErrorCode.unknown_topic_or_partition, "The partition does not exist.")
                continue
            if p.replicas is None:
                new = cancel_reassignment(state)
                if new is None:
                    results[key] = (ErrorCode.no_reassignment_in_progress,
                                    "No reassignment is in progress for this partition.")
                    continue
            else:
                problem = _check_target(metadata, list(p.replicas))
                if problem:
                    results[key] = (ErrorCode.invalid_replica_assignment, problem)
                    continue
                new = start_reassignment(state, list(p.replicas))
            results[key] = (0, None)
            changes.append((*key, new, state.mod_revision))
    if changes:
        written = await ctx.services.control.replication.alter_partitions(changes)
        for topic, index, _, _ in changes:
            if (topic, index) not in written:
                results[(topic, index)] = (ErrorCode.not_controller, "The partition changed meanwhile; retry.")
    by_topic: dict[str, list[dict]] = {}
    for (topic, index), (code, message) in results.items():
        by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": code,
                                               "error_message": message})
    return {"throttle_time": 0, "error_code": 0, "error_message": None,
            "responses": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
