"""CreateTopics: v2-7

Behavior:
- Creates each topic with its partition count (-1: ``num.partitions``) and configs, after
  validating the name (INVALID_TOPIC_EXCEPTION), the count (INVALID_PARTITIONS), the
  replication factor (INVALID_REPLICATION_FACTOR above the registered broker count), a manual
  assignment (INVALID_REPLICA_ASSIGNMENT) and each config (INVALID_CONFIG, naming the key).
- An existing topic gets TOPIC_ALREADY_EXISTS; a name twice in one request INVALID_REQUEST.
- validate_only checks everything and creates nothing.
- The topics that pass the checks are created together: on the embedded store in one metadata
  record (as KRaft commits one request's records in one batch), on a cluster one by one.
- ``controller_mutation_rate`` (broker.quotas): each topic's partitions count against the
  caller's quota once it passed validation; out of credit, v6+ answers that topic
  THROTTLING_QUOTA_EXCEEDED, older versions are created and throttled afterwards.
- v5+ returns the topic id, partition count, replication factor and effective configs.
- With an authorizer: CREATE on the cluster or the topic, else TOPIC_AUTHORIZATION_FAILED
  "Authorization failed.".

Version notes:
- v4 defaults (-1) allowed; v5 flexible, results carry configs; v7 topic id.
"""

from collections import Counter

from metadata.controller.placement import check_replication_factor
from metadata.controller.replication import TopicCreation, validate_topic_name
from metadata.records import TopicState
from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, ResourceType, authorize, authorize_cluster
from ..config import ConfigError
from ..request_context import MutationQuota, RequestContext
from ..topic_config import effective, validate_topic_config


@register(19, 2, 7)
async def handle_create_topics(ctx: RequestContext, request) -> dict:
    counts = Counter(t.name for t in request.topics)
    quota = ctx.mutation_quota(strict_since=6)
    outcomes: dict[str, TopicCreation | KafkaError] = {}
    for t in request.topics:
        if counts[t.name] > 1:
            outcomes[t.name] = KafkaError(ErrorCode.invalid_request,
                                          f"Create topics request from client contains multiple entries for {t.name}")
            continue
        try:
            outcomes[t.name] = _validated(ctx, t, quota)
        except KafkaError as exc:
            outcomes[t.name] = exc
    planned = [c for c in outcomes.values() if isinstance(c, TopicCreation)]
    created = {} if request.validate_only or not planned else \
        await ctx.services.control.replication.create_topics(planned)
    results = []
    for name, outcome in outcomes.items():
        outcome = created.get(name, outcome)
        if isinstance(outcome, KafkaError):
            results.append(_error(name, outcome.code, outcome.message))
        elif isinstance(outcome, TopicState):
            results.append(_result(ctx, outcomes[name], outcome.uuid))
        else:  # validate_only: what would have been created
            results.append(_result(ctx, outcome, None))
    return {"throttle_time": quota.finish(), "topics": results}


def _error(name: str, code: ErrorCode, message: str | None) -> dict:
    return {"name": name, "error_code": code, "error_message": message, "num_partitions": -1,
            "replication_factor": -1, "configs": None}


def _validated(ctx: RequestContext, t, quota: MutationQuota) -> TopicCreation:
    """What to create for one requested topic, or the KafkaError that refuses it."""
    broker = ctx.services
    if not (authorize_cluster(ctx, AclOperation.CREATE)
            or authorize(ctx, AclOperation.CREATE, ResourceType.TOPIC, t.name)):
        raise KafkaError(ErrorCode.topic_authorization_failed, "Authorization failed.")
    validate_topic_name(t.name)
    if t.name in broker.metadata.topics:
        raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists.")
    num_partitions = t.num_partitions
    rf = t.replication_factor
    if t.assignments:
        if num_partitions != -1 or rf != -1:
            raise KafkaError(ErrorCode.invalid_request,
                             "Both numPartitions or replicationFactor and replicasAssignments were set.")
        for a in t.assignments:
            if any(b not in broker.metadata.registered for b in a.broker_ids) or not a.broker_ids:
                raise KafkaError(ErrorCode.invalid_replica_assignment,
                                 f"Replica assignment {list(a.broker_ids)} names brokers that do not exist")
        num_partitions, rf = len(t.assignments), len(t.assignments[0].broker_ids)
        assignment = [list(a.broker_ids) for a in sorted(t.assignments, key=lambda a: a.partition_index)]
    else:
        assignment = None
    if num_partitions == -1:
        num_partitions = broker.config["num.partitions"]
    if rf == -1:
        rf = broker.config["default.replication.factor"]
    if num_partitions <= 0:
        raise KafkaError(ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive value.")
    check_replication_factor(rf, len(broker.metadata.registered))
    configs = {}
    for c in t.configs:
        try:
            value = validate_topic_config(c.name, c.value)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        if value is not None:
            configs[c.name] = value
    quota.record(num_partitions)
    return TopicCreation(t.name, num_partitions, rf, configs, assignment)


def _result(ctx: RequestContext, c: TopicCreation, topic_id) -> dict:
    return {
        "name": c.name, "topic_id": topic_id, "error_code": 0, "error_message": None,
        "num_partitions": c.num_partitions, "replication_factor": c.replication_factor,
        "configs": [{"name": k, "value": v, "read_only": False,
                     "config_source": 1 if is_override else 5, "is_sensitive": False}
                    for k, (v, is_override) in sorted(effective(c.configs, ctx.services.config).items())],
    }
