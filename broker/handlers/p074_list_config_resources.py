"""ListConfigResources: v0-1 (ListClientMetricsResources until Kafka 4.1, KIP-1142)

Behavior:
- Lists the resources that can carry configs, of the requested types (all the version's types
  when the list is empty), in Kafka's order: groups with dynamic configs, client-metrics
  subscriptions, each registered broker's loggers (BROKER_LOGGER, named by node id), each
  registered broker (BROKER; a fenced one too, as KRaft lists it), then every topic (internal
  ones included; sorted here, in hash order in Kafka). Brokers are those with an endpoint on
  the listener the request came in on, as Kafka's ``getBrokerNodes``.
- A type the version does not know makes the whole answer UNSUPPORTED_VERSION with no
  resources, as Kafka (types: v0 CLIENT_METRICS (16) only; v1 also TOPIC (2), BROKER (4),
  BROKER_LOGGER (8) and GROUP (32)).
- ``kafka-configs --describe --entity-type client-metrics`` and ``--entity-type groups``
  (4.3) list through it.

Differs from Kafka: this broker has no client-metrics subscriptions, so that kind is always
empty (as on a Kafka broker where none were configured).

Version notes:
- v0 (flexible) lists client-metrics resources only; v1 adds ``resource_types`` (KIP-1142).
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..config_admin import ConfigResourceType
from ..request_context import RequestContext

SUPPORTED_RESOURCE_TYPES = {
    0: frozenset({ConfigResourceType.CLIENT_METRICS}),
    1: frozenset({ConfigResourceType.TOPIC, ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER,
                  ConfigResourceType.CLIENT_METRICS, ConfigResourceType.GROUP}),
}


@register(74, 0, 1)
async def handle_list_config_resources(ctx: RequestContext, request) -> dict:
    supported = SUPPORTED_RESOURCE_TYPES[ctx.api_version]
    wanted = set(getattr(request, "resource_types", ()) or supported)
    if not wanted <= supported:
        return {"throttle_time": 0, "error_code": ErrorCode.unsupported_version, "config_resources": []}
    resources: list[tuple[str, ConfigResourceType]] = []
    if ConfigResourceType.GROUP in wanted:  # first in Kafka's answer, then CLIENT_METRICS (none here)
        resources += [(name, ConfigResourceType.GROUP) for name in sorted(ctx.services.metadata.group_configs)]
    brokers = [str(node_id) for node_id, *_ in ctx.services.metadata.brokers_on(ctx.listener, include_fenced=True)]
    for kind in (ConfigResourceType.BROKER_LOGGER, ConfigResourceType.BROKER):
        if kind in wanted:
            resources += [(name, kind) for name in brokers]
    if ConfigResourceType.TOPIC in wanted:
        resources += [(name, ConfigResourceType.TOPIC) for name in sorted(ctx.services.metadata.topics)]
    return {"throttle_time": 0, "error_code": 0,
            "config_resources": [{"resource_name": name, "resource_type": kind} for name, kind in resources]}
