"""Fetch sessions (KIP-227): what an incremental fetch leaves out, and the cache that keeps them.

Owns the broker's fetch session cache and the context each Fetch request is read in, as Kafka's
``FetchManager.newContext`` and ``FetchSessionCache`` (FetchSession.scala) decide them, by the
request's (session id, session epoch):

- (0, -1): sessionless; every requested partition is answered, session id 0.
- (0, 0): full; answered in full, and a session is created holding every requested partition
  with its position and what the answer told (high watermark, log start offset); its id is in
  the answer (0 when the cache has no room) and its next epoch is 1.
- (id, 0): closes session ``id``, then as (0, 0); (id, -1): closes it, then sessionless.
- (id, n > 0): incremental. The request's partitions are added to or updated in the session and
  ``forgotten_topics_data`` removed; then the session's partitions that may have something to
  tell are read at their cached positions (see :class:`FetchSession`: those added, updated, or
  changed since they were last read to their end, or all of them when the isolation level
  changed), and only those are answered, in the session's order, that have records, a high
  watermark or log start offset other than the one last told, an error (which makes the next
  answer repeat the partition) or a diverging epoch. Partitions that returned records move to
  the end of the session's order, so the next read starts with the others. A session left
  empty is closed and the fetch answered sessionless. Unknown id: FETCH_SESSION_ID_NOT_FOUND;
  an epoch other than the session's: INVALID_FETCH_SESSION_EPOCH, also for a fetch that waited
  while another of its session came (Kafka's "possible duplicate request"); a session made with
  topic ids (v13+) used without them, or the reverse: FETCH_SESSION_TOPIC_ID_ERROR. A fetch
  whose session was closed while it waited answers from the session as it was, as Kafka's.
- A request naming a partition twice reads it once, where it was first named, with what it was
  named with last; partitions of unknown topics are answered (and kept) after the others.
- The cache holds ``max.incremental.fetch.session.cache.slots`` sessions in Kafka's eight shards
  (``slots // 8`` each; new sessions go to the shards in turn, a session id names its shard).
  A new session in a full shard takes the slot of a session unused for ``EVICTION_S``, else of
  the least valuable evictable one, if the new one is worth more: a follower's session
  (privileged) can evict consumers' sessions and sessions that were older than ``EVICTION_S``
  when last used, a consumer's only the latter; value orders followers before consumers, then
  more partitions before fewer, and a tie keeps the old session. So a client that opens a
  session on every fetch cannot push out the replicas' sessions.

:class:`FetchSessionHandler` is the fetching side (Kafka's client FetchSessionHandler), which the
broker's replica fetchers use: a full fetch opens the session, each later fetch sends only the
partitions whose fetch parameters changed and forgets the ones no longer followed; a session
error or a failed round trip starts over with a full fetch.

A partition's last stable offset is not tracked, as Kafka does not track it either: a
read_committed consumer learns a new LSO with the next change of high watermark or records.

Differs from Kafka: Kafka reads every partition of a session on every fetch; here a fetch reads
only what changed, and one with nothing to read waits on the session as a whole.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from protocol.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH, FINAL_EPOCH = 0, -1
EVICTION_S = 120.0  # Kafka's fixed fetch-session eviction time (120000 ms)
UNSUPPORTED_HIGH_WATERMARK = (1 << 63) - 1  # Fetch v18's default: the follower does not say
SHARDS = 8  # Kafka's BrokerServer: NumFetchSessionCacheShards


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: 1 after the maximum, never back to 0."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == (1 << 31) - 1 else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """A partition of a session: the fetch parameters last sent, and what the last answer
    that carried it told (-1: nothing yet, so the next read answers it)."""
    topic: str | None  # None: a topic id this broker does not know
    topic_id: uuid.UUID
    partition: int
    fetch_offset: int
    log_start_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    high_watermark: int = UNSUPPORTED_HIGH_WATERMARK  # a follower's own (v18), as sent
    told_high_watermark: int = -1
    told_log_start_offset: int = -1
    replica: object | None = None  # the hosted partition it was last read unchanged from
    order: int = 0  # its place in the session's order: read and answered by it

    def update_request(self, fp) -> None:
        self.fetch_offset = fp.fetch_offset
        self.log_start_offset = getattr(fp, "log_start_offset", -1)
        self.partition_max_bytes = fp.partition_max_bytes
        self.current_leader_epoch = getattr(fp, "current_leader_epoch", -1)
        self.last_fetched_epoch = getattr(fp, "last_fetched_epoch", -1)
        self.high_watermark = getattr(fp, "high_watermark", UNSUPPORTED_HIGH_WATERMARK)

    def must_respond(self, answer: tuple) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData; remembers what is told."""
        _, error, hw, _, log_start, _, data, *extra = answer
        respond = bool(data)
        if hw != self.told_high_watermark:
            respond, self.told_high_watermark = True, hw
        if log_start != self.told_log_start_offset:
            respond, self.told_log_start_offset = True, log_start
        if error:
            respond, self.told_high_watermark = True, -1
        if extra and extra[0] and "diverging_epoch" in extra[0]:
            respond = True
        return respond


def _cached(name: str | None, topic_id: uuid.UUID, fp) -> CachedPartition:
    c = CachedPartition(name, topic_id, fp.partition, 0, -1, 0, -1, -1)
    c.update_request(fp)
    return c


def session_key(uses_topic_ids: bool, name: str | None, topic_id: uuid.UUID, index: int) -> tuple:
    """A partition's key in a session: by topic id from Fetch v13, by name below."""
    return (topic_id, index) if uses_topic_ids else (name, index)


class FetchSession:
    """A session's partitions in the order they are read, and which of them to read next.

    A partition read to its end with nothing more to tell (no records, the high watermark and
    log start offset as told, for a follower its ISR membership) is *unchanged*: it leaves
    ``dirty`` and watches its hosted partition, whose next change (``Partition.changed``) puts
    it back. A fetch reads only the dirty partitions, so it costs what changed since the last
    one. For a follower's session, the fetches that leave a partition unread still find the
    follower caught up on it: ``last_fetch_ms`` counts for it (``Partition.caught_up_ms``),
    and is kept in the follower's state when the partition changes or the session ends.
    """

    def __init__(self, session_id: int, privileged: bool, uses_topic_ids: bool, now: float,
                 partitions: dict[tuple, CachedPartition], isolation_level: int = 0) -> None:
        self.id = session_id
        self.privileged = privileged  # a follower's session
        self.replica_id = -1  # the follower's broker id (privileged sessions)
        self.uses_topic_ids = uses_topic_ids
        self.isolation_level = isolation_level  # what "read to its end" was measured against
        self.creation = self.last_used = now
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.partitions = partitions  # in the order they are read (dicts keep insertion order)
        self._next_order = 0
        for cached in partitions.values():
            self._place_last(cached)
        self.dirty: dict[tuple, None] = dict.fromkeys(partitions)  # to read at the next fetch
        self.last_fetch_ms = 0  # wall clock, as the followers' caught-up times
        # Set when a partition of the session left unread changes, or the session closes;
        # shared by every fetch of the session waiting at once (a client's duplicate or a
        # fetch racing a close must wake as Kafka's delayed fetch would).
        self.waiter: asyncio.Future | None = None
        self.closed = False

    def _place_last(self, cached: CachedPartition) -> None:
        cached.order, self._next_order = self._next_order, self._next_order + 1

    def add(self, key: tuple, cached: CachedPartition) -> None:
        """A partition new to the session: last in its order, read at the next fetch."""
        self._place_last(cached)
        self.partitions[key] = cached
        self.dirty[key] = None

    def move_to_end(self, key: tuple) -> None:
        """Read last next time (KIP-227's fairness: a partition that returned records)."""
        cached = self.partitions.pop(key)
        self._place_last(cached)
        self.partitions[key] = cached

    def in_order(self, keys: Iterable[tuple]) -> list[CachedPartition]:
        """The partitions of ``keys`` in the session's order."""
        found = (self.partitions.get(k) for k in keys)
        return sorted((c for c in found if c is not None), key=lambda c: c.order)

    def key(self, name: str | None, topic_id: uuid.UUID, index: int) -> tuple:
        return session_key(self.uses_topic_ids, name, topic_id, index)

    def replica_key(self, part) -> tuple:
        return self.key(part.topic, part.topic_id, part.index)

    def value(self) -> tuple[bool, int]:
        """What evicting this session would cost: followers' first, then the larger."""
        return self.privileged, len(self.partitions)

    # --- what changed --------------------------------------------------------------------------

    def settle(self, key: tuple, cached: CachedPartition, part) -> None:
        """After an answer: ``cached``, read to its end from ``part``, is unchanged unless its
        log start offset is not the one told or the follower is not in the ISR yet."""
        if self.closed or self.partitions.get(key) is not cached:
            return
        if part.log.log_start_offset != cached.told_log_start_offset or \
                (self.replica_id >= 0 and self.replica_id not in part.isr):
            return
        self.dirty.pop(key, None)
        cached.replica = part
        part.watchers.add(self)
        if self.replica_id >= 0:
            state = part.followers.get(self.replica_id)
            if state is not None:
                state.session = self

    def partition_changed(self, part) -> None:
        """``part`` changed (it has dropped this watcher): read it at the next fetch."""
        key = self.replica_key(part)
        cached = self.partitions.get(key)
        if cached is None or cached.replica is not part or key in self.dirty:
            return
        self._leave_unchanged(cached)
        self.dirty[key] = None
        self.wake()

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _leave_unchanged(self, cached: CachedPartition) -> None:
        """``cached`` stops being unchanged: the follower keeps the caught-up time its
        fetches earned while it was."""
        part, cached.replica = cached.replica, None
        if part is None or self.replica_id < 0:
            return
        state = part.followers.get(self.replica_id)
        if state is not None and state.session is self:
            state.last_caught_up_ms = max(state.last_caught_up_ms, self.last_fetch_ms)
            state.last_fetch_ms = max(state.last_fetch_ms, self.last_fetch_ms)
            state.last_fetch_leader_log_end_offset = state.log_end_offset
            state.session = None

    def holds_unchanged(self, part) -> bool:
        cached = self.partitions.get(self.replica_key(part))
        return not self.closed and cached is not None and cached.replica is part

    def mark_dirty(self, key: tuple) -> None:
        cached = self.partitions.get(key)
        if cached is not None and key not in self.dirty:
            if cached.replica is not None:
                cached.replica.watchers.discard(self)
                self._leave_unchanged(cached)
            self.dirty[key] = None

    def forget(self, key: tuple) -> None:
        self.mark_dirty(key)
        self.partitions.pop(key, None)
        self.dirty.pop(key, None)

    def mark_all_dirty(self) -> None:
        for key in [k for k in self.partitions if k not in self.dirty]:
            self.mark_dirty(key)

    def close(self) -> None:
        """Removed from the cache: unwatch every partition. A fetch of it still waiting
        reads them all again and then waits on every one, as Kafka's would."""
        self.mark_all_dirty()
        self.closed = True
        self.wake()

    def new_waiter(self) -> asyncio.Future:
        if self.waiter is None or self.waiter.done():
            self.waiter = asyncio.get_running_loop().create_future()
        return self.waiter


class FetchSessionCacheShard:
    """At most ``max_entries`` sessions, with ids in [first_id, first_id + id_range)."""

    def __init__(self, max_entries: int, first_id: int, id_range: int, clock: Callable[[], float],
                 eviction_s: float) -> None:
        self.max_entries = max_entries
        self.first_id, self.id_range = first_id, id_range
        self.clock = clock
        self.eviction_s = eviction_s
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    def maybe_create(self, privileged: bool, uses_topic_ids: bool,
                     partitions: dict[tuple, CachedPartition], isolation_level: int = 0) -> int:
        """A new session's id, or INVALID_SESSION_ID when there is no room for it."""
        now = self.clock()
        if self.max_entries <= 0:
            return INVALID_SESSION_ID
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now):
            return INVALID_SESSION_ID
        session_id = self._new_id()
        self.sessions[session_id] = FetchSession(session_id, privileged, uses_topic_ids, now, partitions,
                                                 isolation_level)
        return session_id

    def _try_evict(self, privileged: bool, size: int, now: float) -> bool:
        stale = min(self.sessions.values(), key=lambda s: (s.last_used, s.id))
        if now - stale.last_used > self.eviction_s:
            return self._evict(stale)
        # As Kafka's evictableByAll / evictableByPrivileged, which a session joins when it is
        # used (touched): older than the eviction time at its last use, or (for a follower's
        # new session) any consumer's.
        old = [s for s in self.sessions.values() if s.last_used - s.creation > self.eviction_s]
        evictable = old if not privileged else old + [s for s in self.sessions.values()
                                                      if not s.privileged and s not in old]
        if not evictable:
            return False
        least = min(evictable, key=lambda s: (*s.value(), s.id))
        # The new session's key has id 0, below every session's: an equal one is kept.
        if (privileged, size) <= least.value():
            return False
        return self._evict(least)

    def _evict(self, session: FetchSession) -> bool:
        del self.sessions[session.id]
        session.close()
        self.evictions += 1
        return True

    def _new_id(self) -> int:
        while True:
            session_id = self.first_id + random.randrange(self.id_range)
            if session_id != INVALID_SESSION_ID and session_id not in self.sessions:
                return session_id


class FetchSessionCache:
    """The broker's sessions in ``SHARDS`` shards; ``clock`` is seconds, monotonic."""

    def __init__(self, slots: int, clock: Callable[[], float] = time.monotonic,
                 eviction_s: float = EVICTION_S) -> None:
        self.id_range = ((1 << 31) - 1) // SHARDS
        self.shards = [FetchSessionCacheShard(slots // SHARDS, i * self.id_range, self.id_range, clock, eviction_s)
                       for i in range(SHARDS)]
        self.clock = clock
        self._next_shard = 0

    def __len__(self) -> int:
        return sum(len(shard.sessions) for shard in self.shards)

    def count(self, privileged: bool) -> int:
        """The sessions of followers (``privileged``) or of consumers."""
        return sum(s.privileged == privileged for shard in self.shards for s in shard.sessions.values())

    @property
    def cached_partitions(self) -> int:
        return sum(len(s.partitions) for shard in self.shards for s in shard.sessions.values())

    @property
    def evictions(self) -> int:
        return sum(shard.evictions for shard in self.shards)

    def _shard(self, session_id: int) -> FetchSessionCacheShard | None:
        index = session_id // self.id_range
        return self.shards[index] if 0 <= index < SHARDS else None

    def get(self, session_id: int) -> FetchSession | None:
        shard = self._shard(session_id)
        return None if shard is None else shard.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        shard = self._shard(session_id)
        session = None if shard is None else shard.sessions.pop(session_id, None)
        if session is not None:
            session.close()
        return session

    def touch(self, session: FetchSession) -> None:
        session.last_used = self.clock()

    def maybe_create(self, privileged: bool, uses_topic_ids: bool,
                     partitions: dict[tuple, CachedPartition], isolation_level: int = 0) -> int:
        shard = self.shards[self._next_shard]
        self._next_shard = (self._next_shard + 1) % SHARDS
        return shard.maybe_create(privileged, uses_topic_ids, partitions, isolation_level)


# --- the context of one Fetch request --------------------------------------------------------------

Resolve = Callable[[object], tuple[str | None, uuid.UUID]]  # a request topic -> (name, topic id)
Wanted = list[tuple[str | None, uuid.UUID, list]]  # what to read: (name, topic id, partitions)
# One partition's answer as read: (name, topic id, request partition or CachedPartition, answer),
# where an answer is what fast.encode_fetch_response takes for a partition.
Entry = tuple
Read = tuple  # a partition read to its end with nothing sent: (name, topic id, request partition, Partition)


class FetchContext:
    """Sessionless: read what the request names, answer all of it."""

    session_id = INVALID_SESSION_ID
    error = ErrorCode.none
    tracks_reads = False  # whether respond() wants the partitions read to their end

    def __init__(self, wanted: Wanted) -> None:
        self.wanted = wanted

    def to_read(self) -> Wanted:
        return self.wanted

    def new_waiter(self) -> asyncio.Future | None:
        """A future set when a partition the fetch does not read changes (None: it reads all)."""
        return None

    def respond(self, entries: list[Entry], ends: list[Read]) -> list:
        """The answer's topics, [(name, topic id, [answer])], from what was read."""
        return grouped_answers(entries)

    def forget_reads(self) -> None:
        """What was read is not sent after all (a throttled answer): read it again next time."""


class SessionErrorContext(FetchContext):
    def __init__(self, error: ErrorCode) -> None:
        super().__init__([])
        self.error = error


class FullFetchContext(FetchContext):
    """Answer all of it, then keep it as a new session, in the answer's order."""

    tracks_reads = True

    def __init__(self, wanted: Wanted, cache: FetchSessionCache, replica_id: int, uses_topic_ids: bool,
                 isolation_level: int) -> None:
        super().__init__(wanted)
        self.cache, self.replica_id, self.uses_topic_ids = cache, replica_id, uses_topic_ids
        self.isolation_level = isolation_level

    def respond(self, entries: list[Entry], ends: list[Read]) -> list:
        partitions: dict[tuple, CachedPartition] = {}
        for name, topic_id, fp, answer in entries:
            cached = _cached(name, topic_id, fp)
            cached.must_respond(answer)
            partitions[session_key(self.uses_topic_ids, name, topic_id, fp.partition)] = cached
        self.session_id = self.cache.maybe_create(self.replica_id >= 0, self.uses_topic_ids, partitions,
                                                  self.isolation_level)
        session = self.cache.get(self.session_id)
        if session is not None:
            session.replica_id, session.last_fetch_ms = self.replica_id, _now_ms()
            for name, topic_id, fp, part in ends:
                key = session.key(name, topic_id, fp.partition)
                session.settle(key, partitions[key], part)
        return grouped_answers(entries)


class IncrementalFetchContext(FetchContext):
    """Read the session's partitions that changed since its last fetch; answer those with
    something to tell, in the session's order."""

    tracks_reads = True

    def __init__(self, session: FetchSession, cache: FetchSessionCache) -> None:
        super().__init__([])
        self.session, self.cache = session, cache
        self.session_id, self.epoch = session.id, session.epoch

    def to_read(self) -> Wanted:
        s = self.session
        if len(s.dirty) * 4 >= len(s.partitions):  # many: one pass over the session
            self.wanted = _grouped(c for k, c in s.partitions.items() if k in s.dirty)
        else:  # a few: sorted into the session's order
            self.wanted = _grouped(s.in_order(s.dirty))
        return self.wanted

    def new_waiter(self) -> asyncio.Future:
        return self.session.new_waiter()

    def respond(self, entries: list[Entry], ends: list[Read]) -> list:
        s = self.session
        if s.epoch != self.epoch:
            # Another fetch of the session came meanwhile (Kafka: "possible duplicate request"):
            # what this one read is not the session's any more.
            self.error = ErrorCode.invalid_fetch_session_epoch
            return []
        kept = []
        for entry in entries:
            cached, answer = entry[2], entry[3]
            if cached.must_respond(answer):
                kept.append(entry)
                if answer[6]:
                    key = s.key(cached.topic, cached.topic_id, cached.partition)
                    if s.partitions.get(key) is cached:
                        s.move_to_end(key)
        for name, topic_id, cached, part in ends:
            s.settle(s.key(name, topic_id, cached.partition), cached, part)
        return grouped_answers(kept)

    def forget_reads(self) -> None:
        if self.session.epoch == self.epoch:
            self.session.mark_all_dirty()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _grouped(partitions: Iterable[CachedPartition]) -> Wanted:
    """Consecutive partitions of one topic as one entry, as Kafka's FetchResponse groups them."""
    out: Wanted = []
    for c in partitions:
        if out and out[-1][0] == c.topic and out[-1][1] == c.topic_id:
            out[-1][2].append(c)
        else:
            out.append((c.topic, c.topic_id, [c]))
    return out


def grouped_answers(entries: Iterable[Entry]) -> list:
    """The answers of consecutive partitions of one topic under one topic entry."""
    out: list = []
    for name, topic_id, _, answer in entries:
        name = name or ""
        if out and out[-1][0] == name and out[-1][1] == topic_id:
            out[-1][2].append(answer)
        else:
            out.append((name, topic_id, [answer]))
    return out


def requested(request, resolve: Resolve, uses_topic_ids: bool) -> Wanted:
    """The request's partitions, each once: a partition named twice is read once, at the place
    it was first named, with what it was named with last (Kafka's LinkedHashMap of them)."""
    seen: dict[tuple, tuple] = {}
    for ft in request.topics:
        name, topic_id = resolve(ft)
        for fp in ft.partitions:
            seen[session_key(uses_topic_ids, name, topic_id, fp.partition)] = (name, topic_id, fp)
    out: Wanted = []
    for name, topic_id, fp in seen.values():
        if out and out[-1][0] == name and out[-1][1] == topic_id:
            out[-1][2].append(fp)
        else:
            out.append((name, topic_id, [fp]))
    return out


def new_context(cache: FetchSessionCache, request, version: int, replica_id: int, resolve: Resolve) -> FetchContext:
    """Kafka's FetchManager.newContext for one request (see the module docstring)."""
    uses_topic_ids = version >= 13
    wanted = requested(request, resolve, uses_topic_ids)
    if version < 7:
        return FetchContext(wanted)
    session_id, epoch = request.session_id, request.session_epoch
    isolation_level = getattr(request, "isolation_level", 0)
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)
        if epoch == FINAL_EPOCH:
            return FetchContext(wanted)
        return FullFetchContext(wanted, cache, replica_id, uses_topic_ids, isolation_level)
    session = cache.get(session_id)
    if session is None:
        return SessionErrorContext(ErrorCode.fetch_session_id_not_found)
    if session.epoch != epoch:
        return SessionErrorContext(ErrorCode.invalid_fetch_session_epoch)
    if session.uses_topic_ids != uses_topic_ids:
        return SessionErrorContext(ErrorCode.fetch_session_topic_id_error)
    _update(session, wanted, request.forgotten_topics_data, resolve)
    if uses_topic_ids:
        _resolve_unknown_names(session, resolve)
    if not session.partitions:
        cache.remove(session.id)
        return FetchContext(wanted)
    if session.isolation_level != isolation_level:
        # What was read to its end (the last stable offset or the high watermark) is not the
        # end this fetch reads to: read every partition again.
        session.isolation_level = isolation_level
        session.mark_all_dirty()
    cache.touch(session)
    session.epoch = next_epoch(session.epoch)
    session.last_fetch_ms = _now_ms()
    return IncrementalFetchContext(session, cache)


def _resolve_unknown_names(session: FetchSession, resolve: Resolve) -> None:
    """A partition held under a topic id this broker did not know when it joined the session
    (a follower whose metadata was ahead of ours) is read under its name once the metadata
    has it, as Kafka's CachedPartition.maybeResolveUnknownName; until then it stays dirty and
    is answered UNKNOWN_TOPIC_ID. Without this a follower that keeps it in its session waits
    for nothing forever."""
    for key in session.dirty:
        cached = session.partitions.get(key)
        if cached is not None and cached.topic is None:
            cached.topic = resolve(_TopicById(cached.topic_id))[0]


@dataclass(frozen=True, slots=True)
class _TopicById:
    """What a resolver reads of a request's topic (v13+: its id)."""
    topic_id: uuid.UUID


def _update(session: FetchSession, wanted: Wanted, forgotten, resolve: Resolve) -> None:
    parts = session.partitions
    for name, topic_id, fps in wanted:
        for fp in fps:
            key = session.key(name, topic_id, fp.partition)
            cached = parts.get(key)
            if cached is None:
                session.add(key, _cached(name, topic_id, fp))
            else:
                cached.update_request(fp)
                session.mark_dirty(key)
    for ft in forgotten or ():
        name, topic_id = resolve(ft)
        for index in ft.partitions:
            session.forget(session.key(name, topic_id, index))


# --- the fetching side ---------------------------------------------------------------------------

def _params(fp) -> tuple:
    return (fp.fetch_offset, fp.log_start_offset, fp.partition_max_bytes, fp.current_leader_epoch,
            fp.last_fetched_epoch)


class FetchSessionHandler:
    """What a fetcher's next request sends, as Kafka's client-side FetchSessionHandler decides."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.sent: dict[tuple, tuple] = {}  # the session's partitions as the leader holds them
        self._full = True

    @property
    def full(self) -> bool:
        """Whether the next fetch is a full one (it must name every partition)."""
        return self.epoch == INITIAL_EPOCH

    def build(self, changed: dict[tuple, object], removed: Iterable[tuple] = ()) -> tuple[int, int, list, list]:
        """(session id, epoch, keys to send, keys to forget) given the partitions that may
        have changed since the last fetch (all of them for a full fetch) and those removed."""
        params = {key: _params(fp) for key, fp in changed.items()}
        self._full = self.full
        if self._full:
            self.sent = params
            return self.session_id, INITIAL_EPOCH, list(changed), []
        send = [key for key, p in params.items() if self.sent.get(key) != p]
        forget = [key for key in removed if self.sent.pop(key, None) is not None]
        self.sent.update(params)
        return self.session_id, self.epoch, send, forget

    def resend(self, key: tuple) -> None:
        """The next incremental fetch names ``key`` whatever was sent for it before (a
        partition whose topic was made again under its name: the same key, a new topic)."""
        self.sent.pop(key, None)

    def handle_response(self, error_code: int, session_id: int) -> bool:
        """Move to the next epoch, or back to a full fetch; False when the answer is an error."""
        if error_code:
            if error_code == ErrorCode.fetch_session_id_not_found:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH  # (id, 0) closes the old session and opens a new one
            return False
        if session_id == INVALID_SESSION_ID or (not self._full and session_id != self.session_id):
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        else:
            self.session_id = session_id
            self.epoch = next_epoch(INITIAL_EPOCH if self._full else self.epoch)
        return True

    def handle_error(self) -> None:
        """No answer: the session's state is unknown, so the next fetch is a full one."""
        self.epoch = INITIAL_EPOCH
