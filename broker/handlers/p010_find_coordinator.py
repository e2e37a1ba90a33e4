"""FindCoordinator: v0-6

Behavior:
- key_type 0 (group): the leader of the group's ``__consumer_offsets`` partition (this broker
  on a single node), after creating the topic (compacted, ``offsets.topic.num.partitions``
  partitions, ``offsets.topic.replication.factor`` replicas) on first use, as Kafka does;
  COORDINATOR_NOT_AVAILABLE while it is being created or has no leader.
- key_type 1 (transaction): the leader of the id's ``__transaction_state`` partition, after
  creating the topic on first use; COORDINATOR_NOT_AVAILABLE if that partition has no
  reachable leader. As in Kafka, the answer does not wait for the partition to be loaded
  (InitProducerId and the others answer COORDINATOR_LOAD_IN_PROGRESS meanwhile), and an
  empty transactional id is an ordinary key.
- key_type 2 (share-partition, "groupId:topicId:partition", v6+): the leader of the key's
  ``__share_group_state`` partition, the share coordinator (the topic is created on first use);
  below v6, or a key that does not parse, INVALID_REQUEST, as Kafka 4.3.1. Brokers ask it; with
  an authorizer it needs CLUSTER_ACTION (else CLUSTER_AUTHORIZATION_FAILED).
- Any other key type: INVALID_REQUEST.
- Error messages as Kafka's: the error's own message up to v3; from v4 an empty one, except for
  an unknown key type.
- With an authorizer: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED) or the
  transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED).

Version notes:
- v1 key type, error message; v3 flexible; v4 batched ``coordinator_keys`` (one result per key);
  v5 TRANSACTION_ABORTABLE (KIP-890); v6 key type 2, share groups (KIP-932).
"""

import base64
import uuid

from coordinator.group.metadata import OFFSETS_TOPIC
from coordinator.share.persister import STATE_TOPIC
from protocol.api import register
from protocol.errors import ErrorCode, KafkaError, error_description

from ..authorization import AclOperation, ResourceType, authorize, authorize_cluster
from ..request_context import RequestContext

GROUP, TRANSACTION, SHARE = 0, 1, 2


def _group_node(ctx: RequestContext, group_id: str) -> tuple[int, int]:
    """The leader of the group's ``__consumer_offsets`` partition (clustered)."""
    return _leader_of(ctx, OFFSETS_TOPIC, lambda: ctx.services.group_coordinator.partition_for(group_id))


def _leader_of(ctx: RequestContext, topic: str, partition_for) -> tuple[int, int]:
    """(0, leader) of the internal topic's partition ``partition_for()`` names (which may
    create the topic), else COORDINATOR_NOT_AVAILABLE."""
    try:
        partition = partition_for()
    except KafkaError:
        return ErrorCode.coordinator_not_available, -1
    state = ctx.services.metadata.partition(topic, partition)
    if state is None or state.leader < 0:
        return ErrorCode.coordinator_not_available, -1
    return 0, state.leader


def _share_node(ctx: RequestContext, key: str) -> tuple[int, int]:
    """The leader of the share-partition key's ``__share_group_state`` partition."""
    try:
        group_id, topic_id, partition = key.rsplit(":", 2)
        if len(topic_id) != 22:  # Kafka's Uuid.toString: 16 bytes in URL-safe base64, unpadded
            raise ValueError(topic_id)
        state_key = (group_id, uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "==")), int(partition))
    except ValueError:
        return ErrorCode.invalid_request, -1
    if ctx.api_version < 6 or not group_id:
        return ErrorCode.invalid_request, -1
    return _leader_of(ctx, STATE_TOPIC, lambda: ctx.services.share_coordinator.partition_for(state_key))


def _authorization_error(ctx: RequestContext, key: str, key_type: int) -> int:
    """DESCRIBE on the group or transactional id, as Kafka's KafkaApis."""
    if key_type == GROUP and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.group_authorization_failed
    if key_type == TRANSACTION and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return ErrorCode.transactional_id_authorization_failed
    if key_type == SHARE and not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return ErrorCode.cluster_authorization_failed
    return 0


def _error_message(ctx: RequestContext, key_type: int, code: int) -> str:
    """Kafka's: v0-3 answers carry the error's message; v4+ results of a known key type carry an
    empty one (KafkaApis sets none), those of an unknown type the message of the whole request's
    INVALID_REQUEST."""
    if ctx.api_version >= 4 and key_type in (GROUP, TRANSACTION, SHARE):
        return ""
    return error_description(code) or ""


def _lookup(ctx: RequestContext, key: str, key_type: int) -> dict:
    broker = ctx.services
    node_id = broker.node_id
    refused = _authorization_error(ctx, key, key_type)
    if refused:
        code = refused
    elif key_type == GROUP and broker.clustered:
        code, node_id = _group_node(ctx, key)
    elif key_type == GROUP:
        code = broker.group_coordinator.coordinator_error(key)
    elif key_type == TRANSACTION:
        code, node_id = broker.txn_coordinator.coordinator_node(key)
    elif key_type == SHARE:
        code, node_id = _share_node(ctx, key)
    else:
        code = ErrorCode.invalid_request
    if not code:
        endpoint = broker.endpoint(node_id, ctx.listener)
        if endpoint is None:
            code = ErrorCode.coordinator_not_available
        else:
            host, port = endpoint
    if code:
        return {"key": key, "error_code": code, "error_message": _error_message(ctx, key_type, code),
                "node_id": -1, "host": "", "port": -1}
    return {"key": key, "error_code": 0, "error_message": None, "node_id": node_id,
            "host": host, "port": port}


@register(10, 0, 6)
async def handle_find_coordinator(ctx: RequestContext, request) -> dict:
    key_type = getattr(request, "key_type", GROUP)
    if ctx.api_version >= 4:
        return {"throttle_time": 0,
                "coordinators": [_lookup(ctx, k, key_type) for k in request.coordinator_keys]}
    result = _lookup(ctx, request.key, key_type)
    result["throttle_time"] = 0
    return result
