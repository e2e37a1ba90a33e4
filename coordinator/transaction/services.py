"""What the transaction coordinator needs from the broker that hosts it, as small protocols.

The coordinator never imports ``broker/``: the broker hands in one object that implements
these capabilities (``broker/txn_services.py``), and the unit tests hand in an in-memory fake.
Nothing here assumes a single node: leaders are looked up per partition and requests go to a
node id, so the same coordinator runs unchanged in a cluster.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Protocol


class ConfigReader(Protocol):
    def config(self, key: str) -> Any:
        """A broker config value by Kafka's property name (typed, with Kafka's default)."""


class PartitionLog(Protocol):
    """The ``__transaction_state`` topic: create it, append to and read its partitions."""

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic`` in the cluster metadata, None if it does not exist."""

    def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str],
                              replication_factor: int) -> int:
        """Create an internal topic (idempotent), returning its partition count; raises on failure."""

    async def append(self, topic: str, partition: int, records: bytes, timeout_ms: int) -> int:
        """Append one batch as the leader with acks=all, returning once it is durable
        (replicated to the ISR); 0, or the Kafka error code of the failure."""

    def read_batches(self, topic: str, partition: int) -> Iterable[bytes]:
        """Every batch of a local partition from its log start to its end. Called in a
        worker thread."""


class MetadataFreshness(Protocol):
    def metadata_is_current(self) -> bool:
        """False while this broker cannot trust its image to say what it leads (after a
        stall that may have outlived its session)."""


class LeaderLookup(Protocol):
    """The cluster metadata as this broker sees it."""

    node_id: int

    def leader(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(leader node id, leader epoch), or None if the partition does not exist.
        A node id of -1 means the partition exists but has no leader right now."""

    def registered_broker_count(self) -> int:
        """Brokers registered, fenced ones included (what an internal topic's replication factor needs, as KRaft counts)."""


class ProducerIdSource(Protocol):
    def generate_producer_id(self) -> int:
        """A producer id never handed out before in the cluster."""


class InterBrokerSender(Protocol):
    async def send_request(self, node_id: int, api_key: int, api_version: int, request: Any) -> Any:
        """Send a request (a kio entity or a dict of its fields) to a broker and return the
        kio response entity; raises ConnectionError/OSError/TimeoutError when it cannot."""


class Clock(Protocol):
    def now_ms(self) -> int: ...


class TxnMetrics(Protocol):
    def count(self, event: str, reason: str) -> None:
        """Count a coordinator event (fenced, aborted, expired, rotated) with its reason."""


class FeatureLevels(Protocol):
    def transaction_version(self) -> int:
        """The cluster's finalized ``transaction.version`` (0 when not finalized)."""


class TxnServices(ConfigReader, PartitionLog, LeaderLookup, MetadataFreshness, ProducerIdSource,
                  InterBrokerSender, Clock, TxnMetrics, FeatureLevels, Protocol):
    """Everything at once, as the broker provides it."""


class SystemClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)

