"""AlterConfigs: v0-2 (the legacy, non-incremental API)

Behavior:
- TOPIC (2): the request's configs become the topic's complete override set; keys left out
  return to their defaults. Every key and value is checked first (INVALID_CONFIG naming the
  key); then an unknown topic gets UNKNOWN_TOPIC_OR_PARTITION (Kafka's order). An empty name
  is INVALID_REQUEST, an illegal one INVALID_TOPIC_EXCEPTION. Overrides are persisted in the
  metadata store and applied to the partitions' logs at once.
- BROKER (4), this node's id or the empty name (cluster-wide default): replaces that level's
  dynamic broker configs; only the dynamic subset in broker/config_admin.py is accepted,
  anything else is INVALID_REQUEST, as Kafka answers read-only or invalid broker configs.
- GROUP (32): replaces the group's config overrides, validated as IncrementalAlterConfigs
  does (INVALID_CONFIG with Kafka's messages).
- A resource named twice gets INVALID_REQUEST on both entries; a key twice in one resource
  or a null value, INVALID_REQUEST. Other resource types: INVALID_REQUEST.
- validate_only checks everything and changes nothing.
- With an authorizer: ALTER_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED) or the
  cluster for a broker (else CLUSTER_AUTHORIZATION_FAILED).

Version notes:
- v1 same layout (throttling); v2 flexible.
"""

from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, check_config_resource
from ..config_admin import (
    ConfigResourceType,
    alter_each,
    apply_group_overrides,
    apply_topic_overrides,
    check_alter_entries,
    dynamic_configs,
    group_for_config_change,
    node_id_of,
    topic_for_config_change,
    unsupported_resource,
    validated_group_overrides,
    validated_topic_overrides,
)
from ..request_context import RequestContext


@register(33, 0, 2)
async def handle_alter_configs(ctx: RequestContext, request) -> dict:
    return await alter_each(request, lambda r, validate_only: _alter(ctx, r, validate_only))


async def _alter(ctx: RequestContext, r, validate_only: bool) -> None:
    broker = ctx.services
    check_config_resource(ctx, AclOperation.ALTER_CONFIGS, r.resource_type, r.resource_name)
    check_alter_entries(r.configs)
    configs = {c.name: c.value for c in r.configs}
    if r.resource_type == ConfigResourceType.TOPIC:
        topic_for_config_change(broker, r.resource_name)
        overrides = validated_topic_overrides(configs)
        await apply_topic_overrides(broker, r.resource_name, overrides, validate_only)
    elif r.resource_type == ConfigResourceType.BROKER:
        if r.resource_name:
            node_id_of(broker, r.resource_name, describe=False)
        dynamic_configs(broker).replace(bool(r.resource_name), configs, validate_only)
    elif r.resource_type == ConfigResourceType.GROUP:
        group_for_config_change(r.resource_name)
        await apply_group_overrides(broker, r.resource_name, validated_group_overrides(broker, configs),
                                    validate_only)
    else:
        raise KafkaError(ErrorCode.invalid_request, unsupported_resource(r.resource_type))
