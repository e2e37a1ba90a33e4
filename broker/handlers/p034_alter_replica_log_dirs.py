"""AlterReplicaLogDirs: v1-2

Behavior (Kafka's ``ReplicaManager.alterReplicaLogDirs``, checked against Kafka 4.3.1), per
partition, the first that applies:
- a topic name too long for the future-log directory name (``<topic>-<partition>.<32 hex>-future``
  over 255 characters): INVALID_TOPIC_EXCEPTION;
- a destination that is not this broker's log directory, compared as an absolute path string
  (as DescribeLogDirs reports it; a relative path or a trailing slash does not match):
  LOG_DIR_NOT_FOUND;
- a partition hosted here: no error, as the move to the directory it is already in is a no-op;
- a partition that exists but has no replica on this broker: REPLICA_NOT_AVAILABLE;
- an unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION.
- ``kafka-reassign-partitions --execute`` sends it for a reassignment JSON with ``log_dirs``.

Differs from Kafka: a broker has one log directory (the first of ``log.dirs``; the others are
not used), so there is never a replica to move between directories (no future replica, no
ReplicaAlterLogDirsThread). Results come in request order (Kafka's follow a hash map).
- With an authorizer: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every
  partition.

Version notes:
- v0 is gone from Kafka 4.x; v1 same as v0 (throttle on quota violation); v2 flexible.
"""

import os

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, authorize_cluster
from ..request_context import RequestContext

MAX_DIR_NAME = 255
# "." + UUID without dashes + "-future": Kafka's LocalLog.logFutureDirName suffix.
FUTURE_DIR_SUFFIX_LENGTH = 1 + 32 + len("-future")


@register(34, 1, 2)
async def handle_alter_replica_log_dirs(ctx: RequestContext, request) -> dict:
    log_dir = os.path.abspath(ctx.services.config.log_dir)
    # Kafka's AlterReplicaLogDirsRequest.partitionDirs: a partition named twice keeps its last dir.
    destinations = {(t.name, p): d.path for d in request.dirs for t in d.topics for p in t.partitions}
    by_topic: dict[str, list[dict]] = {}
    refused = not authorize_cluster(ctx, AclOperation.ALTER)
    for (topic, partition), path in destinations.items():
        error = ErrorCode.cluster_authorization_failed if refused else \
            _alter_replica_log_dir(ctx, topic, partition, path, log_dir)
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
    return {"throttle_time": 0, "results": [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]}


def _alter_replica_log_dir(ctx: RequestContext, topic: str, partition: int, path: str, log_dir: str) -> int:
    if len(f"{topic}-{partition}") + FUTURE_DIR_SUFFIX_LENGTH > MAX_DIR_NAME:
        return ErrorCode.invalid_topic_exception  # "The topic name is too long."
    if path != log_dir:
        return ErrorCode.log_dir_not_found  # "Log dir ... is not found in the config."
    if (topic, partition) in ctx.services.replica_manager.partitions:
        return ErrorCode.none  # already in the destination
    known = ctx.services.metadata.topics.get(topic)
    if known is not None and 0 <= partition < len(known.partitions):
        return ErrorCode.replica_not_available  # NOT_LEADER_OR_FOLLOWER, renamed for this API
    return ErrorCode.unknown_topic_or_partition
