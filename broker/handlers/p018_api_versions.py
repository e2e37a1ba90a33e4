"""ApiVersions: v0-4

Behavior:
- Lists every API key in the registry with the range this broker implements.
- An unknown version is answered by the server layer in the v0 layout with
  UNSUPPORTED_VERSION and ApiVersions' own range, so any client can downgrade (KIP-511).
- The response header is always v0, even for flexible versions.
- No finalized features are advertised: clients stay on transaction version 1.

Version notes:
- v1 adds throttle_time_ms; v3 (KIP-511) is flexible and carries the client software name.
"""

from protocol.api import REGISTRY, register

from ..request_context import RequestContext


@register(18, 0, 4)
async def handle_api_versions(ctx: RequestContext, request) -> dict:
    return {
        "error_code": 0,
        "api_keys": [{"api_key": s.key, "min_version": s.min_version, "max_version": s.max_version}
                     for s in sorted(REGISTRY.values(), key=lambda s: s.key)],
        "throttle_time": 0,
    }
