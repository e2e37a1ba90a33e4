"""ShareAcknowledge: v1-2 (KIP-932)

Behavior:
- Needs an open share session (ShareFetch opened it): epoch 0 is INVALID_SHARE_SESSION_EPOCH
  (acknowledgements cannot open a session), a missing session SHARE_SESSION_NOT_FOUND, an
  epoch other than the session's INVALID_SHARE_SESSION_EPOCH (top-level errors); epoch -1
  applies the acknowledgements, then closes the session (its member's remaining acquired
  records become available).
- Each partition's batches are applied all or nothing by its share-partition: ACCEPT
  acknowledges, RELEASE makes the records available again (archived at the delivery-count
  limit), REJECT and GAP archive, RENEW extends the acquisition lock. A record not acquired
  by the member (or acknowledged twice) is INVALID_RECORD_STATE; malformed or out-of-order
  batches INVALID_REQUEST; a share-partition not loaded here (never fetched on this broker)
  UNKNOWN_TOPIC_OR_PARTITION; an unknown topic id UNKNOWN_TOPIC_ID; a partition not led here NOT_LEADER_OR_FOLLOWER with the current
  leader and ``node_endpoints`` (KIP-951). The answer comes once the new state is persisted.
- With an authorizer: READ on the group (else GROUP_AUTHORIZATION_FAILED) and on each topic
  (else TOPIC_AUTHORIZATION_FAILED for its partitions).

Version notes:
- v0 (Kafka 4.0 early access) was removed in 4.1; v1 is the stable KIP-932 version.
- v2 adds ``is_renew_ack`` and the RENEW type (KIP-1222); RENEW in v1 is INVALID_REQUEST.
"""

from coordinator.share.manager import FINAL_EPOCH
from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from .. import share_requests as sr
from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext


@register(79, 1, 2)
async def handle_share_acknowledge(ctx: RequestContext, request) -> dict:
    services = ctx.services
    manager = services.share_manager
    group_id, member_id = request.group_id or "", request.member_id or ""
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "error_message": None,
                "acquisition_lock_timeout": 0, "responses": [], "node_endpoints": []}
    try:
        session = manager.check_acknowledge_session(group_id, member_id, request.share_session_epoch)
    except KafkaError as exc:
        return {"throttle_time": 0, "error_code": exc.code, "error_message": exc.message,
                "acquisition_lock_timeout": 0, "responses": [], "node_endpoints": []}
    responses, leaders = [], set()
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            if sr.unreadable_topic(ctx, topic.topic_id):
                code = ErrorCode.topic_authorization_failed
            else:
                code = await sr.acknowledge(services, group_id, member_id, topic.topic_id, p.partition_index,
                                            sr.ack_batches(p), ctx.api_version >= 2)
            leader = sr.current_leader(services, topic.topic_id, p.partition_index, code)
            if code == ErrorCode.not_leader_or_follower:
                leaders.add(leader["leader_id"])
            partitions.append({"partition_index": p.partition_index, "error_code": code,
                               "current_leader": leader})
        responses.append({"topic_id": topic.topic_id, "partitions": partitions})
    if request.share_session_epoch == FINAL_EPOCH:
        manager.close_session(session)
    return {"throttle_time": 0, "error_code": 0,
            "acquisition_lock_timeout": manager.share_config(group_id).record_lock_duration_ms,
            "responses": responses, "node_endpoints": sr.node_endpoints(services, leaders, ctx.listener)}
