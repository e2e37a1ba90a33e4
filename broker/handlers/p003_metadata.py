"""Metadata: v0-13

Behavior:
- Lists every unfenced broker (with its rack) by its endpoint on the listener the request
  arrived on (a broker without that listener is left out, as in Kafka), the cluster id, a
  controller id (``_controller_id``: this broker) and the requested topics with each
  partition's leader, leader epoch, replicas, ISR, offline replicas (on fenced brokers) and
  topic ids (v10+); a partition with no leader answers LEADER_NOT_AVAILABLE.
- All topics when the request's topic list is empty (v0) or null (v1+); none when it is an
  empty list on v1+.
- An unknown topic is created when both ``auto.create.topics.enable`` and the request's
  ``allow_auto_topic_creation`` (implicitly true before v4) allow it; that response answers
  LEADER_NOT_AVAILABLE for it, as Kafka does while the creation propagates. Internal topics
  are never auto-created this way. An illegal name gets INVALID_TOPIC_EXCEPTION.
- A topic requested by id (v10+) that does not exist gets UNKNOWN_TOPIC_ID.
- Authorized operations (v8+), when asked: every topic answered by name, even with an error,
  gets the topic operations the caller is allowed, and (v8-10) the cluster the cluster
  operations (all of them with no authorizer, see :mod:`broker.authorization`); an unknown
  topic id, a refused topic, or when not asked, INT32_MIN. As Kafka 4.3.1.
- With an authorizer: the all-topics listing leaves out topics without DESCRIBE; a requested
  topic without DESCRIBE gets TOPIC_AUTHORIZATION_FAILED (by id: with a null name); a missing
  topic the request allows to auto-create needs CREATE on the cluster or the topic, else
  TOPIC_AUTHORIZATION_FAILED (whatever ``auto.create.topics.enable`` says), as Kafka.

Version notes:
- v1 null = all topics, is_internal, controller id; v2 cluster id; v4 allow_auto_topic_creation;
  v7 leader epoch; v8-10 authorized operations; v9 flexible; v10 topic ids; v12 lookup by id.
- v13 adds a top-level error code (KIP-1102): REBOOTSTRAP_REQUIRED would tell the client to
  forget its brokers and rebootstrap; this broker always answers 0 (NONE), as Kafka does
  outside of that case.
"""

import uuid

from metadata.controller.replication import INTERNAL_TOPICS, validate_topic_name
from protocol import fast
from protocol.api import register
from protocol.codec import ZERO_UUID
from protocol.errors import ErrorCode, KafkaError

from ..authorization import (
    OPERATIONS_NOT_REQUESTED,
    AclOperation,
    ResourceType,
    authorize,
    authorize_cluster,
    cluster_operations,
    filter_authorized,
    topic_operations,
)
from ..request_context import RequestContext


def offline_replicas(ctx: RequestContext, state) -> list[int]:
    """Replicas on brokers that are fenced (down, or not yet caught up), as KRaft's."""
    brokers = ctx.services.metadata.brokers
    return [r for r in state.replicas if r not in brokers]


def topic_entry(ctx: RequestContext, name: str, version: int) -> dict:
    topic = ctx.services.metadata.topics[name]
    return {
        "error_code": 0, "name": name, "topic_id": topic.uuid, "is_internal": name in INTERNAL_TOPICS,
        "partitions": [{"error_code": ErrorCode.leader_not_available if p.leader < 0 else 0,
                        "partition_index": i, "leader_id": p.leader,
                        "leader_epoch": p.leader_epoch, "replica_nodes": p.replicas,
                        "isr_nodes": p.isr, "offline_replicas": offline_replicas(ctx, p)}
                       for i, p in enumerate(topic.partitions)],
    }


def _controller_id(broker) -> int:
    """This broker while it is unfenced, which serves every admin request itself (see
    ``MetadataCache.controller_for_clients``), so clients never wait on a -1 or a dead broker."""
    return broker.metadata.controller_for_clients(broker.node_id)


def error_entry(name: str | None, code: ErrorCode, topic_id: uuid.UUID = ZERO_UUID) -> dict:
    return {"error_code": code, "name": name, "topic_id": topic_id, "is_internal": False,
            "partitions": []}


@register(3, 0, 13)
async def handle_metadata(ctx: RequestContext, request) -> bytes:
    version = ctx.api_version
    broker = ctx.services
    topics = broker.metadata.topics
    requested = request.topics
    if requested is None or (version == 0 and not requested):
        entries = [topic_entry(ctx, name, version)
                   for name in sorted(filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics))]
    else:
        allow_auto = getattr(request, "allow_auto_topic_creation", True)
        entries = [await _lookup(ctx, t, version, allow_auto) for t in requested]
    ops_requested = getattr(request, "include_topic_authorized_operations", False)
    return fast.encode_metadata_response(
        version, broker.metadata.brokers_on(ctx.listener),
        broker.cluster_id, _controller_id(broker),
        [(e["error_code"], e["name"], e["topic_id"], e["is_internal"],
          [(p["error_code"], p["partition_index"], p["leader_id"], p["leader_epoch"],
            p["replica_nodes"], p["isr_nodes"], p["offline_replicas"]) for p in e["partitions"]],
          _topic_ops(ctx, ops_requested, e))
         for e in entries],
        cluster_authorized_operations=cluster_operations(
            getattr(request, "include_cluster_authorized_operations", False), ctx),
        throttle_time_ms=ctx.request_throttle_ms())


def _topic_ops(ctx: RequestContext, requested: bool, entry: dict) -> int:
    """KIP-430: a topic answered by name gets its authorized operations (unless refused)."""
    if entry["name"] is None or entry["error_code"] == ErrorCode.topic_authorization_failed:
        return OPERATIONS_NOT_REQUESTED
    return topic_operations(requested, ctx, entry["name"])


def _may_create(ctx: RequestContext, name: str) -> bool:
    """Auto-creation needs CREATE on the cluster or on the topic, as Kafka's KafkaApis."""
    return (authorize_cluster(ctx, AclOperation.CREATE)
            or authorize(ctx, AclOperation.CREATE, ResourceType.TOPIC, name))


async def _lookup(ctx: RequestContext, requested, version: int, allow_auto: bool) -> dict:
    broker = ctx.services
    name = requested.name
    topic_id = getattr(requested, "topic_id", None)
    if name is None and topic_id is not None and topic_id != ZERO_UUID:
        topic = broker.metadata.topic_by_id(topic_id)
        if topic is None:
            return error_entry(None, ErrorCode.unknown_topic_id, topic_id)
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name):
            return error_entry(None, ErrorCode.topic_authorization_failed, topic_id)
        return topic_entry(ctx, topic.name, version)
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name or ""):
        return error_entry(name, ErrorCode.topic_authorization_failed)
    if name in broker.metadata.topics:
        return topic_entry(ctx, name, version)
    if allow_auto and not _may_create(ctx, name or ""):
        return error_entry(name, ErrorCode.topic_authorization_failed)
    try:
        validate_topic_name(name or "")
    except KafkaError as exc:
        return error_entry(name, exc.code)
    if allow_auto and broker.config["auto.create.topics.enable"] and name not in INTERNAL_TOPICS:
        try:
            await broker.control.replication.create_topic(
                name, broker.config["num.partitions"], broker.config["default.replication.factor"], {})
        except KafkaError as exc:
            if exc.code != ErrorCode.topic_already_exists:
                return error_entry(name, exc.code)
        return error_entry(name, ErrorCode.leader_not_available)
    return error_entry(name, ErrorCode.unknown_topic_or_partition)
