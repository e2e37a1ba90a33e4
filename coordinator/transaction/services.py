"""What the transaction coordinator needs from the broker that hosts it, as small protocols
(beside those every coordinator needs, :mod:`coordinator.services`).

The coordinator never imports ``broker/``: the broker hands in one object that implements
these capabilities (``broker/txn_services.py``), and the unit tests hand in an in-memory fake.
Nothing here assumes a single node: leaders are looked up per partition and requests go to a
node id, so the same coordinator runs unchanged in a cluster.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..services import Clock, ConfigReader, InternalTopics, MetadataFreshness, PartitionLog


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


class TxnMetrics(Protocol):
    def count(self, event: str, reason: str) -> None:
        """Count a coordinator event (fenced, aborted, expired, rotated) with its reason."""


class FeatureLevels(Protocol):
    def transaction_version(self) -> int:
        """The cluster's finalized ``transaction.version`` (0 when not finalized)."""


class TxnServices(ConfigReader, InternalTopics, PartitionLog, LeaderLookup, MetadataFreshness, ProducerIdSource,
                  InterBrokerSender, Clock, TxnMetrics, FeatureLevels, Protocol):
    """Everything at once, as the broker provides it."""
