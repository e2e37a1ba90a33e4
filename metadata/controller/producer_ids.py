"""Producer-id allocation: blocks of 1000 from the metadata store, prefetched at 90% use.

Kafka splits this between the controller's ProducerIdControlManager (the block counter, here
the store's ``allocate_producer_id_block``) and a broker's RPCProducerIdManager (this class).

An id is never handed out twice, also across restarts and controller failover: a block is
persisted by the store (the embedded file, or a compare-and-swap on etcd's
``producer_id_block`` key) before any id from it is used, and a restart starts from a fresh
block. The next block is fetched in the background once 90% of the current one is used; if
it is not there when the current one runs out, InitProducerId answers
COORDINATOR_LOAD_IN_PROGRESS (retriable), as Kafka's RPCProducerIdManager does.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Protocol

import structlog

from protocol.errors import ErrorCode, KafkaError

__all__ = ["ProducerIdManager", "PRODUCER_ID_BLOCK_SIZE"]

log = structlog.get_logger("metadata.controller.producer_ids")

PRODUCER_ID_BLOCK_SIZE = 1000
PREFETCH_RATIO = 0.9


class ProducerIdBlockSource(Protocol):
    def allocate_producer_id_block(self): ...  # (start, size), or an awaitable of it


class ProducerIdManager:
    def __init__(self, source: ProducerIdBlockSource) -> None:
        self.source = source
        self.block_start, self.block_size = 0, 0
        self.next_id = 0
        self.prefetched: tuple[int, int] | None = None
        self._fetching: asyncio.Task | None = None

    async def _allocate(self) -> tuple[int, int]:
        block = self.source.allocate_producer_id_block()
        return await block if inspect.isawaitable(block) else block

    async def start(self) -> None:
        self.block_start, self.block_size = await self._allocate()
        self.next_id = self.block_start

    def generate_producer_id(self) -> int:
        if self.next_id >= self.block_start + self.block_size:
            if self.prefetched is None:
                self._prefetch()
                raise KafkaError(ErrorCode.coordinator_load_in_progress, "producer-id block not yet allocated")
            self.block_start, self.block_size = self.prefetched
            self.prefetched = None
            self.next_id = self.block_start
        pid = self.next_id
        self.next_id += 1
        if self.prefetched is None and self.next_id - self.block_start >= self.block_size * PREFETCH_RATIO:
            self._prefetch()
        return pid

    def _prefetch(self) -> None:
        if self._fetching is not None and not self._fetching.done():
            return
        self._fetching = asyncio.get_running_loop().create_task(self._fetch())

    async def _fetch(self) -> None:
        try:
            self.prefetched = await self._allocate()
        except Exception as exc:
            log.warning("producer_id_block_allocation_failed", error=repr(exc))
