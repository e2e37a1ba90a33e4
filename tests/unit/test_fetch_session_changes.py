"""A fetch session reads only what changed (broker.fetch_session.FetchSession with real
partitions and logs): which partitions it leaves unread, what puts them back, and how a
follower left unread still counts as caught up for the ISR."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from broker.fetch_session import CachedPartition, FetchSession, FetchSessionCache
from broker.partition import Partition
from protocol import records as rb
from storage.log import Log, LogConfig

LAG_MS = 30_000


@pytest.fixture
def leader(tmp_path):
    log, _ = Log.open(tmp_path / "t-0", "t", 0, LogConfig())
    part = Partition("t", 0, uuid.uuid4(), log, node_id=1)
    part.make_leader(leader_epoch=1, partition_epoch=1, replicas=[1, 2], isr=[1, 2])
    yield part
    log.close()


def _session(part: Partition, replica_id: int = -1) -> tuple[FetchSession, tuple, CachedPartition]:
    cached = CachedPartition("t", part.topic_id, 0, part.log.log_end_offset, 0, 1 << 20, 1, -1)
    cached.told_log_start_offset = part.log.log_start_offset
    key = ("t", 0)
    session = FetchSession(7, replica_id >= 0, False, 0.0, {key: cached})
    session.replica_id = replica_id
    return session, key, cached


def _append(part: Partition) -> None:
    part.append_records_to_leader(bytes(rb.build_batch([(b"k", b"v")], timestamp=0)), acks=1, min_isr=1)


def test_a_partition_read_to_its_end_is_left_unread_until_it_changes(leader):
    async def scenario():
        session, key, cached = _session(leader)
        assert key in session.dirty  # never read yet
        session.settle(key, cached, leader)
        assert not session.dirty and session in leader.watchers
        waiter = session.new_waiter()
        _append(leader)
        assert key in session.dirty and session not in leader.watchers
        assert waiter.done()  # a fetch waiting on the session wakes
    asyncio.run(scenario())


def test_a_log_start_not_yet_told_keeps_the_partition_read(leader):
    session, key, cached = _session(leader)
    cached.told_log_start_offset = -1
    session.settle(key, cached, leader)
    assert key in session.dirty and session not in leader.watchers


def test_a_follower_outside_the_isr_is_read_every_time(leader):
    leader.make_leader(leader_epoch=1, partition_epoch=2, replicas=[1, 2], isr=[1])
    session, key, cached = _session(leader, replica_id=2)
    session.settle(key, cached, leader)
    assert key in session.dirty


def test_a_follower_at_the_log_end_is_in_sync_however_long_ago_it_fetched(leader):
    session, key, cached = _session(leader, replica_id=2)
    leader.update_follower_fetch_state(2, leader.log.log_end_offset, now_ms=1_000)
    session.last_fetch_ms = 1_000
    session.settle(key, cached, leader)
    session.last_fetch_ms = 100_000  # fetches of the session that did not read the partition
    # Kafka's isCaughtUp: at the leader's log end, in sync; one that stopped fetching leaves
    # the ISR when the controller fences its broker.
    assert leader.isr_at_log_end()
    assert leader.lagging_replicas(1_000_000, LAG_MS) == []


def test_a_change_keeps_the_caught_up_time_the_unread_fetches_earned(leader):
    session, key, cached = _session(leader, replica_id=2)
    leader.update_follower_fetch_state(2, leader.log.log_end_offset, now_ms=1_000)
    session.settle(key, cached, leader)
    session.last_fetch_ms = 100_000
    _append(leader)  # the follower is now behind: it was caught up at its last fetch
    assert leader.followers[2].last_caught_up_ms == 100_000
    assert leader.lagging_replicas(100_000 + LAG_MS, LAG_MS) == []
    assert leader.lagging_replicas(100_001 + LAG_MS, LAG_MS) == [2]


def test_a_closed_session_unwatches_and_keeps_the_caught_up_time(leader):
    cache = FetchSessionCache(slots=8)
    cached = CachedPartition("t", leader.topic_id, 0, leader.log.log_end_offset, 0, 1 << 20, 1, -1)
    cached.told_log_start_offset = leader.log.log_start_offset
    session_id = cache.maybe_create(True, False, {("t", 0): cached})
    session = cache.get(session_id)
    session.replica_id = 2
    leader.update_follower_fetch_state(2, leader.log.log_end_offset, now_ms=1_000)
    session.settle(("t", 0), cached, leader)
    session.last_fetch_ms = 50_000
    cache.remove(session_id)
    assert session not in leader.watchers and not session.holds_unchanged(leader)
    assert leader.followers[2].last_caught_up_ms == 50_000


def test_a_forgotten_or_updated_partition_stops_watching(leader):
    session, key, cached = _session(leader)
    session.settle(key, cached, leader)
    session.mark_dirty(key)  # the request names it again, with new fetch parameters
    assert key in session.dirty and session not in leader.watchers
    session.settle(key, cached, leader)
    session.forget(key)
    assert not session.partitions and not session.dirty and session not in leader.watchers


def test_a_topic_id_unknown_when_it_joined_the_session_is_read_once_the_metadata_knows_it(leader):
    """A follower whose metadata is ahead of the leader's fetches a new topic's partition by
    id before the leader knows the id: answered UNKNOWN_TOPIC_ID, and kept in the session. Once
    the leader's metadata has the topic, the session's next fetch reads it under its name,
    though the follower sends nothing new for it (Kafka's maybeResolveUnknownName)."""
    from types import SimpleNamespace

    from broker.fetch_session import FullFetchContext, IncrementalFetchContext, new_context

    known: dict = {}
    resolve = lambda ft: (known.get(ft.topic_id), ft.topic_id)  # noqa: E731
    fp = SimpleNamespace(partition=0, fetch_offset=0, log_start_offset=0, partition_max_bytes=1 << 20,
                         current_leader_epoch=1, last_fetched_epoch=-1)
    request = SimpleNamespace(topics=[SimpleNamespace(topic_id=leader.topic_id, partitions=[fp])],
                              forgotten_topics_data=[], session_id=0, session_epoch=0)
    cache = FetchSessionCache(10)
    full = new_context(cache, request, 15, 2, resolve)
    assert isinstance(full, FullFetchContext) and full.to_read()[0][0] is None  # UNKNOWN_TOPIC_ID
    full.respond([(None, leader.topic_id, fp, (0, 100, -1, -1, -1, None, None, None))], [])
    nothing_new = SimpleNamespace(topics=[], forgotten_topics_data=[], session_id=full.session_id, session_epoch=1)
    assert new_context(cache, nothing_new, 15, 2, resolve).to_read()[0][0] is None  # still unknown
    known[leader.topic_id] = "t"
    nothing_new.session_epoch = 2
    incremental = new_context(cache, nothing_new, 15, 2, resolve)
    assert isinstance(incremental, IncrementalFetchContext)
    assert [(name, [c.partition for c in cached]) for name, _, cached in incremental.to_read()] == [("t", [0])]
