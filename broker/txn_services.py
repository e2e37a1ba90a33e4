"""The capabilities the transaction coordinator gets from this broker
(:class:`coordinator.transaction.services.TxnServices`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from coordinator.runtime import fault_points
from metadata.controller.features import TRANSACTION_VERSION, effective_levels

from .coordinator_services import BrokerCoordinatorServices
from .network_client import NetworkClient
from .txn_verification import AddPartitionsToTxnManager

VERIFICATION_DELAY_FAULT = "txn.verification.delay"

if TYPE_CHECKING:
    from .services import BrokerServices

class BrokerTxnServices(BrokerCoordinatorServices):
    def __init__(self, broker: BrokerServices) -> None:
        super().__init__(broker)
        self.client = NetworkClient.to_peers(f"txn-coordinator-{broker.node_id}", self.endpoint, broker.config)
        self.verifier = AddPartitionsToTxnManager(self.client)

    def count(self, event: str, reason: str) -> None:
        self.broker.metrics.txn_events.labels(event, reason).inc()

    # --- metadata ---------------------------------------------------------------------------------

    def leader(self, topic: str, partition: int) -> tuple[int, int] | None:
        state = self.broker.metadata.topics.get(topic)
        if state is None or not 0 <= partition < len(state.partitions):
            return None
        p = state.partitions[partition]
        return p.leader, p.leader_epoch

    def registered_broker_count(self) -> int:
        return max(len(self.broker.metadata.registered), 1)

    def endpoint(self, node_id: int) -> tuple[str, int] | None:
        """Where to reach a broker (this one or a registered peer) on the inter-broker listener."""
        return self.broker.endpoint(node_id)

    def generate_producer_id(self) -> int:
        return self.broker.producer_ids.generate_producer_id()

    def transaction_version(self) -> int:
        return effective_levels(self.broker.metadata.finalized_features).get(TRANSACTION_VERSION, 0)

    # --- inter-broker -------------------------------------------------------------------------------

    async def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                partitions: list[tuple[str, int]], *, add: bool = False) -> dict[tuple[str, int], int]:
        """KIP-890: is each partition in the producer's ongoing transaction (part 1), or, with
        ``add``, add it (part 2: a Produce v12+ or TxnOffsetCommit v5+)? Asked of the local
        coordinator, or of the coordinator's broker through the batching manager."""
        coordinator = self.broker.txn_coordinator
        code, node = coordinator.coordinator_node(transactional_id)
        if code:
            return {tp: code for tp in partitions}
        if node != self.node_id:
            result = await self.verifier.verify(node, transactional_id, producer_id, producer_epoch, partitions,
                                                add=add)
        elif add:
            code = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, set(partitions),
                                                    transaction_version=2)
            result = {tp: code for tp in partitions}
        else:
            result = await coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
        await self._verification_delay_fault_point()
        return result

    async def _verification_delay_fault_point(self) -> None:
        """Test fault point ``txn.verification.delay:<ms>``: the answer reaches the append that
        much later, as a slow coordinator link would deliver it (a marker can land meanwhile)."""
        delay_ms = int(fault_points(self.broker.config.get("test.fault.points")).get(VERIFICATION_DELAY_FAULT) or 0)
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)

    async def send_request(self, node_id: int, api_key: int, api_version: int, request: Any) -> Any:
        return await self.client.send_request(node_id, api_key, api_version, request)

    def close(self) -> None:
        self.verifier.close()
        self.client.close()
