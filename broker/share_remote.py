"""Reaching another broker's share coordinator: Kafka's ReadShareGroupState (84),
WriteShareGroupState (85) and DeleteShareGroupState (86), sent to the leader of the
``__share_group_state`` partition that holds the state
(:class:`coordinator.share.persister.RemoteShareCoordinator`).

NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS (leadership moving, or a partition being
replayed) are retried a bounded number of times against the leader the metadata names then;
anything else comes back as a KafkaError.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog

from coordinator.share.partition import PersistedState, RecordState, StateBatch
from coordinator.share.persister import STATE_TOPIC, StateKey
from protocol.errors import ErrorCode, KafkaError

from .network_client import NetworkClient

if TYPE_CHECKING:
    from .services import BrokerServices

log = structlog.get_logger("broker.share_remote")

ATTEMPTS = 20
RETRY_S = 0.1
RETRIABLE = (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
             ErrorCode.coordinator_not_available)


class RemoteShareCoordinatorClient:
    def __init__(self, broker: BrokerServices) -> None:
        self.broker = broker
        self.client = NetworkClient.to_peers(f"share-persister-{broker.node_id}", broker.endpoint, broker.config)

    def _coordinator(self, partition: int) -> int:
        state = self.broker.metadata.partition(STATE_TOPIC, partition)
        if state is None or state.leader < 0:
            raise KafkaError(ErrorCode.coordinator_not_available, f"{STATE_TOPIC}-{partition} has no leader")
        return state.leader

    async def _call(self, partition: int, api_key: int, version: int, request: dict):
        """The partition result of the request, retried while the coordinator moves."""
        error: KafkaError | None = None
        for _ in range(ATTEMPTS):
            try:
                node = self._coordinator(partition)
                resp = await self.client.send_request(node, api_key, version, request, timeout=10)
                result = resp.results[0].partitions[0]
                if result.error_code == 0:
                    return result
                error = KafkaError(ErrorCode(result.error_code), result.error_message)
            except KafkaError as exc:
                error = exc
            except (ConnectionError, TimeoutError) as exc:
                error = KafkaError(ErrorCode.coordinator_not_available, str(exc))
            if error.code not in RETRIABLE:
                break
            await asyncio.sleep(RETRY_S)
        assert error is not None
        raise error

    async def read(self, partition: int, key: StateKey) -> PersistedState | None:
        group_id, topic_id, index = key
        result = await self._call(partition, 84, 0, {"group_id": group_id, "topics": [
            {"topic_id": topic_id, "partitions": [{"partition": index, "leader_epoch": -1}]}]})
        if result.start_offset < 0 and not result.state_batches:
            return None
        return PersistedState(result.start_offset, result.state_epoch, -1, [
            StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
            for b in result.state_batches])

    async def write(self, partition: int, key: StateKey, state: PersistedState | None) -> None:
        group_id, topic_id, index = key
        if state is None:
            await self._call(partition, 86, 0, {"group_id": group_id, "topics": [
                {"topic_id": topic_id, "partitions": [{"partition": index}]}]})
            return
        await self._call(partition, 85, 1, {"group_id": group_id, "topics": [{"topic_id": topic_id, "partitions": [
            {"partition": index, "state_epoch": state.state_epoch, "leader_epoch": state.leader_epoch,
             "start_offset": state.start_offset, "delivery_complete_count": sum(
                 b.last_offset - b.first_offset + 1 for b in state.batches if b.state.is_terminal),
             "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                "delivery_state": b.state.value, "delivery_count": b.delivery_count}
                               for b in state.batches]}]}]})

    def close(self) -> None:
        self.client.close()
