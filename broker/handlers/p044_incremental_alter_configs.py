"""IncrementalAlterConfigs: v0-1

Behavior:
- Each config entry is an operation: SET (0) a value, DELETE (1) the override (a key that is
  not set is a no-op), APPEND (2) / SUBTRACT (3) comma-separated items to/from a LIST-typed
  key (``cleanup.policy``; starting from the current value, else the default). APPEND or
  SUBTRACT on any other key is INVALID_CONFIG ("Can't APPEND to key ... because its type is
  not LIST."); an unknown operation is INVALID_REQUEST.
- TOPIC (2): the resulting override set is checked key by key (INVALID_CONFIG naming the key:
  unknown name or bad value), then the topic must exist (UNKNOWN_TOPIC_OR_PARTITION); the
  change is persisted and applied to the partitions' logs at once. An empty name is
  INVALID_REQUEST, an illegal one INVALID_TOPIC_EXCEPTION.
- BROKER (4), this node's id (per-broker) or the empty name (cluster-wide default): changes
  that level's dynamic broker configs. Supported: the broker-level log defaults listed in
  broker/config_admin.py DYNAMIC_BROKER_KEYS (log.retention.ms, log.segment.bytes,
  log.cleanup.policy, message.max.bytes, ...); they persist across restarts and apply to every
  topic without an override. A read-only key ("Cannot update these configs dynamically"), an
  unknown key, a bad value or another node id is INVALID_REQUEST, as Kafka answers broker
  config changes.
- GROUP (32), a group id (need not exist yet): the resulting override set is checked as
  Kafka's GroupConfig.validate does (unknown name, type, validator, the broker's min/max
  bounds, session timeout above heartbeat interval), each failure INVALID_CONFIG with Kafka's
  message; stored in the cluster metadata. The empty name is INVALID_REQUEST ("Default group
  resources are not allowed.").
- A resource named twice: INVALID_REQUEST on both; a key twice in one resource, or a null
  value with SET/APPEND/SUBTRACT: INVALID_REQUEST. Other resource types: INVALID_REQUEST.
- validate_only checks everything and changes nothing.
- With an authorizer: ALTER_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED) or the
  cluster for a broker (else CLUSTER_AUTHORIZATION_FAILED).

Version notes:
- v1 flexible.
"""

from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, check_config_resource
from ..config_admin import (
    ConfigResourceType,
    OpType,
    alter_each,
    apply_group_overrides,
    apply_topic_overrides,
    check_alter_entries,
    dynamic_configs,
    group_for_config_change,
    incremental,
    node_id_of,
    topic_for_config_change,
    unsupported_resource,
    validated_group_overrides,
    validated_topic_overrides,
)
from ..request_context import RequestContext
from ..topic_config import TOPIC_KEYS, broker_default


@register(44, 0, 1)
async def handle_incremental_alter_configs(ctx: RequestContext, request) -> dict:
    return await alter_each(request, lambda r, validate_only: _alter(ctx, r, validate_only))


async def _alter(ctx: RequestContext, r, validate_only: bool) -> None:
    broker = ctx.services
    check_config_resource(ctx, AclOperation.ALTER_CONFIGS, r.resource_type, r.resource_name)
    check_alter_entries(r.configs, null_ok=lambda c: c.config_operation == OpType.DELETE)
    if r.resource_type == ConfigResourceType.TOPIC:
        topic_for_config_change(broker, r.resource_name)
        topic = broker.metadata.topics.get(r.resource_name)
        current = topic.configs if topic is not None else {}
        new = incremental(current, r.configs,
                          lambda k: broker_default(k, broker.config) if k in TOPIC_KEYS else None)
        await apply_topic_overrides(broker, r.resource_name, validated_topic_overrides(new), validate_only)
    elif r.resource_type == ConfigResourceType.BROKER:
        per_broker = bool(r.resource_name)
        if per_broker:
            node_id_of(broker, r.resource_name, describe=False)
        dyn = dynamic_configs(broker)
        new = incremental(dyn.layer(per_broker), r.configs, dyn.default_of, broker=True)
        dyn.replace(per_broker, new, validate_only)
    elif r.resource_type == ConfigResourceType.GROUP:
        group_for_config_change(r.resource_name)
        new = incremental(broker.metadata.group_configs.get(r.resource_name, {}), r.configs, lambda k: None)
        await apply_group_overrides(broker, r.resource_name, validated_group_overrides(broker, new), validate_only)
    else:
        raise KafkaError(ErrorCode.invalid_request, unsupported_resource(r.resource_type))
