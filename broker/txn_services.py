"""The capabilities the transaction coordinator gets from this broker
(:class:`coordinator.transaction.services.TxnServices`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import structlog

from protocol.errors import ErrorCode, KafkaError

from .network_client import NetworkClient

if TYPE_CHECKING:
    from .broker import Broker

log = structlog.get_logger("broker.txn_services")


class BrokerTxnServices:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.node_id = broker.node_id
        self.client = NetworkClient(f"txn-coordinator-{broker.node_id}", self.endpoint)

    # --- config, clock, metrics -------------------------------------------------------------------

    def config(self, key: str) -> Any:
        return self.broker.config.get(key)

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def count(self, event: str, reason: str) -> None:
        self.broker.metrics.txn_events.labels(event, reason).inc()

    # --- metadata ---------------------------------------------------------------------------------

    def partition_count(self, topic: str) -> int | None:
        state = self.broker.metadata.topics.get(topic)
        return None if state is None else len(state.partitions)

    def leader(self, topic: str, partition: int) -> tuple[int, int] | None:
        state = self.broker.metadata.topics.get(topic)
        if state is None or not 0 <= partition < len(state.partitions):
            return None
        p = state.partitions[partition]
        return p.leader, p.leader_epoch

    def alive_broker_count(self) -> int:
        return max(len(self.broker.metadata.brokers), 1)

    def endpoint(self, node_id: int) -> tuple[str, int] | None:
        """Where to reach a broker (this one or a registered peer) on the inter-broker listener."""
        return self.broker.endpoint(node_id)

    def generate_producer_id(self) -> int:
        return self.broker.producer_ids.generate_producer_id()

    # --- the log ----------------------------------------------------------------------------------

    def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        self.broker.replica_manager.ensure_internal_topic(
            name, partitions, configs, self.broker.config["transaction.state.log.replication.factor"])

    async def append(self, topic: str, partition: int, records: bytes, timeout_ms: int) -> int:
        """Append as the leader with acks=all: returns once the ISR has it (and it is flushed
        where the flush policy asks for it), else the error code."""
        rm = self.broker.replica_manager
        try:
            await rm.append_replicated(topic, partition, records, timeout_ms)
        except KafkaError as exc:
            return exc.code
        except Exception:
            log.exception("internal_append_failed", topic=topic, partition=partition)
            return ErrorCode.kafka_storage_error
        return 0

    def read_batches(self, topic: str, partition: int) -> Iterator[bytes]:
        plog = self.broker.replica_manager.get(topic, partition).log
        for seg, pos, header in plog.batches(plog.log_start_offset, plog.log_end_offset):
            yield seg.read_batch(pos, header)

    # --- inter-broker -------------------------------------------------------------------------------

    async def verify_partitions_remote(self, node_id: int, transactional_id: str, producer_id: int,
                                       producer_epoch: int, partitions: list[tuple[str, int]]) -> dict:
        """KIP-890: AddPartitionsToTxn v4 verify_only to the coordinator on ``node_id``."""
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        request = {"transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                                     "producer_epoch": producer_epoch, "verify_only": True,
                                     "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}]}
        try:
            response = await self.client.send_request(node_id, 24, 4, request, timeout=10)
        except (ConnectionError, OSError, TimeoutError) as exc:
            log.warning("txn_verification_unreachable", node_id=node_id, error=str(exc))
            return {tp: ErrorCode.coordinator_not_available for tp in partitions}
        if response.error_code:
            return {tp: response.error_code for tp in partitions}
        out = {tp: ErrorCode.unknown_server_error for tp in partitions}
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for part in topic.results_by_partition:
                    out[(topic.name, part.partition_index)] = part.partition_error_code
        return out

    async def send_request(self, node_id: int, api_key: int, api_version: int, request: Any) -> Any:
        return await self.client.send_request(node_id, api_key, api_version, request)

    def close(self) -> None:
        self.client.close()
