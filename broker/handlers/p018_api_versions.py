"""ApiVersions: v0-4

Behavior:
- Lists every API key in the registry with the range this broker implements; a last version
  Kafka 4.3.1 marks unstable (InitProducerId v6) only with ``unstable.api.versions.enable``.
- An unknown version is answered by the server layer in the v0 layout with
  UNSUPPORTED_VERSION and ApiVersions' own range, so any client can downgrade (KIP-511).
- The response header is always v0, even for flexible versions.
- v3+: the features this broker supports and the cluster's finalized levels with their epoch
  (metadata/controller/features.py; ``kafka-features describe`` reads them here).
  ``transaction.version`` is supported up to 2 (finalized at 2 on a new cluster).

Version notes:
- v1 adds throttle_time_ms; v3 (KIP-511) is flexible and carries the client software name,
  and the features (tagged fields). Below v4 a supported feature whose minimum is 0 is left
  out, as Kafka leaves it out (KAFKA-17492: older clients cannot read it).
"""

from metadata.controller.features import SUPPORTED, effective_levels
from protocol.api import REGISTRY, register

from ..request_context import RequestContext


@register(18, 0, 4)
async def handle_api_versions(ctx: RequestContext, request) -> dict:
    unstable = ctx.services.config["unstable.api.versions.enable"]
    response = {
        "error_code": 0,
        "api_keys": [{"api_key": s.key, "min_version": s.min_version, "max_version": s.top(unstable)}
                     for s in sorted(REGISTRY.values(), key=lambda s: s.key)],
        "throttle_time": 0,
    }
    if ctx.api_version >= 3:
        metadata = ctx.services.metadata
        response["supported_features"] = [{"name": name, "min_version": low, "max_version": high}
                                          for name, (low, high) in SUPPORTED.items()
                                          if low > 0 or ctx.api_version >= 4]
        response["finalized_features_epoch"] = metadata.features_epoch
        response["finalized_features"] = [{"name": name, "max_version_level": level, "min_version_level": level}
                                          for name, level in effective_levels(metadata.finalized_features).items()]
    return response
