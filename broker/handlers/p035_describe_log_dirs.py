"""DescribeLogDirs: v1-5

Behavior:
- Describes this broker's log directory: every hosted replica (leader or follower) of the
  requested topics (all when null) with its size in bytes and its offset lag (high watermark
  minus log end offset, never negative), and (v4) the directory's total and usable bytes.
- A requested partition not hosted here is left out, as Kafka does.
- The directory is named by its absolute path, as Kafka does (AlterReplicaLogDirs takes it back).
- With an authorizer: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED.

Version notes:
- v0 is gone from Kafka 4.x; v2 flexible; v3 top-level error code; v4 total/usable bytes;
  v5 ``is_cordoned`` (KIP-1066): always false, a log directory here is never cordoned. v5 is
  what kafka-python looks for to infer a 4.3 broker.
"""

import os
import shutil

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, authorize_cluster
from ..request_context import RequestContext


@register(35, 1, 5)
async def handle_describe_log_dirs(ctx: RequestContext, request) -> dict:
    rm = ctx.services.replica_manager
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "results": []}
    log_dir = os.path.abspath(ctx.services.config.log_dir)  # Kafka reports the absolute path
    if request.topics is None:
        wanted = set(rm.partitions)
    else:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    by_topic: dict[str, list[dict]] = {}
    for key in sorted(wanted & set(rm.partitions)):
        plog = rm.partitions[key].log
        by_topic.setdefault(key[0], []).append({
            "partition_index": key[1], "partition_size": plog.size_in_bytes,
            "offset_lag": max(0, plog.high_watermark - plog.log_end_offset), "is_future_key": False})
    usage = shutil.disk_usage(log_dir)
    return {"throttle_time": 0, "error_code": 0, "results": [{
        "error_code": 0, "log_dir": log_dir, "total_bytes": usage.total, "usable_bytes": usage.free,
        "is_cordoned": False,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}]}
