"""UpdateFeatures: v0-2

Behavior:
- Changes the cluster's finalized feature levels (``kafka-features upgrade|downgrade``), with
  Kafka's checks (metadata/controller/features.py): a level this broker does not support, an
  unknown feature, a downgrade without a downgrade type, ... answer INVALID_UPDATE_VERSION with
  Kafka's message for the whole request ("The update failed for all features since ..."), and
  nothing changes. ``validate_only`` checks without changing.
- The new levels are cluster metadata: every broker answers them in ApiVersions, with a new
  finalized-features epoch. Two concurrent updates do not overwrite each other: the second is
  planned again on the first's result.
- With an authorizer: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED.

Version notes:
- v0 has ``allow_downgrade`` (a downgrade is then a safe one); v1 the upgrade type and
  ``validate_only``; v2 drops the per-feature results. Kafka's brokers forward it to the
  controller; any broker applies it here.
"""

from metadata.controller.features import FeatureUpdate, InvalidUpdate, UpgradeType
from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, authorize_cluster
from ..request_context import RequestContext


@register(57, 0, 2)
async def handle_update_features(ctx: RequestContext, request) -> dict:
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return _response(ctx, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.", [])
    updates = [_update(u, ctx.api_version) for u in request.feature_updates]
    try:
        await ctx.services.control.features.update(updates, getattr(request, "validate_only", False))
    except InvalidUpdate as exc:
        return _response(ctx, exc.code, f"The update failed for all features since the following feature "
                                        f"had an error: {exc}", [])
    except KafkaError as exc:
        return _response(ctx, exc.code, exc.message, [])
    return _response(ctx, 0, None, updates)


def _update(u, version: int) -> FeatureUpdate:
    if version == 0:
        kind = UpgradeType.SAFE_DOWNGRADE if u.allow_downgrade else UpgradeType.UPGRADE
    else:
        kind = UpgradeType.of(u.upgrade_type)
    return FeatureUpdate(u.feature, u.max_version_level, kind)


def _response(ctx: RequestContext, code: int, message: str | None, updates: list[FeatureUpdate]) -> dict:
    response = {"throttle_time": 0, "error_code": code, "error_message": message}
    if ctx.api_version <= 1:  # per-feature results only on success, as Kafka's controller answers
        response["results"] = [{"feature": u.feature, "error_code": 0, "error_message": None} for u in updates]
    return response
