"""What every coordinator needs from the broker that hosts it, as small protocols.

The coordinators never import ``broker/``: the broker hands each one an object with the
capabilities its own protocol names (``coordinator/group/services.py``,
``coordinator/transaction/services.py``, the share coordinator's and share groups'), built from
these; ``broker/coordinator_services.py`` implements them, and unit tests hand in fakes.
Nothing here assumes a single node: a coordinator owns the internal-topic partitions it is told
it leads, each at its leader epoch, and every write is an acks=all append that may fail because
leadership moved.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol


class ConfigReader(Protocol):
    def config(self, key: str) -> Any:
        """A broker config value by Kafka's property name (typed, with Kafka's default)."""


class InternalTopics(Protocol):
    """The coordinator's internal topic (``__consumer_offsets``, ``__transaction_state``,
    ``__share_group_state``): its size, the partitions led here, its creation on first use."""

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic`` in the cluster metadata, None if it does not exist."""

    def led_partitions(self, topic: str) -> dict[int, int]:
        """Partition -> leader epoch of the ``topic`` partitions this broker leads now."""

    def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str],
                              replication_factor: int) -> int:
        """The topic's partition count, creating it first if needed; raises KafkaError
        (COORDINATOR_NOT_AVAILABLE while a cluster creates it)."""


class PartitionLog(Protocol):
    """Appending to and reading the internal topic's partitions led here."""

    async def append(self, topic: str, partition: int, records: bytes, timeout_ms: int) -> int:
        """Append one batch as the leader with acks=all, returning once it is durable
        (replicated to the ISR); 0, or the Kafka error code of the failure."""

    def read_batches(self, topic: str, partition: int) -> Iterable[bytes]:
        """Every batch of a local partition from its log start to its end. Called in a
        worker thread."""


class MetadataFreshness(Protocol):
    def metadata_is_current(self) -> bool:
        """False while this broker cannot trust its image to say what it leads (after a
        stall that may have outlived its session; see ``MetadataCache.is_current``)."""


class Clock(Protocol):
    def now_ms(self) -> int: ...
