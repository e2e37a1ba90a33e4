"""DescribeConfigs: v1-4

Behavior:
- TOPIC (2): every topic config with its effective value and source: TOPIC_CONFIG (1) for an
  override, else that of its broker-level synonym (DYNAMIC_BROKER_CONFIG 2,
  DYNAMIC_DEFAULT_BROKER_CONFIG 3, STATIC_BROKER_CONFIG 4, DEFAULT_CONFIG 5); never read-only
  or sensitive. An unknown topic gets UNKNOWN_TOPIC_OR_PARTITION, an illegal name
  INVALID_TOPIC_EXCEPTION.
- BROKER (4) named by this node's id: every broker config with its current value; read-only
  unless it is one of the dynamic keys (broker/config_admin.py). The empty name (cluster-wide
  default) lists only the dynamic cluster-wide defaults. Another id or a non-integer name gets
  INVALID_REQUEST with Kafka's wording.
- ``configuration_keys`` (null or empty: all) filters the entries; synonyms are listed only
  with ``include_synonyms``; documentation only with ``include_documentation`` (topic keys
  and the broker keys behind them; null for the rest).
- GROUP (32), any group id (it need not exist): every group config, GROUP_CONFIG (8) for the
  group's overrides, else the source of the broker key behind it (``group.share.*``...) or
  DEFAULT_CONFIG for keys without one (``share.auto.offset.reset``), as Kafka 4.3.1 answers.
- Other resource types (BROKER_LOGGER, CLIENT_METRICS) get INVALID_REQUEST.
- With an authorizer: DESCRIBE_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED) or the
  cluster for a broker (else CLUSTER_AUTHORIZATION_FAILED).

Version notes:
- v1 config_source and synonyms (v0, with is_default, is gone in Kafka 4.x); v2 same layout;
  v3 config_type and documentation; v4 flexible.
"""

from metadata.controller.replication import validate_topic_name
from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, check_config_resource
from ..config_admin import (
    ConfigResourceType,
    describe_broker,
    describe_group,
    describe_topic,
    node_id_of,
    unsupported_resource,
)
from ..request_context import RequestContext


@register(32, 1, 4)
async def handle_describe_configs(ctx: RequestContext, request) -> dict:
    include_synonyms = request.include_synonyms
    include_docs = getattr(request, "include_documentation", False)
    results = []
    for r in request.resources:
        try:
            configs = _describe(ctx, r, include_synonyms, include_docs)
            results.append({"error_code": 0, "error_message": "", "resource_type": r.resource_type,
                            "resource_name": r.resource_name, "configs": configs})
        except KafkaError as exc:
            results.append({"error_code": exc.code, "error_message": exc.message,
                            "resource_type": r.resource_type, "resource_name": r.resource_name,
                            "configs": []})
    return {"throttle_time": 0, "results": results}


def _describe(ctx: RequestContext, r, include_synonyms: bool, include_docs: bool) -> list[dict]:
    broker = ctx.services
    keys = set(r.configuration_keys) if r.configuration_keys else None
    check_config_resource(ctx, AclOperation.DESCRIBE_CONFIGS, r.resource_type, r.resource_name)
    if r.resource_type == ConfigResourceType.TOPIC:
        validate_topic_name(r.resource_name)
        topic = broker.metadata.topics.get(r.resource_name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, "")  # Kafka sends "", not null
        return describe_topic(broker, topic, keys, include_synonyms, include_docs)
    if r.resource_type == ConfigResourceType.BROKER:
        per_broker = bool(r.resource_name)
        if per_broker:
            node_id_of(broker, r.resource_name, describe=True)
        return describe_broker(broker, per_broker, keys, include_synonyms, include_docs)
    if r.resource_type == ConfigResourceType.GROUP:
        return describe_group(broker, r.resource_name, keys, include_synonyms, include_docs)
    raise KafkaError(ErrorCode.invalid_request, unsupported_resource(r.resource_type))
