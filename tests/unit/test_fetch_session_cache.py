"""The fetch session cache's eviction (Kafka's FetchSessionCache), on a fake clock."""

import uuid

from broker.fetch_session import INVALID_SESSION_ID, SHARDS, CachedPartition, FetchSessionCache, next_epoch


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _parts(n: int) -> dict:
    return {("t", i): CachedPartition("t", uuid.UUID(int=1), i, 0, -1, 1 << 20, -1, -1) for i in range(n)}


def _fill(cache: FetchSessionCache, privileged: bool, size: int) -> list[int]:
    return [cache.maybe_create(privileged, False, _parts(size)) for _ in range(SHARDS)]


def test_a_consumer_cannot_evict_a_young_session_but_a_follower_evicts_consumers():
    clock = Clock()
    cache = FetchSessionCache(SHARDS, clock)  # one slot per shard
    consumers = _fill(cache, False, 10)
    assert INVALID_SESSION_ID not in consumers
    assert (cache.count(privileged=True), cache.count(privileged=False)) == (0, SHARDS)
    assert _fill(cache, False, 50) == [INVALID_SESSION_ID] * SHARDS  # no room, nothing evicted
    followers = _fill(cache, True, 1)  # followers come first, whatever their size
    assert INVALID_SESSION_ID not in followers
    assert all(cache.get(s) is None for s in consumers) and cache.evictions == SHARDS
    assert (cache.count(privileged=True), cache.count(privileged=False)) == (SHARDS, 0)
    assert _fill(cache, False, 1000) == [INVALID_SESSION_ID] * SHARDS  # followers stay


def test_old_sessions_are_evicted_by_more_valuable_ones_and_idle_ones_by_anyone():
    clock = Clock()
    cache = FetchSessionCache(SHARDS, clock)
    big = _fill(cache, False, 10)
    clock.now += 121  # older than the eviction time, but idle too: any new session evicts them
    assert INVALID_SESSION_ID not in _fill(cache, False, 1)
    assert all(cache.get(s) is None for s in big)
    clock.now += 121
    for shard in cache.shards:  # used just now, created long ago: evictable only by the larger
        for session in shard.sessions.values():
            cache.touch(session)
    # Kafka's EvictableKey gives the new session id 0, below every session's: an equal value
    # keeps the old session, a larger one evicts it.
    assert _fill(cache, False, 1) == [INVALID_SESSION_ID] * SHARDS
    assert _fill(cache, False, 0) == [INVALID_SESSION_ID] * SHARDS
    assert INVALID_SESSION_ID not in _fill(cache, False, 2)


def test_a_session_is_evictable_once_used_after_the_eviction_time_not_merely_old():
    """Kafka puts a session among the evictable when it is touched: one created long ago but
    last used while young stays until it is used again (or idles past the eviction time)."""
    clock = Clock()
    cache = FetchSessionCache(SHARDS, clock)
    old = _fill(cache, False, 1)
    clock.now += 100
    for session_id in old:
        cache.touch(cache.get(session_id))  # used at 100 s: not yet evictable
    clock.now += 25  # 125 s old, idle for 25 s
    assert _fill(cache, False, 3) == [INVALID_SESSION_ID] * SHARDS
    for session_id in old:
        cache.touch(cache.get(session_id))  # used at 125 s: evictable by a more valuable one
    assert INVALID_SESSION_ID not in _fill(cache, False, 3)
    assert all(cache.get(s) is None for s in old)


def test_session_ids_name_their_shard_and_epochs_wrap_to_one():
    cache = FetchSessionCache(SHARDS * 4, Clock())
    ids = [cache.maybe_create(False, True, _parts(1)) for _ in range(SHARDS * 4)]
    assert len(set(ids)) == len(ids) and len(cache) == SHARDS * 4
    for session_id in ids:
        assert cache.get(session_id).id == session_id
        assert cache.remove(session_id) is not None
    assert len(cache) == 0
    assert next_epoch(0) == 1 and next_epoch((1 << 31) - 1) == 1 and next_epoch(-1) == -1
