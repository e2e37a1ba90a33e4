"""The share coordinator's ``__share_group_state`` writes across a leadership change: a write
whose append completes after its partition moved away and came back at a newer epoch is not
applied over what the newer epoch has written since (its answer is NOT_COORDINATOR)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from coordinator.share.partition import PersistedState
from coordinator.share.persister import STATE_TOPIC, ShareCoordinator
from protocol.errors import ErrorCode, KafkaError
from tests.support.loop import settle

KEY = ("g", uuid.uuid4(), 0)


class Services:
    """One ``__share_group_state`` partition in memory; an append can be held after it is
    durable, before its caller hears of it (a slow acks=all completion)."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.hold: asyncio.Event | None = None

    def config(self, key):
        return {"share.coordinator.write.timeout.ms": 5000}.get(key)

    def partition_count(self, topic):
        return 1

    async def append(self, topic, partition, batch, timeout_ms) -> int:
        assert topic == STATE_TOPIC
        self.batches.append(batch)
        hold, self.hold = self.hold, None
        if hold is not None:
            await hold.wait()
        return 0

    def read_batches(self, topic, partition):
        return list(self.batches)


async def _elect(c: ShareCoordinator, epoch: int) -> None:
    c.on_become_leader(0, epoch)
    for _ in range(500):
        if c.ownership.is_current(0, epoch):
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the partition never loaded")


async def test_a_write_completing_after_a_re_election_is_not_applied_over_a_newer_one():
    s = Services()
    c = ShareCoordinator(s)
    await _elect(c, 1)
    await c.write(0, KEY, PersistedState(10))
    s.hold = held = asyncio.Event()
    old = asyncio.ensure_future(c.write(0, KEY, PersistedState(20)))   # durable, completion held
    await settle()
    c.on_resign(0, 1)
    await _elect(c, 2)                                                 # its load replays 20
    assert c.read(0, KEY).start_offset == 20
    await c.write(0, KEY, PersistedState(30))                          # the new epoch writes on
    held.set()
    with pytest.raises(KafkaError) as refused:
        await old
    assert refused.value.code == ErrorCode.not_coordinator
    assert c.read(0, KEY).start_offset == 30                           # what a reload would find too
    await c.tasks.stop()
