"""AddOffsetsToTxn: v0-4

Behavior:
- Adds the group's ``__consumer_offsets`` partition (``Utils.abs(groupId.hashCode) %``
  partitions, created on first use) to the producer's transaction, the first step of
  ``sendOffsetsToTransaction``; the same errors as AddPartitionsToTxn.
- With an authorizer: WRITE on the transactional id (else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the group (else GROUP_AUTHORIZATION_FAILED).

Version notes:
- v2 PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before); v3 flexible; v4 TV2 semantics on the
  client side only.
"""

from coordinator.group.metadata import OFFSETS_TOPIC
from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext


@register(25, 0, 4)
async def handle_add_offsets_to_txn(ctx: RequestContext, request) -> dict:
    broker = ctx.services
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    try:
        partition = broker.group_coordinator.partition_for(request.group_id)
    except KafkaError:
        return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available}
    code = await broker.txn_coordinator.add_partitions(
        request.transactional_id, request.producer_id, request.producer_epoch, {(OFFSETS_TOPIC, partition)})
    if code == ErrorCode.producer_fenced and ctx.api_version < 2:
        code = ErrorCode.invalid_producer_epoch
    return {"throttle_time": 0, "error_code": code}
