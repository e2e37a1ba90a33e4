"""CreatePartitions: v0-3

Behavior:
- Raises a topic's partition count to ``count``; the new partitions start at leader epoch 0
  (on one node led by this broker and immediately writable; in a cluster placed as CreateTopics
  places replicas, led by the first active replica, with the active ones in the ISR).
- Only increases: ``count`` equal to the current number gets INVALID_PARTITIONS "Topic
  already has N partition(s).", a smaller one INVALID_PARTITIONS "... would not be an
  increase." An unknown topic: UNKNOWN_TOPIC_OR_PARTITION; a name twice in one request:
  INVALID_REQUEST "Duplicate topic name." (Kafka's ReplicationControlManager wording).
- ``assignments`` (optional) must hold one replica list per new partition
  (INVALID_REPLICA_ASSIGNMENT otherwise), each non-empty, without duplicates, naming only
  registered brokers (a fenced one too, as KRaft), with the topic's replication factor.
- validate_only checks everything and creates nothing.
- ``controller_mutation_rate``: the new partitions count against the caller's quota; out of
  credit, v3 answers THROTTLING_QUOTA_EXCEEDED, older versions are throttled afterwards.
- With an authorizer: ALTER on the topic, else TOPIC_AUTHORIZATION_FAILED.

Version notes:
- v1 same layout (throttling); v2 flexible; v3 same layout (quota errors strict).
"""

from collections import Counter

from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import MutationQuota, RequestContext


@register(37, 0, 3)
async def handle_create_partitions(ctx: RequestContext, request) -> dict:
    counts = Counter(t.name for t in request.topics)
    quota = ctx.mutation_quota(strict_since=3)
    results = []
    reported = set()
    for t in request.topics:
        if counts[t.name] > 1:
            if t.name not in reported:
                reported.add(t.name)
                results.append(_result(t.name, ErrorCode.invalid_request, "Duplicate topic name."))
            continue
        try:
            await _create(ctx, t, request.validate_only, quota)
            results.append(_result(t.name, ErrorCode.none, None))
        except KafkaError as exc:
            results.append(_result(t.name, exc.code, exc.message))
    return {"throttle_time": quota.finish(), "results": results}


def _result(name: str, code: ErrorCode, message: str | None) -> dict:
    return {"name": name, "error_code": code, "error_message": message}


async def _create(ctx: RequestContext, t, validate_only: bool, quota: MutationQuota) -> None:
    broker = ctx.services
    if not authorize(ctx, AclOperation.ALTER, ResourceType.TOPIC, t.name):
        raise KafkaError(ErrorCode.topic_authorization_failed, None)
    topic = broker.metadata.topics.get(t.name)
    if topic is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, None)
    current = len(topic.partitions)
    if t.count == current:
        raise KafkaError(ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).")
    if t.count < current:
        raise KafkaError(ErrorCode.invalid_partitions,
                         f"The topic {t.name} currently has {current} partition(s); {t.count} "
                         f"would not be an increase.")
    additional = t.count - current
    if t.assignments is not None:
        if len(t.assignments) != additional:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             f"Attempted to add {additional} additional partition(s), but only "
                             f"{len(t.assignments)} assignment(s) were specified.")
        rf = len(topic.partitions[0].replicas)
        for a in t.assignments:
            _check_assignment(ctx, list(a.broker_ids), rf)
    quota.record(additional)
    if not validate_only:
        assignment = [list(a.broker_ids) for a in t.assignments] if t.assignments is not None else None
        await broker.control.replication.add_partitions(t.name, t.count, assignment)


def _check_assignment(ctx: RequestContext, replicas: list[int], rf: int) -> None:
    if not replicas:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         "The manual partition assignment includes an empty replica list.")
    prev = None
    for b in sorted(replicas):
        if b not in ctx.services.metadata.registered:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             f"The manual partition assignment includes broker {b}, but no such "
                             f"broker is registered.")
        if b == prev:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             f"The manual partition assignment includes the broker {b} more than once.")
        prev = b
    if len(replicas) != rf:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         f"The manual partition assignment includes a partition with {len(replicas)} "
                         f"replica(s), but this is not consistent with previous partitions, which "
                         f"have {rf} replica(s).")
