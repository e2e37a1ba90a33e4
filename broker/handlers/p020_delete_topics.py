"""DeleteTopics: v1-6

Behavior:
- Deletes each named topic (v6: or the topic with the given id): its metadata, partitions and
  log directories; long-poll fetches waiting on it are woken. Each result carries the name and
  (v6) the topic id.
- ``delete.topic.enable=false``: every topic gets TOPIC_DELETION_DISABLED (INVALID_REQUEST
  before v3), as Kafka.
- An unknown name gets UNKNOWN_TOPIC_OR_PARTITION, an unknown id UNKNOWN_TOPIC_ID. A name or
  id given twice, both a name and an id in one entry, or neither, gets INVALID_REQUEST (Kafka's
  messages: "Duplicate topic name.", ...). A topic named by its name in one entry and by its id
  in another is not deleted: one INVALID_REQUEST result for it.
- Internal topics (``__consumer_offsets``, ``__transaction_state``) are refused with
  INVALID_REQUEST.

Differs from Kafka: Kafka 4.x deletes internal topics when asked (only the kafka-topics tool
refuses); here the group and transaction coordinators keep those partitions open, so the
request is refused. Deletion is synchronous, so ``timeout_ms`` is not needed. The topics that
pass the checks are deleted together: on the embedded store in one metadata record.
- With an authorizer: DELETE on the topic, else TOPIC_AUTHORIZATION_FAILED.
- ``controller_mutation_rate``: a topic's partitions count against the caller's quota before it
  is deleted; out of credit, v5+ answers THROTTLING_QUOTA_EXCEEDED, older versions are deleted
  and throttled afterwards.

Version notes:
- v2-3 throttle; v3 TOPIC_DELETION_DISABLED; v4 flexible; v5 error_message; v6 topics by
  name or id, topic_id in results.
"""

from collections import Counter

from protocol.api import register
from protocol.codec import ZERO_UUID
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, ResourceType, authorize
from ..replica_manager import INTERNAL_TOPICS
from ..request_context import MutationQuota, RequestContext


@register(20, 1, 6)
async def handle_delete_topics(ctx: RequestContext, request) -> dict:
    version = ctx.api_version
    if version >= 6:
        # kio reads the all-zero id as None
        entries = [(t.name, ZERO_UUID if t.topic_id is None else t.topic_id) for t in request.topics]
    else:
        entries = [(name, ZERO_UUID) for name in request.topic_names]
    if not ctx.services.config["delete.topic.enable"]:
        code = ErrorCode.invalid_request if version < 3 else ErrorCode.topic_deletion_disabled
        return {"throttle_time": 0, "responses": [
            _result(name, tid, code, "Topic deletion is disabled.") for name, tid in entries]}
    quota = ctx.mutation_quota(strict_since=5)
    names = Counter(n for n, tid in entries if n is not None and tid == ZERO_UUID)
    ids = Counter(tid for n, tid in entries if n is None and tid != ZERO_UUID)
    responses = []
    reported: set = set()
    for name, tid in entries:
        if name is None and tid == ZERO_UUID:
            responses.append(_result(None, ZERO_UUID, ErrorCode.invalid_request,
                                     "Neither topic name nor id were specified."))
        elif name is not None and tid != ZERO_UUID:
            responses.append(_result(name, tid, ErrorCode.invalid_request,
                                     "You may not specify both topic name and topic id."))
        elif name is not None and names[name] > 1:
            if ("n", name) not in reported:
                reported.add(("n", name))
                responses.append(_result(name, ZERO_UUID, ErrorCode.invalid_request, "Duplicate topic name."))
        elif name is None and ids[tid] > 1:
            if ("i", tid) not in reported:
                reported.add(("i", tid))
                responses.append(_result(None, tid, ErrorCode.invalid_request, "Duplicate topic id."))
        else:
            try:
                topic = _validated(ctx, name, tid, quota)
                responses.append(_result(topic.name, topic.uuid, ErrorCode.none, None))
            except KafkaError as exc:
                responses.append(_result(name, tid, exc.code, exc.message))
    responses = _refuse_named_twice(responses)
    deleting = [r["name"] for r in responses if r["error_code"] == ErrorCode.none]
    if deleting:
        errors = await ctx.services.control.replication.delete_topics(deleting)
        for r in responses:
            exc = errors.get(r["name"]) if r["error_code"] == ErrorCode.none else None
            if exc is not None:
                r.update(error_code=exc.code, error_message=exc.message)
    return {"throttle_time": quota.finish(), "responses": responses}


def _refuse_named_twice(responses: list[dict]) -> list[dict]:
    """A topic given both by name and by id is not deleted: one INVALID_REQUEST answer for
    it, as Kafka's ControllerApis gives."""
    named = Counter(r["name"] for r in responses if r["error_code"] == ErrorCode.none)
    out, refused = [], set()
    for r in responses:
        if r["error_code"] != ErrorCode.none or named[r["name"]] == 1:
            out.append(r)
        elif r["name"] not in refused:
            refused.add(r["name"])
            out.append(_result(r["name"], r["topic_id"], ErrorCode.invalid_request,
                               "The provided topic name maps to an ID that was already supplied."))
    return out


def _result(name, topic_id, code, message) -> dict:
    return {"name": name, "topic_id": topic_id, "error_code": code, "error_message": message}


def _validated(ctx: RequestContext, name: str | None, topic_id, quota: MutationQuota):
    """The topic to delete, or the KafkaError that refuses it."""
    broker = ctx.services
    if name is None:
        topic = broker.metadata.topic_by_id(topic_id)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_id, "This server does not host this topic ID.")
    else:
        topic = broker.metadata.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             "This server does not host this topic-partition.")
    if not authorize(ctx, AclOperation.DELETE, ResourceType.TOPIC, topic.name):
        raise KafkaError(ErrorCode.topic_authorization_failed, None)
    if topic.name in INTERNAL_TOPICS:
        raise KafkaError(ErrorCode.invalid_request,
                         f"Topic {topic.name} is an internal topic and cannot be deleted.")
    quota.record(len(topic.partitions))
    return topic
