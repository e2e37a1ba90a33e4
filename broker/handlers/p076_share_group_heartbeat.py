"""ShareGroupHeartbeat: v1

Behavior:
- A share consumer (KIP-932) joins with member epoch 0, its own member id (a UUID the client
  generates) and its subscribed topic names; later heartbeats carry its current epoch (and
  the subscription only when it changed); epoch -1 leaves. The answer carries the member epoch,
  the heartbeat interval (``group.share.heartbeat.interval.ms``, or the group's
  ``share.heartbeat.interval.ms``) and, on a join, a full request or a change, the assigned
  partitions by topic id (see :mod:`coordinator.share.membership`).
- INVALID_REQUEST with Kafka's messages for an empty member id, group id or rack id, a first
  heartbeat without topics, an epoch below -1. GROUP_ID_NOT_FOUND for an id that is a classic
  group ("Group <id> is not a share group.") or an unknown group without epoch 0;
  UNKNOWN_MEMBER_ID for an unknown member; FENCED_MEMBER_EPOCH for a wrong epoch;
  GROUP_MAX_SIZE_REACHED past ``group.share.max.size``; NOT_COORDINATOR,
  COORDINATOR_LOAD_IN_PROGRESS and COORDINATOR_NOT_AVAILABLE as for every group API.
- With an authorizer: READ on the group (else GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every
  subscribed topic (else TOPIC_AUTHORIZATION_FAILED), as Kafka's KafkaApis.

Version notes:
- v1 only, as Kafka 4.3.1 (v0 was the 4.0 early access, removed in 4.1); flexible.
"""

from coordinator.group.consumer_coordinator import error_response
from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize, denied
from ..request_context import RequestContext
from .p011_join_group import client_host


@register(76, 1, 1)
async def handle_share_group_heartbeat(ctx: RequestContext, request) -> dict:
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return error_response(ErrorCode.group_authorization_failed)
    if denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, request.subscribed_topic_names or ()):
        return error_response(ErrorCode.topic_authorization_failed)
    names = request.subscribed_topic_names
    result = await ctx.services.share_group_coordinator.heartbeat(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        rack_id=request.rack_id, subscribed_topic_names=None if names is None else list(names),
        client_id=ctx.header.client_id or "", client_host=client_host(ctx))
    return {"throttle_time": 0, **result}
