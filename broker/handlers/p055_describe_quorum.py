"""DescribeQuorum: v0-2

Behavior:
- Describes the metadata quorum as the partition ``__cluster_metadata``-0, the only one a
  request may name (anything else: UNKNOWN_TOPIC_OR_PARTITION on that one partition, as
  KafkaRaftClient answers). ``kafka-metadata-quorum describe --status`` and the admin clients'
  ``describeMetadataQuorum`` read it.
- Leader: the controller (``controller_id``) and its epoch; high watermark: the position of
  this broker's metadata image; voters: every registered broker, each of which can be elected
  controller (a fenced one too, as a KRaft voter that is down stays a voter). A voter with a
  live session follows the metadata through etcd's watch, which leaves it no lag to report: it
  is shown at the high watermark, fetched and caught up now, as KRaft shows a follower in
  sync. A fenced voter's log end offset and timestamps are -1 (unknown), as KRaft reports a
  voter it has not heard from. No observers.
- Any broker answers, from its own image (Kafka forwards the request to the active controller).

Differs from Kafka: the quorum is not a KRaft log. On one node (embedded store) the epoch counts
the broker's starts and the high watermark its metadata writes; in a cluster the quorum is
etcd: the epoch is the controller key's create revision (the controller epoch every controller
write is fenced by) and the high watermark the etcd revision this broker has applied. Directory
ids are unknown (the zero UUID).
- With an authorizer: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED.

Version notes:
- v1 adds last_fetch_timestamp / last_caught_up_timestamp per replica; v2 (flexible from v0)
  adds error messages, replica directory ids and the voters' endpoints (``nodes``).
"""

from __future__ import annotations

import time
import uuid

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, authorize_cluster
from ..request_context import RequestContext

METADATA_TOPIC, METADATA_PARTITION = "__cluster_metadata", 0
UNKNOWN_DIRECTORY = uuid.UUID(int=0)


@register(55, 0, 2)
async def handle_describe_quorum(ctx: RequestContext, request) -> dict:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return {"error_code": ErrorCode.cluster_authorization_failed, "error_message": None, "topics": [],
                "nodes": []}
    names = [(t.topic_name, [p.partition_index for p in t.partitions]) for t in request.topics]
    if names != [(METADATA_TOPIC, [METADATA_PARTITION])]:
        return _response([_partition_error(ErrorCode.unknown_topic_or_partition)], [])
    metadata = ctx.services.metadata
    if metadata.controller_id < 0:
        return _response([_partition_error(ErrorCode.not_leader_or_follower)], [])
    return _response([_describe(ctx)], _nodes(ctx))


def _describe(ctx: RequestContext) -> dict:
    metadata = ctx.services.metadata
    now = int(time.time() * 1000)
    voters = []
    live = set(metadata.brokers) | {metadata.node_id}
    for node_id in sorted(metadata.registered):
        following = node_id in live
        leader = node_id == metadata.controller_id
        voters.append({
            "replica_id": node_id, "replica_directory_id": UNKNOWN_DIRECTORY,
            "log_end_offset": metadata.applied_offset if following else -1,
            # KRaft: -1 last fetch for the leader itself, its caught-up time is now
            "last_fetch_timestamp": now if following and not leader else -1,
            "last_caught_up_timestamp": now if following else -1,
        })
    return {"partition_index": METADATA_PARTITION, "error_code": 0, "error_message": None,
            "leader_id": metadata.controller_id, "leader_epoch": metadata.controller_epoch,
            "high_watermark": metadata.applied_offset, "current_voters": voters, "observers": []}


def _nodes(ctx: RequestContext) -> list[dict]:
    out = []
    for node_id, registration in sorted(ctx.services.metadata.registered.items()):
        endpoints = registration.endpoints or {"PLAINTEXT": (registration.host, registration.port)}
        out.append({"node_id": node_id, "listeners": [{"name": name, "host": host, "port": port}
                                                      for name, (host, port) in endpoints.items()]})
    return out


def _partition_error(code: ErrorCode) -> dict:
    return {"partition_index": METADATA_PARTITION, "error_code": code, "error_message": None,
            "leader_id": -1, "leader_epoch": -1, "high_watermark": -1, "current_voters": [], "observers": []}


def _response(partitions: list[dict], nodes: list[dict]) -> dict:
    return {"error_code": 0, "error_message": None,
            "topics": [{"topic_name": METADATA_TOPIC, "partitions": partitions}], "nodes": nodes}
