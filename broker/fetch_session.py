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
  ``forgotten_topics_data`` removed; then every partition of the session is read at its cached
  position and only those are answered that have records, a high watermark or log start
  offset other than the one last told, an error (which makes the next answer repeat the
  partition) or a diverging epoch. Partitions that returned records move to the end of the
  session's order, so the next read starts with the others. A session left empty is closed
  and the fetch answered sessionless. Unknown id: FETCH_SESSION_ID_NOT_FOUND; an epoch other
  than the session's: INVALID_FETCH_SESSION_EPOCH; a session made with topic ids (v13+) used
  without them, or the reverse: FETCH_SESSION_TOPIC_ID_ERROR.
- The cache holds ``max.incremental.fetch.session.cache.slots`` sessions in Kafka's eight shards
  (``slots // 8`` each; new sessions go to the shards in turn, a session id names its shard).
  A new session in a full shard takes the slot of a session unused for ``EVICTION_S``, else of
  the least valuable evictable one, if the new one is worth at least as much: a follower's
  session (privileged) can evict consumers' sessions and sessions older than ``EVICTION_S``, a
  consumer's only the latter; value orders followers before consumers, then more partitions
  before fewer. So a client that opens a session on every fetch cannot push out the replicas'
  sessions.

:class:`FetchSessionHandler` is the fetching side (Kafka's client FetchSessionHandler), which the
broker's replica fetchers use: a full fetch opens the session, each later fetch sends only the
partitions whose fetch parameters changed and forgets the ones no longer followed; a session
error or a failed round trip starts over with a full fetch.

A partition's last stable offset is not tracked, as Kafka does not track it either: a
read_committed consumer learns a new LSO with the next change of high watermark or records.
"""

from __future__ import annotations

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
    seen_version: int = -1  # the partition's version last read to its end (-1: read it)

    def update_request(self, fp) -> None:
        self.seen_version = -1
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
    def __init__(self, session_id: int, privileged: bool, uses_topic_ids: bool, now: float,
                 partitions: dict[tuple, CachedPartition]) -> None:
        self.id = session_id
        self.privileged = privileged  # a follower's session
        self.uses_topic_ids = uses_topic_ids
        self.creation = self.last_used = now
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.partitions = partitions  # in the order they are read (dicts keep insertion order)

    def key(self, name: str | None, topic_id: uuid.UUID, index: int) -> tuple:
        return session_key(self.uses_topic_ids, name, topic_id, index)

    def value(self) -> tuple[bool, int]:
        """What evicting this session would cost: followers' first, then the larger."""
        return self.privileged, len(self.partitions)


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
                     partitions: dict[tuple, CachedPartition]) -> int:
        """A new session's id, or INVALID_SESSION_ID when there is no room for it."""
        now = self.clock()
        if self.max_entries <= 0:
            return INVALID_SESSION_ID
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now):
            return INVALID_SESSION_ID
        session_id = self._new_id()
        self.sessions[session_id] = FetchSession(session_id, privileged, uses_topic_ids, now, partitions)
        return session_id

    def _try_evict(self, privileged: bool, size: int, now: float) -> bool:
        stale = min(self.sessions.values(), key=lambda s: (s.last_used, s.id))
        if now - stale.last_used > self.eviction_s:
            return self._evict(stale)
        old = [s for s in self.sessions.values() if now - s.creation > self.eviction_s]
        evictable = old if not privileged else old + [s for s in self.sessions.values()
                                                      if not s.privileged and s not in old]
        if not evictable:
            return False
        least = min(evictable, key=lambda s: (*s.value(), s.id))
        if (privileged, size) < least.value():
            return False
        return self._evict(least)

    def _evict(self, session: FetchSession) -> bool:
        del self.sessions[session.id]
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
        return None if shard is None else shard.sessions.pop(session_id, None)

    def touch(self, session: FetchSession) -> None:
        session.last_used = self.clock()

    def maybe_create(self, privileged: bool, uses_topic_ids: bool,
                     partitions: dict[tuple, CachedPartition]) -> int:
        shard = self.shards[self._next_shard]
        self._next_shard = (self._next_shard + 1) % SHARDS
        return shard.maybe_create(privileged, uses_topic_ids, partitions)


# --- the context of one Fetch request --------------------------------------------------------------

Resolve = Callable[[object], tuple[str | None, uuid.UUID]]  # a request topic -> (name, topic id)
Wanted = list[tuple[str | None, uuid.UUID, list]]  # what to read: (name, topic id, partitions)


class FetchContext:
    """Sessionless: read what the request names, answer all of it."""

    session_id = INVALID_SESSION_ID
    error = ErrorCode.none

    def __init__(self, wanted: Wanted) -> None:
        self.wanted = wanted

    def respond(self, topics: list) -> list:
        return topics

    def forget_reads(self) -> None:
        """What was read is not sent after all (a throttled answer): read it again next time."""


class SessionErrorContext(FetchContext):
    def __init__(self, error: ErrorCode) -> None:
        super().__init__([])
        self.error = error


class FullFetchContext(FetchContext):
    """Answer all of it, then keep it as a new session."""

    def __init__(self, wanted: Wanted, cache: FetchSessionCache, privileged: bool, uses_topic_ids: bool) -> None:
        super().__init__(wanted)
        self.cache, self.privileged, self.uses_topic_ids = cache, privileged, uses_topic_ids

    def respond(self, topics: list) -> list:
        partitions: dict[tuple, CachedPartition] = {}
        for (name, topic_id, fps), (_, _, answers) in zip(self.wanted, topics):
            for fp, answer in zip(fps, answers):
                cached = _cached(name, topic_id, fp)
                cached.must_respond(answer)
                partitions[session_key(self.uses_topic_ids, name, topic_id, fp.partition)] = cached
        self.session_id = self.cache.maybe_create(self.privileged, self.uses_topic_ids, partitions)
        return topics


class IncrementalFetchContext(FetchContext):
    """Read the session's partitions (the handler skips those unchanged since read to their
    end); answer what changed."""

    def __init__(self, session: FetchSession, cache: FetchSessionCache) -> None:
        super().__init__(_grouped(session.partitions.values()))
        self.session, self.cache = session, cache
        self.session_id, self.epoch = session.id, session.epoch

    def respond(self, topics: list) -> list:
        if self.cache.get(self.session_id) is not self.session or self.session.epoch != self.epoch:
            # Closed, evicted or used again while this fetch waited: what it told is unknowable
            # to the session now, so answer everything read and change nothing.
            self.forget_reads()
            return [(name, topic_id, [a for a in answers if a is not None]) for name, topic_id, answers in topics]
        out: list = []
        moved = []
        for (name, topic_id, cached_parts), (_, _, answers) in zip(self.wanted, topics):
            kept = []
            for cached, answer in zip(cached_parts, answers):
                if answer is None:  # skipped unread: nothing changed since it was last read
                    continue
                if cached.must_respond(answer):
                    kept.append(answer)
                    if answer[6]:
                        moved.append(cached)
            if kept:
                if out and out[-1][0] == name and out[-1][1] == topic_id:
                    out[-1][2].extend(kept)
                else:
                    out.append((name or "", topic_id, kept))
        parts = self.session.partitions
        for cached in moved:  # read last next time (KIP-227's fairness)
            key = self.session.key(cached.topic, cached.topic_id, cached.partition)
            parts[key] = parts.pop(key)
        return out

    def forget_reads(self) -> None:
        for cached in self.session.partitions.values():
            cached.seen_version = -1


def _grouped(partitions: Iterable[CachedPartition]) -> Wanted:
    """Consecutive partitions of one topic as one entry, as Kafka's FetchResponse groups them."""
    out: Wanted = []
    for c in partitions:
        if out and out[-1][0] == c.topic and out[-1][1] == c.topic_id:
            out[-1][2].append(c)
        else:
            out.append((c.topic, c.topic_id, [c]))
    return out


def new_context(cache: FetchSessionCache, request, version: int, privileged: bool, resolve: Resolve) -> FetchContext:
    """Kafka's FetchManager.newContext for one request (see the module docstring)."""
    wanted = [(*resolve(ft), ft.partitions) for ft in request.topics]
    if version < 7:
        return FetchContext(wanted)
    session_id, epoch = request.session_id, request.session_epoch
    uses_topic_ids = version >= 13
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)
        if epoch == FINAL_EPOCH:
            return FetchContext(wanted)
        return FullFetchContext(wanted, cache, privileged, uses_topic_ids)
    session = cache.get(session_id)
    if session is None:
        return SessionErrorContext(ErrorCode.fetch_session_id_not_found)
    if session.epoch != epoch:
        return SessionErrorContext(ErrorCode.invalid_fetch_session_epoch)
    if session.uses_topic_ids != uses_topic_ids:
        return SessionErrorContext(ErrorCode.fetch_session_topic_id_error)
    _update(session, wanted, request.forgotten_topics_data, resolve)
    if not session.partitions:
        cache.remove(session.id)
        return FetchContext(wanted)
    cache.touch(session)
    session.epoch = next_epoch(session.epoch)
    return IncrementalFetchContext(session, cache)


def _update(session: FetchSession, wanted: Wanted, forgotten, resolve: Resolve) -> None:
    parts = session.partitions
    for name, topic_id, fps in wanted:
        for fp in fps:
            key = session.key(name, topic_id, fp.partition)
            cached = parts.get(key)
            if cached is None:
                parts[key] = _cached(name, topic_id, fp)
            else:
                cached.update_request(fp)
    for ft in forgotten or ():
        name, topic_id = resolve(ft)
        for index in ft.partitions:
            parts.pop(session.key(name, topic_id, index), None)


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

    def build(self, wanted: dict[tuple, object]) -> tuple[int, int, list[tuple], list[tuple]]:
        """(session id, epoch, keys to send, keys to forget) for the partitions ``wanted`` now."""
        params = {key: _params(fp) for key, fp in wanted.items()}
        self._full = self.epoch == INITIAL_EPOCH
        if self._full:
            self.sent = params
            return self.session_id, INITIAL_EPOCH, list(wanted), []
        send = [key for key, p in params.items() if self.sent.get(key) != p]
        forget = [key for key in self.sent if key not in params]
        self.sent = params
        return self.session_id, self.epoch, send, forget

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
