"""SharePartitionManager against an in-memory share coordinator: what stays cached and when."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from coordinator.runtime import ManualTimer
from coordinator.share.manager import SharePartitionManager
from coordinator.share.partition import AckBatch, PersistedState
from protocol.errors import ErrorCode, KafkaError
from tests.support.loop import settle
from tests.unit.test_share_partition import FakeLog

TOPIC_ID = uuid.uuid4()
CONFIGS = {"share.record.lock.duration.ms": 30_000, "share.delivery.count.limit": 5,
           "share.partition.max.record.locks": 2000, "group.share.max.share.sessions": 100}


class MemoryPersister:
    def __init__(self) -> None:
        self.states: dict[tuple, PersistedState] = {}

    async def read_state(self, group_id, topic_id, partition):
        return self.states.get((group_id, topic_id, partition))

    async def write_state(self, group_id, topic_id, partition, state):
        await asyncio.sleep(0)
        self.states[(group_id, topic_id, partition)] = state

    async def delete_state(self, group_id, partitions):
        for topic_id, partition in partitions:
            self.states.pop((group_id, topic_id, partition), None)

    async def group_partitions(self, group_id):
        return [(k[1], k[2]) for k in self.states if k[0] == group_id]


class Services:
    def config(self, key):
        return CONFIGS.get(key, CONFIGS.get(key.removeprefix("group.")))

    def group_configs(self, group_id):
        return {"share.auto.offset.reset": "earliest"}

    async def catch_up_group_config(self, group_id):
        pass

    def wake(self, topic, partition):
        pass

    def now_ms(self):
        return 0


async def _settle(manager: SharePartitionManager) -> None:
    while manager.tasks:
        await asyncio.gather(*manager.tasks.tasks)


def test_a_groups_share_partitions_leave_the_cache_when_its_last_session_here_ends():
    async def scenario():
        persister = MemoryPersister()
        manager = SharePartitionManager(Services(), persister)
        log = FakeLog()
        log.append(3)
        key = ("g", TOPIC_ID, 0)
        session = manager.open_session("g", "m1", 0, object(), acknowledging=False)
        other = manager.open_session("g", "m2", 0, object(), acknowledging=False)
        await manager.share_partition("g", "t", TOPIC_ID, 0, log)
        assert manager.acquire(key, "m1", log, 500, 1 << 20).count == 3
        assert await manager.acknowledge("g", "m1", TOPIC_ID, 0, [AckBatch(0, 0, (1,))]) == 0
        manager.close_session(session)
        await _settle(manager)
        assert key in manager.entries            # m2's session still uses the group here
        manager.close_session(other)
        await _settle(manager)
        assert key not in manager.entries        # Kafka's onGroupEmpty
        state = persister.states[key]            # m1's released records were written first
        assert state.start_offset == 1 and all(b.state.name == "AVAILABLE" for b in state.batches)
        # An offsets reset written to the share coordinator now takes effect on the next load.
        persister.states[key] = PersistedState(0, 0, -1)
        reloaded = await manager.share_partition("g", "t", TOPIC_ID, 0, log)
        assert reloaded.start_offset == 0

    asyncio.run(scenario())


class CoordinatorComingUp(MemoryPersister):
    """``__share_group_state`` being created: the first reads answer COORDINATOR_NOT_AVAILABLE."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def read_state(self, group_id, topic_id, partition):
        if self.failures:
            self.failures -= 1
            raise KafkaError(ErrorCode.coordinator_not_available, "__share_group_state is being created")
        return await super().read_state(group_id, topic_id, partition)


def test_a_share_coordinator_not_there_yet_is_waited_for_not_answered():
    async def scenario():
        timer = ManualTimer()
        manager = SharePartitionManager(Services(), CoordinatorComingUp(failures=2), timer)
        log = FakeLog()
        log.append(1)
        assert manager.ready("g", "t", TOPIC_ID, 0, log) is None       # loading in the background
        for backoff_ms in (100, 200):  # each failed read is retried after its back-off
            await settle()
            assert manager.ready("g", "t", TOPIC_ID, 0, log) is None   # retrying: no error answered
            assert timer.advance(backoff_ms - 1) == 0 and timer.advance(1) == 1
        await _settle(manager)
        assert manager.ready("g", "t", TOPIC_ID, 0, log) is not None

    asyncio.run(scenario())


def test_acquisition_locks_expire_on_the_managers_clock_and_the_release_is_persisted():
    class Clocked(Services):
        def __init__(self, timer: ManualTimer) -> None:
            self.timer = timer

        def now_ms(self):
            return int(self.timer.now_ms)

    async def scenario():
        timer, persister = ManualTimer(), MemoryPersister()
        manager = SharePartitionManager(Clocked(timer), persister, timer)
        log = FakeLog()
        log.append(2)
        key = ("g", TOPIC_ID, 0)
        manager.open_session("g", "m1", 0, object(), acknowledging=False)
        await manager.share_partition("g", "t", TOPIC_ID, 0, log)
        assert manager.acquire(key, "m1", log, 500, 1 << 20).count == 2
        assert manager.acquire(key, "m2", log, 500, 1 << 20).count == 0   # locked by m1
        timer.advance(29_999)                                             # share.record.lock.duration.ms
        assert manager.acquire(key, "m2", log, 500, 1 << 20).count == 0
        timer.advance(10)
        await _settle(manager)
        state = persister.states[key]                                     # the release was written
        assert [(b.first_offset, b.last_offset, b.state.name, b.delivery_count) for b in state.batches] \
            == [(0, 1, "AVAILABLE", 1)]
        again = manager.acquire(key, "m2", log, 500, 1 << 20)
        assert again.count == 2 and {r.delivery_count for r in again.ranges} == {2}
        assert timer.pending == 1                                         # m2's locks are timed in turn

    asyncio.run(scenario())


def test_a_load_error_that_is_not_retriable_is_answered_once():
    class Broken(MemoryPersister):
        async def read_state(self, group_id, topic_id, partition):
            raise KafkaError(ErrorCode.unknown_server_error, "broken")

    async def scenario():
        manager = SharePartitionManager(Services(), Broken())
        log = FakeLog()
        assert manager.ready("g", "t", TOPIC_ID, 0, log) is None
        await _settle(manager)
        with pytest.raises(KafkaError) as raised:
            manager.ready("g", "t", TOPIC_ID, 0, log)
        assert raised.value.code == ErrorCode.unknown_server_error
        assert manager.ready("g", "t", TOPIC_ID, 0, log) is None       # the next fetch tries again

    asyncio.run(scenario())
