"""ElectLeaders: v0-2

Behavior:
- PREFERRED (0): each listed partition (all partitions when the list is null) gets its first
  replica as leader when that replica is live and in the ISR (leader epoch bumped);
  ELECTION_NOT_NEEDED when it already leads, PREFERRED_LEADER_NOT_AVAILABLE when it cannot.
- UNCLEAN (1): only for a partition without a live leader: an ISR member if one is live, else
  any live replica (records only the old ISR had may be lost); ELECTION_NOT_NEEDED when the
  leader is live, ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is.
- Unknown partitions get UNKNOWN_TOPIC_OR_PARTITION ("No such topic as T", "No such partition
  as T-P"); other errors carry Kafka's message for their code, as ``kafka-leader-election``
  prints them. The answer comes once the new leaders are in this broker's metadata.
- With an authorizer: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED.

Version notes:
- v1 election type and a top-level error code; v2 flexible.
"""

from metadata.controller.partition_change import elect_preferred, elect_unclean
from protocol.api import register
from protocol.errors import ErrorCode, error_description

from ..authorization import AclOperation, authorize_cluster
from ..request_context import RequestContext

PREFERRED, UNCLEAN = 0, 1


@register(43, 0, 2)
async def handle_elect_leaders(ctx: RequestContext, request) -> dict:
    metadata = ctx.services.metadata
    election_type = getattr(request, "election_type", PREFERRED)
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "replica_election_results": []}
    if election_type not in (PREFERRED, UNCLEAN):
        return {"throttle_time": 0, "error_code": ErrorCode.invalid_request, "replica_election_results": []}
    if request.topic_partitions is None:
        wanted = [(t.name, i) for t in metadata.topics.values() for i in range(len(t.partitions))]
    else:
        wanted = [(tp.topic, p) for tp in request.topic_partitions for p in tp.partitions]
    alive = set(metadata.brokers)
    live = {n for n, b in metadata.brokers.items() if not b.controlled_shutdown}
    results: dict[tuple[str, int], int] = {}
    messages: dict[tuple[str, int], str] = {}
    changes = []
    for topic, index in wanted:
        state = metadata.partition(topic, index)
        if state is None:
            results[(topic, index)] = ErrorCode.unknown_topic_or_partition
            messages[(topic, index)] = f"No such partition as {topic}-{index}" if topic in metadata.topics \
                else f"No such topic as {topic}"
            continue
        new, code = elect_preferred(state, live) if election_type == PREFERRED \
            else elect_unclean(state, live, alive)
        results[(topic, index)] = code
        if new is not None:
            changes.append((topic, index, new, state.mod_revision))
    if changes:
        written = await ctx.services.control.replication.alter_partitions(changes)
        for topic, index, _, _ in changes:
            if (topic, index) not in written:  # moved meanwhile: let the client retry
                results[(topic, index)] = ErrorCode.not_controller
    by_topic: dict[str, list[dict]] = {}
    for (topic, index), code in results.items():
        by_topic.setdefault(topic, []).append(
            {"partition_id": index, "error_code": code,
             "error_message": messages.get((topic, index)) or error_description(code) if code else None})
    return {"throttle_time": 0, "error_code": 0,
            "replica_election_results": [{"topic": t, "partition_result": ps} for t, ps in by_topic.items()]}
