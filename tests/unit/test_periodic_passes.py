"""The replica manager's periodic passes cost what changed: the ISR lag pass looks only at led
partitions appended to (or led anew) since their ISR was last at the log end, and the flush
pass only at logs with unflushed data and a flush.ms or flush.messages of their own. Real
partitions and logs; the ISR proposals are recorded instead of written."""

from __future__ import annotations

import asyncio
import dataclasses
import types
import uuid

import pytest

from broker.replica_manager import ReplicaManager
from protocol import records as rb
from storage.log import Log, LogConfig

LAG_MS = 30_000


@pytest.fixture
def rm(tmp_path):
    manager = ReplicaManager(config={"replica.lag.time.max.ms": LAG_MS, "min.insync.replicas": 1},
                             metadata=types.SimpleNamespace(topics={}), store=None, log_manager=None, metrics=None,
                             node_id=1)
    manager.proposed = []
    manager._propose_isr = lambda part, isr, reason, joining=None: manager.proposed.append((part.index, isr))
    manager.tmp = tmp_path
    yield manager
    for part in manager.partitions.values():
        part.log.close()


def _host(rm: ReplicaManager, index: int, config: LogConfig | None = None):
    log, _ = Log.open(rm.tmp / f"t-{index}", "t", index, config or LogConfig())
    part = rm._add_partition(types.SimpleNamespace(name="t", uuid=uuid.uuid4()), index, log)
    part.make_leader(leader_epoch=1, partition_epoch=1, replicas=[1, 2], isr=[1, 2])
    return part


def _append(part) -> None:
    part.append_records_to_leader(bytes(rb.build_batch([(b"k", b"v")], timestamp=0)), acks=1, min_isr=1)


def test_the_isr_pass_looks_only_at_partitions_whose_followers_may_be_behind(rm):
    parts = [_host(rm, i) for i in range(3)]
    assert rm._lag_watch == {("t", 0), ("t", 1), ("t", 2)}  # led anew: followers not yet heard from
    for part in parts:
        part.update_follower_fetch_state(2, part.log.log_end_offset, now_ms=1_000)
    rm.shrink_isr_pass()
    assert rm._lag_watch == set() and rm.proposed == []
    for part in parts:
        part.followers[2].last_caught_up_ms = 0  # long ago, but at the log end: in sync
    rm.shrink_isr_pass()
    assert rm.proposed == []
    _append(parts[1])  # the follower is now behind, and has not caught up for longer than the lag
    assert rm._lag_watch == {("t", 1)}
    rm.shrink_isr_pass()
    assert rm.proposed == [(1, [1])]
    assert rm._lag_watch == {("t", 1)}  # looked at again until its ISR is at the log end


def test_a_partition_no_longer_led_leaves_the_isr_watch(rm):
    part = _host(rm, 0)
    part.make_follower(leader_id=2, leader_epoch=2, partition_epoch=2, replicas=[1, 2], isr=[1, 2])
    rm.shrink_isr_pass()
    assert rm._lag_watch == set() and rm.proposed == []


def test_a_follower_behind_but_recently_caught_up_is_not_dropped(rm):
    part = _host(rm, 0)
    _append(part)
    part.update_follower_fetch_state(2, 0, now_ms=10**13)  # behind, caught up as of "now" (far future)
    part.followers[2].last_caught_up_ms = 10**13
    rm.shrink_isr_pass()
    assert rm.proposed == [] and rm._lag_watch == {("t", 0)}


def test_the_flush_pass_looks_only_at_logs_that_can_come_due(rm):
    timed = _host(rm, 0, LogConfig(flush_interval_ms=0))
    default = _host(rm, 1)  # flush.ms and flush.messages unbounded: flushed only when asked
    assert rm._flush_watch == set()
    _append(timed)
    _append(default)
    assert rm._flush_watch == {timed.log}  # the default one is never watched
    asyncio.run(rm.flush())
    assert timed.log.unflushed_messages == 0 and timed.log.recovery_point == timed.log.log_end_offset
    assert default.log.unflushed_messages == 1 and default.log not in rm._flush_watch
    asyncio.run(rm.flush())
    assert rm._flush_watch == set()  # the flushed one leaves at the next pass
    _append(timed)
    assert rm._flush_watch == {timed.log}  # its first append after a flush


def test_a_log_given_a_flush_ms_is_watched_again(rm):
    part = _host(rm, 0)
    _append(part)
    asyncio.run(rm.flush())
    assert part.log not in rm._flush_watch and part.log.unflushed_messages == 1
    part.log.config = dataclasses.replace(part.log.config, flush_interval_ms=0)
    rm._watch_flush(part.log)  # as apply_topic_configs does after an AlterConfigs
    asyncio.run(rm.flush())
    assert part.log.unflushed_messages == 0


def test_a_log_whose_settings_stop_flushing_it_leaves_the_watch(rm):
    part = _host(rm, 0, LogConfig(flush_interval_ms=60_000))
    _append(part)
    assert rm._flush_watch == {part.log}
    part.log.config = dataclasses.replace(part.log.config, flush_interval_ms=LogConfig().flush_interval_ms)
    rm._watch_flush(part.log)  # as apply_topic_configs does after an AlterConfigs
    assert rm._flush_watch == set()
    _append(part)
    assert rm._flush_watch == set() and part.log.unflushed_messages == 2


def test_a_deleted_log_leaves_the_flush_watch(rm):
    part = _host(rm, 0, LogConfig(flush_interval_ms=0))
    _append(part)
    del rm.partitions[("t", 0)]
    asyncio.run(rm.flush())
    assert rm._flush_watch == set() and part.log.unflushed_messages == 1
