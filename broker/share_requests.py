"""What ShareFetch (78) and ShareAcknowledge (79) have in common (and the per-partition loop of
Write/DeleteShareGroupState, 85 and 86): resolving a topic id to a
partition this broker leads, applying acknowledgement batches through the share-partition
manager, the topic READ check of an authorizer, and the leader information of KIP-951 for
NOT_LEADER_OR_FOLLOWER answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from coordinator.share.partition import AckBatch, AcknowledgeType
from protocol.errors import ErrorCode, KafkaError

from .authorization import AclOperation, ResourceType, authorize

if TYPE_CHECKING:
    from .partition import Partition
    from .request_context import RequestContext
    from .services import BrokerServices

NO_LEADER = {"leader_id": -1, "leader_epoch": -1}


def topic_name(services: BrokerServices, topic_id: UUID) -> str | None:
    topic = services.metadata.topic_by_id(topic_id)
    return None if topic is None else topic.name


def unreadable_topic(ctx: RequestContext, topic_id: UUID) -> bool:
    """With an authorizer: the caller may not READ the topic (ShareFetch and ShareAcknowledge
    need READ on each topic, as Kafka's KafkaApis)."""
    if ctx.services.authorizer is None:
        return False
    name = topic_name(ctx.services, topic_id)
    return name is not None and not authorize(ctx, AclOperation.READ, ResourceType.TOPIC, name)


def leader_partition(services: BrokerServices, topic_id: UUID, index: int) -> tuple[str, Partition]:
    """The named, led partition, or KafkaError (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION,
    NOT_LEADER_OR_FOLLOWER)."""
    name = topic_name(services, topic_id)
    if name is None:
        raise KafkaError(ErrorCode.unknown_topic_id, "This server does not host this topic ID.")
    return name, services.replica_manager.leader_partition(name, index)


def current_leader(services: BrokerServices, topic_id: UUID, index: int, code: int) -> dict:
    """KIP-951: where the partition is led now, for NOT_LEADER_OR_FOLLOWER."""
    if code not in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch):
        return NO_LEADER
    name = topic_name(services, topic_id)
    state = None if name is None else services.metadata.partition(name, index)
    if state is None:
        return NO_LEADER
    return {"leader_id": state.leader, "leader_epoch": state.leader_epoch}


def node_endpoints(services: BrokerServices, leaders: set[int], listener: str | None) -> list[dict]:
    out = []
    for node in sorted(n for n in leaders if n >= 0):
        endpoint = services.endpoint(node, listener)
        if endpoint is not None:
            reg = services.metadata.brokers.get(node)
            out.append({"node_id": node, "host": endpoint[0], "port": endpoint[1],
                        "rack": getattr(reg, "rack", None)})
    return out


def ack_batches(partition_request) -> list[AckBatch]:
    return [AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
            for b in partition_request.acknowledgement_batches]


def has_renew(batches: list[AckBatch]) -> bool:
    return any(t == AcknowledgeType.RENEW for b in batches for t in b.types)


async def acknowledge(services: BrokerServices, group_id: str, member_id: str, topic_id: UUID, index: int,
                      batches: list[AckBatch], renew_allowed: bool) -> int:
    """Apply one partition's acknowledgement batches: 0 or the acknowledge error code."""
    if has_renew(batches) and not renew_allowed:
        return ErrorCode.invalid_request
    try:
        leader_partition(services, topic_id, index)
    except KafkaError as exc:
        return exc.code
    return await services.share_manager.acknowledge(group_id, member_id, topic_id, index, batches)


async def write_states(ctx: RequestContext, request, state_of) -> dict:
    """Write/DeleteShareGroupState: ``state_of(partition request)`` written per partition (None
    deletes), each partition answered with its own error."""
    coordinator = ctx.services.share_coordinator
    results = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            key = (request.group_id, topic.topic_id, p.partition)
            try:
                await coordinator.write(coordinator.partition_for(key), key, state_of(p))
                partitions.append({"partition": p.partition, "error_code": 0})
            except KafkaError as exc:
                partitions.append({"partition": p.partition, "error_code": exc.code, "error_message": exc.message})
        results.append({"topic_id": topic.topic_id, "partitions": partitions})
    return {"results": results}
