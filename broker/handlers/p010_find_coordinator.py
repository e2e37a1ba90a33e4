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
- key_type 2 (share group, "groupId:topicId:partition"): INVALID_REQUEST. Kafka 4.3.1 answers
  that below v6 and for a malformed key; for a well-formed key at v6 it names its share
  coordinator (the ``__share_group_state`` partition's leader). This broker has no share
  coordinator and serves none of the share-group APIs, so it answers the non-retriable
  INVALID_REQUEST rather than a coordinator error a client would retry forever.
- Any other key type: INVALID_REQUEST.
- With an authorizer: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED) or the
  transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED).

Version notes:
- v1 key type, error message; v3 flexible; v4 batched ``coordinator_keys`` (one result per key);
  v5 TRANSACTION_ABORTABLE (KIP-890); v6 key type 2, share groups (KIP-932).
"""

from coordinator.group.metadata import OFFSETS_TOPIC
from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, ResourceType, authorize
from ..server import RequestContext

GROUP, TRANSACTION, SHARE = 0, 1, 2


def _group_node(ctx: RequestContext, group_id: str) -> tuple[int, int]:
    """The leader of the group's ``__consumer_offsets`` partition (clustered)."""
    broker = ctx.services
    try:
        partition = broker.group_coordinator.partition_for(group_id)
    except KafkaError:
        return ErrorCode.coordinator_not_available, -1
    state = broker.metadata.partition(OFFSETS_TOPIC, partition)
    if state is None or state.leader < 0:
        return ErrorCode.coordinator_not_available, -1
    return 0, state.leader


def _authorization_error(ctx: RequestContext, key: str, key_type: int) -> int:
    """DESCRIBE on the group or transactional id, as Kafka's KafkaApis."""
    if key_type == GROUP and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.group_authorization_failed
    if key_type == TRANSACTION and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return ErrorCode.transactional_id_authorization_failed
    return 0


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
        code = ErrorCode.invalid_request  # no share coordinator here (see the module docstring)
    else:
        code = ErrorCode.invalid_request
    if not code:
        endpoint = broker.endpoint(node_id, ctx.listener)
        if endpoint is None:
            code = ErrorCode.coordinator_not_available
        else:
            host, port = endpoint
    if code:
        return {"key": key, "error_code": code, "error_message": ErrorCode(code).name,
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
