"""The capabilities the transaction coordinator gets from this broker (its TxnServices)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocol.errors import KafkaError

from .network_client import NetworkClient

if TYPE_CHECKING:
    from .broker import Broker


class BrokerTxnServices:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.node_id = broker.node_id
        self.client = NetworkClient(f"txn-coordinator-{broker.node_id}")

    def config(self, key: str) -> Any:
        return self.broker.config[key]

    def ensure_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        self.broker.replica_manager.ensure_internal_topic(name, partitions, configs)

    def topic_partitions(self, name: str) -> int | None:
        topic = self.broker.metadata.topics.get(name)
        return len(topic.partitions) if topic else None

    def append(self, topic: str, partition: int, records: bytes) -> int:
        return self.broker.replica_manager.append(topic, partition, records, client=False).base_offset

    async def flush(self, topic: str, partition: int) -> None:
        rm = self.broker.replica_manager
        if rm.needs_flush(topic, partition):
            await rm.flush([rm.get(topic, partition).log])

    def partition_batches(self, topic: str, partition: int):
        plog = self.broker.replica_manager.get(topic, partition).log
        for seg, pos, header in plog.batches(plog.log_start_offset, plog.high_watermark):
            yield seg.read_batch(pos, header)

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self.broker.replica_manager.get(topic, partition).leader_epoch

    def leader_of(self, topic: str, partition: int) -> tuple[int, str, int] | None:
        try:
            self.broker.replica_manager.get(topic, partition)
        except KafkaError:
            return None
        b = self.broker
        return b.node_id, b.host, b.port

    def generate_producer_id(self) -> int:
        return self.broker.producer_ids.generate_producer_id()

    async def send_request(self, host: str, port: int, api_key: int, api_version: int, body: dict) -> Any:
        return await self.client.send(host, port, api_key, api_version, body)

    def count(self, event: str, reason: str) -> None:
        self.broker.metrics.txn_events.labels(event, reason).inc()
