"""What the group coordinator needs from the broker that hosts it, as one small protocol.

The coordinator never imports ``broker/``: the broker hands in an object with these
capabilities (``broker/coordinator_services.py``). Nothing here assumes a single node: the
coordinator owns the ``__consumer_offsets`` partitions it is told it leads, each at its leader
epoch, and every write is an acks=all append that may fail because leadership moved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import uuid

    from storage.log import Log


class GroupServices(Protocol):
    node_id: int

    def config(self, key: str) -> Any:
        """A broker config value by Kafka's property name (typed, with Kafka's default)."""

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic`` in the cluster metadata, None if it does not exist."""

    def metadata_is_current(self) -> bool:
        """False while this broker cannot trust its image to say what it leads (after a
        stall that may have outlived its session; see ``MetadataCache.is_current``)."""

    def led_partitions(self, topic: str) -> dict[int, int]:
        """Partition -> leader epoch of the ``topic`` partitions this broker leads now."""

    def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str],
                              replication_factor: int) -> int:
        """The topic's partition count, creating it first if needed; raises KafkaError
        (COORDINATOR_NOT_AVAILABLE while a cluster creates it)."""

    async def append_at(self, topic: str, partition: int, records: bytes, timeout_ms: int, *,
                        verification_guard: object | None = None,
                        on_appended: Callable[[int], None] | None = None) -> tuple[int, int]:
        """Append one batch as the leader with acks=all: (0, base offset) once the ISR has it,
        else (error code, -1); with a KIP-890 ``verification_guard``, INVALID_TXN_STATE if a
        marker ended the transaction since the guard was taken. ``on_appended`` gets the
        base offset as soon as the batch is in the local log, before replication."""

    def local_log(self, topic: str, partition: int) -> Log:
        """The local replica's log (read in a worker thread while loading)."""

    def topic_metadata(self) -> dict[str, tuple[uuid.UUID, int]]:
        """Every topic of the cluster metadata: name -> (topic id, partition count)."""

    def group_configs(self, group_id: str) -> dict[str, str]:
        """The dynamic configs set on GROUP ``group_id`` (``consumer.session.timeout.ms``, ...)."""
