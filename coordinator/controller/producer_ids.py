"""Producer-id allocation: blocks of 1000 from the controller, prefetched at 90% use.

An id is never handed out twice, also across restarts: a block is persisted by the metadata
store before any id from it is used, and a restart starts from a fresh block.
"""

from __future__ import annotations

from typing import Protocol

PREFETCH_RATIO = 0.9


class ProducerIdBlockSource(Protocol):
    def allocate_producer_id_block(self) -> tuple[int, int]: ...


class ProducerIdManager:
    def __init__(self, source: ProducerIdBlockSource) -> None:
        self.source = source
        self.block_start, self.block_size = source.allocate_producer_id_block()
        self.next_id = self.block_start
        self.prefetched: tuple[int, int] | None = None

    def generate_producer_id(self) -> int:
        if self.next_id >= self.block_start + self.block_size:
            self.block_start, self.block_size = self.prefetched or self.source.allocate_producer_id_block()
            self.prefetched = None
            self.next_id = self.block_start
        pid = self.next_id
        self.next_id += 1
        used = self.next_id - self.block_start
        if self.prefetched is None and used >= self.block_size * PREFETCH_RATIO:
            self.prefetched = self.source.allocate_producer_id_block()
        return pid
