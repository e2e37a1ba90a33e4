"""What the group coordinator needs from the broker that hosts it, as one small protocol
(built on those every coordinator needs, :mod:`coordinator.services`).

The coordinator never imports ``broker/``: the broker hands in an object with these
capabilities (``broker/coordinator_services.py``). Nothing here assumes a single node: the
coordinator owns the ``__consumer_offsets`` partitions it is told it leads, each at its leader
epoch, and every write is an acks=all append that may fail because leadership moved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..services import ConfigReader, InternalTopics, MetadataFreshness

if TYPE_CHECKING:
    import uuid

    from storage.log import Log


class GroupServices(ConfigReader, InternalTopics, MetadataFreshness, Protocol):
    node_id: int

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
