"""DescribeTopicPartitions: v0

Behavior:
- KIP-966's paginated topic description, used by the Java admin client's describeTopics and
  ``kafka-topics --describe`` (Kafka 3.8+; they fall back to Metadata when it is not
  advertised). Lists the requested topics (all topics when the list is empty), sorted by
  name, with each partition's leader, leader epoch, replicas, ISR, and empty ELR lists.
- Pagination: at most ``response_partition_limit`` partitions per response (clamped to
  [1, 2000], Kafka's ``max.request.partition.size.limit``). When the limit cuts a topic short,
  or is used up exactly before the next topic, ``next_cursor`` names the topic and partition
  to continue from; a request's ``cursor`` starts there (topics sorting before the cursor's
  are skipped).
- A requested topic that does not exist gets UNKNOWN_TOPIC_OR_PARTITION (an illegal name
  INVALID_TOPIC_EXCEPTION); such topics are left out when listing all topics.
- A cursor whose topic is not among the requested topics, or with a negative partition, makes
  every requested topic answer INVALID_REQUEST, as Kafka's error response.
- topic_authorized_operations: the topic operations the caller is allowed (all of them, 3576,
  with no authorizer), also on a topic answered with an error, as Kafka.
- With an authorizer, a requested topic without DESCRIBE gets TOPIC_AUTHORIZATION_FAILED;
  listing all topics leaves such topics out.

Version notes:
- v0 only (flexible).
"""

from metadata.controller.replication import INTERNAL_TOPICS, validate_topic_name
from protocol.api import register
from protocol.codec import ZERO_UUID
from protocol.errors import ErrorCode, KafkaError

from ..authorization import (
    TOPIC_AUTHORIZED_OPERATIONS,
    AclOperation,
    ResourceType,
    authorize,
    filter_authorized,
    topic_operations,
)
from ..request_context import RequestContext
from .p003_metadata import offline_replicas

MAX_PARTITION_LIMIT = 2000  # Kafka's max.request.partition.size.limit default


@register(75, 0, 0)
async def handle_describe_topic_partitions(ctx: RequestContext, request) -> dict:
    topics = ctx.services.metadata.topics
    fetch_all = not request.topics
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    if fetch_all:
        names = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                  (n for n in topics if n >= cursor_topic))
    else:
        names = {t.name for t in request.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            return _error_response(request)  # "topic list should contain the cursor topic"
    if cursor is not None and cursor.partition_index < 0:
        return _error_response(request)  # "cursor partition must be valid"
    remaining = max(min(MAX_PARTITION_LIMIT, request.response_partition_limit), 1)
    out, next_cursor = [], None
    for name in sorted(names):
        if remaining == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        topic = topics.get(name)
        if not fetch_all and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            out.append({**_missing(name), "error_code": ErrorCode.topic_authorization_failed})
            continue
        if topic is None:
            if not fetch_all:
                out.append(_missing(name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        upper = min(len(topic.partitions), start + remaining)
        partitions = [{"error_code": 0, "partition_index": i, "leader_id": p.leader,
                       "leader_epoch": p.leader_epoch, "replica_nodes": p.replicas, "isr_nodes": p.isr,
                       "eligible_leader_replicas": [], "last_known_elr": [],
                       "offline_replicas": offline_replicas(ctx, p)}
                      for i, p in enumerate(topic.partitions[start:upper], start)]
        out.append({"error_code": 0, "name": name, "topic_id": topic.uuid, "is_internal": name in INTERNAL_TOPICS,
                    "partitions": partitions, "topic_authorized_operations": topic_operations(True, ctx, name)})
        if upper < len(topic.partitions):
            next_cursor = {"topic_name": name, "partition_index": upper}
            break
        remaining -= len(partitions)
    return {"throttle_time": 0, "topics": out, "next_cursor": next_cursor}


def _missing(name: str) -> dict:
    try:
        validate_topic_name(name)
        code = ErrorCode.unknown_topic_or_partition
    except KafkaError:
        code = ErrorCode.invalid_topic_exception
    return {"error_code": code, "name": name, "topic_id": ZERO_UUID, "is_internal": name in INTERNAL_TOPICS,
            "partitions": [], "topic_authorized_operations": TOPIC_AUTHORIZED_OPERATIONS}


def _error_response(request) -> dict:
    """Kafka's getErrorResponse: the error on every requested topic (the layout has no message)."""
    return {"throttle_time": 0, "next_cursor": None,
            "topics": [{"error_code": ErrorCode.invalid_request, "name": t.name, "topic_id": ZERO_UUID,
                        "is_internal": False, "partitions": []} for t in request.topics]}
