"""UpdateFeatures: v0-2

Behavior:
- Changes the cluster's finalized feature levels (``kafka-features upgrade|downgrade``), with
  Kafka's checks (coordinator/controller/features.py): a level this broker does not support, an
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

import asyncio

from coordinator.controller.features import FeatureUpdate, InvalidUpdate, UpgradeType, plan_update
from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, authorize_cluster
from ..request_context import RequestContext

ATTEMPTS = 10  # plans redone when another update changed the levels first


@register(57, 0, 2)
async def handle_update_features(ctx: RequestContext, request) -> dict:
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return _response(ctx, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.", [])
    updates = [_update(u, ctx.api_version) for u in request.feature_updates]
    metadata = ctx.services.metadata
    for _ in range(ATTEMPTS):
        epoch = metadata.features_epoch
        try:
            levels = plan_update(metadata.finalized_features, updates, metadata.node_id)
        except InvalidUpdate as exc:
            return _response(ctx, exc.code, f"The update failed for all features since the following feature "
                                            f"had an error: {exc}", [])
        if getattr(request, "validate_only", False):
            break
        if metadata.clustered:
            written = await metadata.update_features(levels, epoch)
        else:
            written = metadata.update_features(levels, epoch)
        if written:
            break
        await asyncio.sleep(0.05)  # the image catches up with the update that came first
    else:
        return _response(ctx, ErrorCode.request_timed_out, "The feature levels kept changing; try again.", [])
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
