"""The fetch session cache's eviction (Kafka's FetchSessionCache), on a fake clock."""

from broker.fetch_session import INVALID_SESSION_ID, SHARDS, FetchSessionCache, next_epoch


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _parts(n: int) -> dict:
    return {("t", i): object() for i in range(n)}


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
    assert _fill(cache, False, 1) != [INVALID_SESSION_ID] * SHARDS  # equal value evicts
    clock.now += 121
    for shard in cache.shards:
        for session in shard.sessions.values():
            cache.touch(session)
    assert _fill(cache, False, 0) == [INVALID_SESSION_ID] * SHARDS  # smaller does not


def test_session_ids_name_their_shard_and_epochs_wrap_to_one():
    cache = FetchSessionCache(SHARDS * 4, Clock())
    ids = [cache.maybe_create(False, True, _parts(1)) for _ in range(SHARDS * 4)]
    assert len(set(ids)) == len(ids) and len(cache) == SHARDS * 4
    for session_id in ids:
        assert cache.get(session_id).id == session_id
        assert cache.remove(session_id) is not None
    assert len(cache) == 0
    assert next_epoch(0) == 1 and next_epoch((1 << 31) - 1) == 1 and next_epoch(-1) == -1
