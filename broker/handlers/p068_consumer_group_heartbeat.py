"""ConsumerGroupHeartbeat: v0-1 (KIP-848, the consumer group protocol)

Behavior:
- Join (member epoch 0), heartbeat, leave (-1) and a static member's temporary leave (-2) of a
  consumer group; the answer carries the member id, the member epoch, the heartbeat interval
  (``group.consumer.heartbeat.interval.ms`` or the group's ``consumer.heartbeat.interval.ms``)
  and, when it changed or the request was a full one, the member's assignment. The group's
  target assignment is computed by the server assignor (``group.consumer.assignors``, or the
  members' ``server_assignor``). Logic in :mod:`coordinator.group.consumer_coordinator`.
- Errors as Kafka 4.3.1, with its messages: INVALID_REQUEST for a malformed request,
  UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION, FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID,
  UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, GROUP_ID_NOT_FOUND for a
  group id used by a classic group, and the coordinator errors (NOT_COORDINATOR,
  COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE).
- With an authorizer: READ on the group (else GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every
  subscribed topic name (else TOPIC_AUTHORIZATION_FAILED), as Kafka's KafkaApis; a regex
  subscription only matches the topics the caller may DESCRIBE (Kafka's TopicRegexResolver).

Version notes:
- v0 first version (the coordinator makes up the member id on join); v1 the member id is
  made up by the client and required in every request (KIP-1082), and
  ``subscribed_topic_regex`` (RE2J syntax; matched here with Python's ``re``, see
  :mod:`coordinator.group.consumer_coordinator`).
"""

from coordinator.group.consumer_coordinator import HeartbeatRequest, error_response, owned_from_request
from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize, denied, topic_describe_filter
from ..request_context import RequestContext
from .p011_join_group import client_host, millis


@register(68, 0, 1)
async def handle_consumer_group_heartbeat(ctx: RequestContext, request) -> dict:
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return error_response(ErrorCode.group_authorization_failed)
    if denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, request.subscribed_topic_names or ()):
        return error_response(ErrorCode.topic_authorization_failed)
    r = HeartbeatRequest(
        api_version=ctx.api_version, group_id=request.group_id, member_id=request.member_id,
        member_epoch=request.member_epoch, instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=millis(request.rebalance_timeout),
        subscribed_topic_names=None if request.subscribed_topic_names is None else list(request.subscribed_topic_names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None), server_assignor=request.server_assignor,
        owned=owned_from_request(request.topic_partitions), client_id=ctx.header.client_id or "",
        client_host=client_host(ctx), describable_topics=topic_describe_filter(ctx))
    return await ctx.services.group_coordinator.consumer.heartbeat(r)
