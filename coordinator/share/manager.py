"""The share-partition manager: every share-partition this broker leads, and the share sessions.

Owns (after Kafka's ``SharePartitionManager`` and ``ShareSessionCache``):
- the :class:`SharePartition` of each (group, topic, partition) fetched here, loaded on first
  use from the persisted state (or ``share.auto.offset.reset`` when there is none), in the
  background when a fetch asks for it (:meth:`SharePartitionManager.ready`);
- share sessions keyed by (group id, member id): epochs 0 (open, replacing any previous
  session of the member, whose records stay acquired), incremental (must equal the session's
  epoch, then +1) and -1 (close); at most ``group.share.max.share.sessions``; a session is
  tied to the connection that opened it, and that connection closing ends it and releases
  its member's records;
- one acquisition-lock timer per share-partition (its earliest lock deadline, renewals
  included) and persisting each share-partition's state after its acknowledgements, releases
  and lock expiries (writes coalesced per partition).

The broker hands it a :class:`ShareServices`; it never imports ``broker/``.

Differs from Apache Kafka: no delayed-share-fetch purgatory (the ShareFetch handler waits on
the partitions' data waiters, which a share-partition also wakes when records become available
again, and on its share-partitions' loads, which complete it synchronously); a member's
records are released when its connection's session ends (final epoch or a closed
connection), not yet when the group coordinator fences the member (``release_member`` is
there for it to call).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

import structlog

from protocol.errors import ErrorCode, KafkaError

from ..group.group_config import config_value
from ..runtime import BackgroundTasks, CoordinatorTimer, LoopTimer, TimerHandle, sleep_on
from ..services import Clock, ConfigReader
from .partition import (
    AckBatch,
    Acquisition,
    PersistedState,
    ShareConfig,
    ShareLog,
    SharePartition,
    reset_offset,
)

log = structlog.get_logger("coordinator.share.manager")

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

# A share coordinator that is not there yet (``__share_group_state`` being created, a partition
# loading or moving) is waited for, as Kafka's persister retries its state RPCs with backoff:
# the fetches answer without the partition meanwhile, not with the error.
RETRIABLE_LOAD_ERRORS = frozenset({ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
                                   ErrorCode.not_coordinator})
LOAD_BACKOFF_S = (0.1, 2.0)
LOAD_RETRY_TIMEOUT_S = 30.0  # of back-off in all, then the error is answered

SharePartitionKey = tuple[str, UUID, int]  # (group id, topic id, partition)


class StatePersister(Protocol):
    """Where share-partition state is kept (``coordinator/share/persister.py``)."""

    async def read_state(self, group_id: str, topic_id: UUID, partition: int) -> PersistedState | None: ...

    async def write_state(self, group_id: str, topic_id: UUID, partition: int, state: PersistedState) -> None:
        """Raises KafkaError when the state could not be written."""

    async def delete_state(self, group_id: str, partitions: list[tuple[UUID, int]]) -> None: ...

    async def group_partitions(self, group_id: str) -> list[tuple[UUID, int]]: ...


class ShareServices(ConfigReader, Clock, Protocol):
    """What the manager needs from the broker."""

    def group_configs(self, group_id: str) -> dict[str, str]: ...

    async def catch_up_group_config(self, group_id: str) -> None:
        """Until this broker has the group's config as the cluster has it now (an
        IncrementalAlterConfigs answered just before, maybe by another broker, applies)."""

    def leader_log(self, topic: str, partition: int) -> ShareLog:
        """The led partition's log, or KafkaError (NOT_LEADER_OR_FOLLOWER, ...)."""

    def wake(self, topic: str, partition: int) -> None:
        """Wake the long-polling fetches waiting on the partition."""


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int
    connection: object
    partitions: dict[tuple[UUID, int], str] = field(default_factory=dict)  # -> topic name


@dataclass(slots=True)
class _Entry:
    share_partition: SharePartition
    topic_id: UUID
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    changes: int = 0
    persisted: int = 0
    expiry: TimerHandle | None = None
    expiry_at_ms: int = 0


class SharePartitionManager:
    def __init__(self, services: ShareServices, persister: StatePersister,
                 timer: CoordinatorTimer | None = None) -> None:
        self.s = services
        self.persister = persister
        # Load back-offs and acquisition-lock expiry: the loop's clock, or a test's fake one.
        self.timer: CoordinatorTimer = timer or LoopTimer()
        self.entries: dict[SharePartitionKey, _Entry] = {}
        self.loading: dict[SharePartitionKey, asyncio.Future] = {}
        self.load_errors: dict[SharePartitionKey, KafkaError] = {}
        self.background_loads: set[SharePartitionKey] = set()
        self.load_listeners: dict[SharePartitionKey, list[Callable[[], None]]] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.tasks = BackgroundTasks("share-partitions", self.timer)

    # --- configs ------------------------------------------------------------------------------

    def share_config(self, group_id: str) -> ShareConfig:
        """The group's overrides (IncrementalAlterConfigs on the GROUP), else the broker's."""
        overrides = self.s.group_configs(group_id)

        def value(name: str) -> Any:
            return config_value(overrides, name, self.s.config)

        return ShareConfig(
            record_lock_duration_ms=value("share.record.lock.duration.ms"),
            delivery_count_limit=value("share.delivery.count.limit"),
            max_record_locks=value("share.partition.max.record.locks"),
            auto_offset_reset=value("share.auto.offset.reset"),
            isolation_level=value("share.isolation.level"),
        )

    # --- sessions -----------------------------------------------------------------------------

    def open_session(self, group_id: str, member_id: str, epoch: int, connection: object,
                     *, acknowledging: bool) -> ShareSession | None:
        """Kafka's ``newContext``: the session for this request (None for a final epoch,
        after checking it exists); raises KafkaError with the share-session error."""
        key = (group_id, member_id)
        session = self.sessions.get(key)
        if epoch == FINAL_EPOCH:
            if session is None:
                raise KafkaError(ErrorCode.share_session_not_found,
                                 f"Share session not found for group {group_id} member {member_id}")
            return session
        if epoch == INITIAL_EPOCH:
            if acknowledging:
                raise KafkaError(ErrorCode.invalid_request, "Acknowledge data present on initial epoch")
            if session is not None:
                # Kafka's ShareSessionCache.remove: the old session goes, its member's records
                # stay acquired (acknowledgeable in the new session) until their locks expire.
                del self.sessions[key]
            if len(self.sessions) >= self.s.config("group.share.max.share.sessions"):
                raise KafkaError(ErrorCode.share_session_limit_reached,
                                 "The limit of share sessions on this broker has been reached")
            session = ShareSession(group_id, member_id, 1, connection)
            self.sessions[key] = session
            return session
        if session is None:
            raise KafkaError(ErrorCode.share_session_not_found,
                             f"Share session not found for group {group_id} member {member_id}")
        if session.epoch != epoch:
            raise KafkaError(ErrorCode.invalid_share_session_epoch,
                             f"Share session epoch {epoch} is not the expected {session.epoch}")
        session.epoch = 1 if session.epoch == (1 << 31) - 1 else session.epoch + 1
        return session

    def check_acknowledge_session(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """ShareAcknowledge cannot open a session; it advances or closes one."""
        if epoch == INITIAL_EPOCH:
            raise KafkaError(ErrorCode.invalid_share_session_epoch,
                             "ShareAcknowledge cannot be sent with the initial share session epoch")
        session = self.open_session(group_id, member_id, epoch, None, acknowledging=True)
        assert session is not None
        return session

    def close_session(self, session: ShareSession) -> None:
        """Final epoch: the session ends and its member's remaining records are released."""
        self._drop_session(session)

    def is_open(self, session: ShareSession) -> bool:
        """False once the session ended (final epoch, replaced, or its connection closed)."""
        return self.sessions.get((session.group_id, session.member_id)) is session

    def connection_closed(self, connection: object) -> None:
        """A closed connection ends the sessions it opened (Kafka 4.x)."""
        for session in [s for s in self.sessions.values() if s.connection is connection]:
            self._drop_session(session)

    def _drop_session(self, session: ShareSession) -> None:
        if self.sessions.get((session.group_id, session.member_id)) is session:
            del self.sessions[(session.group_id, session.member_id)]
        self.release_member(session.group_id, session.member_id)
        if not self._has_sessions(session.group_id):
            self.tasks.spawn(self._evict_group_when_written(session.group_id))

    def _has_sessions(self, group_id: str) -> bool:
        return any(key[0] == group_id for key in self.sessions)

    async def _evict_group_when_written(self, group_id: str) -> None:
        """Kafka's ``onGroupEmpty``: with no session of the group left on this broker, its
        share-partitions leave the cache once their last change is written, and the next fetch
        reloads them from the share coordinator, so an offsets reset or delete written there
        meanwhile (by the group's coordinator, maybe another broker) takes effect."""
        for key, entry in [(k, e) for k, e in self.entries.items() if k[0] == group_id]:
            async with entry.write_lock:    # a write in flight lands first
                pass
            if (self.entries.get(key) is entry and entry.persisted >= entry.changes
                    and not self._has_sessions(group_id)):
                self._evict(key)

    def release_member(self, group_id: str, member_id: str) -> None:
        """The member's acquired records become available to the group's other members."""
        config = self.share_config(group_id)
        for key, entry in list(self.entries.items()):
            if key[0] == group_id and entry.share_partition.release_member(member_id, config):
                self._changed(key, entry)

    # --- share-partitions ---------------------------------------------------------------------

    async def share_partition(self, group_id: str, topic: str, topic_id: UUID, partition: int,
                              plog: ShareLog, leader_epoch: int = -1) -> SharePartition:
        """The share-partition, initialized on first use (persisted state, else the reset)."""
        key = (group_id, topic_id, partition)
        entry = self.entries.get(key)
        if entry is not None and entry.share_partition.topic == topic:
            return entry.share_partition
        pending = self.loading.get(key)
        if pending is not None:  # another fetch is loading it: share its outcome
            await asyncio.shield(pending)
            return await self.share_partition(group_id, topic, topic_id, partition, plog, leader_epoch)
        fut = asyncio.get_running_loop().create_future()
        self.loading[key] = fut
        try:
            state = await self.persister.read_state(group_id, topic_id, partition)
            fresh = state is None or state.start_offset < 0
            if fresh:  # where it starts follows share.auto.offset.reset as last altered
                await self.s.catch_up_group_config(group_id)
            config = self.share_config(group_id)
            if fresh:
                start = reset_offset(plog, config.auto_offset_reset, self.s.now_ms(), config.read_committed)
                state = PersistedState(start, 0, leader_epoch)
            sp = SharePartition(group_id, topic, partition, state)
            sp.leader_epoch = leader_epoch
            entry = _Entry(sp, topic_id)
            self.entries[key] = entry
            log.debug("share_partition_initialized", group=group_id, topic=topic, partition=partition,
                      start_offset=sp.start_offset, fresh=fresh, reset=config.auto_offset_reset)
            if fresh:
                await self._persist(key, entry)
            return sp
        finally:
            del self.loading[key]
            fut.set_result(None)

    def ready(self, group_id: str, topic: str, topic_id: UUID, partition: int, plog: ShareLog,
              leader_epoch: int = -1) -> SharePartition | None:
        """The share-partition if its state is loaded; else None, loading it in the background.

        As Kafka's SharePartitionManager, a fetch does not wait for every share-partition to
        initialize: one still loading is not acquirable (Kafka's INITIALIZING), and its load
        wakes the partition's waiting fetches, which answer with whatever is acquirable then.
        A failed load raises its error here once, for the fetch that wanted the partition.
        """
        key = (group_id, topic_id, partition)
        entry = self.entries.get(key)
        if entry is not None and entry.share_partition.topic == topic:
            return entry.share_partition
        error = self.load_errors.pop(key, None)
        if error is not None:
            raise error
        if key not in self.background_loads:
            self.background_loads.add(key)
            self.tasks.spawn(self._load_in_background(key, topic, plog, leader_epoch))
        return None

    async def _load_in_background(self, key: SharePartitionKey, topic: str, plog: ShareLog,
                                  leader_epoch: int) -> None:
        try:
            await self._load_with_retries(key, topic, plog, leader_epoch)
        except KafkaError as exc:
            self.load_errors[key] = exc
        except Exception:
            log.exception("share_partition_load_failed", group=key[0], topic=topic, partition=key[2])
            self.load_errors[key] = KafkaError(ErrorCode.unknown_server_error, None)
        finally:
            self.background_loads.discard(key)
        for listener in self.load_listeners.pop(key, []):
            try:
                listener()
            except Exception:
                log.exception("share_fetch_completion_failed", group=key[0], topic=topic, partition=key[2])
        self.s.wake(topic, key[2])

    async def _load_with_retries(self, key: SharePartitionKey, topic: str, plog: ShareLog,
                                 leader_epoch: int) -> None:
        backoff, waited = LOAD_BACKOFF_S[0], 0.0
        while True:
            try:
                await self.share_partition(key[0], topic, key[1], key[2], plog, leader_epoch)
                return
            except KafkaError as exc:
                if exc.code not in RETRIABLE_LOAD_ERRORS or waited + backoff > LOAD_RETRY_TIMEOUT_S:
                    raise
                log.info("share_partition_load_retry", group=key[0], topic=topic, partition=key[2],
                         error=ErrorCode(exc.code).name, backoff_s=backoff)
            await sleep_on(self.timer, backoff * 1000)
            waited += backoff
            backoff = min(backoff * 2, LOAD_BACKOFF_S[1])

    def add_load_listener(self, key: SharePartitionKey, listener: Callable[[], None]) -> None:
        """Call ``listener`` (synchronously) when ``key``'s background load ends."""
        self.load_listeners.setdefault(key, []).append(listener)

    def remove_load_listener(self, key: SharePartitionKey, listener: Callable[[], None]) -> None:
        listeners = self.load_listeners.get(key, [])
        if listener in listeners:
            listeners.remove(listener)
        if not listeners:
            self.load_listeners.pop(key, None)

    def forget_partition(self, topic: str, partition: int | None = None) -> None:
        """Leadership moved away (the next leader reloads the persisted state), or the topic
        was deleted (``partition`` None: all of its partitions)."""
        for key in [k for k, e in self.entries.items() if e.share_partition.topic == topic
                    and partition in (None, e.share_partition.partition)]:
            self._evict(key)

    def _evict(self, key: SharePartitionKey) -> None:
        """Drop the loaded state (the next fetch reloads the persisted one) and its timer."""
        entry = self.entries.pop(key, None)
        if entry is not None and entry.expiry is not None:
            entry.expiry.cancel()

    def acquire(self, key: SharePartitionKey, member_id: str, plog: ShareLog,
                max_records: int, max_bytes: int) -> Acquisition:
        """Acquire from a loaded share-partition (:meth:`ready`) and arm its lock timer."""
        entry = self.entries[key]
        config = self.share_config(key[0])
        acquisition = entry.share_partition.acquire(plog, member_id, config, self.s.now_ms(), max_records,
                                                    max_bytes)
        if acquisition.ranges:
            self._arm_expiry(key, entry)
        return acquisition

    async def acknowledge(self, group_id: str, member_id: str, topic_id: UUID, partition: int,
                          batches: Iterable[AckBatch]) -> int:
        """Apply and persist acknowledgements: 0 or the partition's acknowledge error."""
        key = (group_id, topic_id, partition)
        entry = self.entries.get(key)
        if entry is None:   # not loaded here (Kafka: not in the share-partition cache)
            return ErrorCode.unknown_topic_or_partition
        config = self.share_config(group_id)
        error = entry.share_partition.acknowledge(member_id, batches, config, self.s.now_ms())
        if error:
            return error
        self._arm_expiry(key, entry)    # a RENEW moved a deadline
        self.s.wake(entry.share_partition.topic, partition)
        try:
            await self._persist(key, entry)
        except KafkaError as exc:
            return exc.code
        return 0

    # --- lock expiry and persistence ----------------------------------------------------------

    def _arm_expiry(self, key: SharePartitionKey, entry: _Entry) -> None:
        """One timer per share-partition, at its earliest acquisition-lock deadline; when it
        fires it expires what is due and re-arms for the next deadline (renewed locks too)."""
        deadline = entry.share_partition.next_lock_deadline_ms()
        if entry.expiry is not None:
            if deadline is not None and entry.expiry_at_ms <= deadline:
                return                      # fires first, then re-arms for ``deadline``
            entry.expiry.cancel()
            entry.expiry = None
        if deadline is None:
            return
        # 5 ms late rather than early: the loop may fire a timer up to its clock's resolution
        # before it is due, and a lock expires only once ``now_ms`` has passed its deadline.
        entry.expiry = self.timer.schedule(max(0, deadline - self.s.now_ms()) + 5, self._expire, key, entry)
        entry.expiry_at_ms = deadline

    def _expire(self, key: SharePartitionKey, entry: _Entry) -> None:
        entry.expiry = None
        if self.entries.get(key) is not entry:   # forgotten meanwhile (leadership, deletion)
            return
        if entry.share_partition.expire_locks(self.s.now_ms(), self.share_config(key[0])):
            self._changed(key, entry)
        self._arm_expiry(key, entry)

    def _changed(self, key: SharePartitionKey, entry: _Entry) -> None:
        """A change not awaited by a request: wake fetches, persist in the background."""
        self.s.wake(entry.share_partition.topic, entry.share_partition.partition)
        self.tasks.spawn(self._persist_quietly(key, entry))

    async def _persist_quietly(self, key: SharePartitionKey, entry: _Entry) -> None:
        try:
            await self._persist(key, entry)
        except KafkaError as exc:
            log.warning("share_state_write_failed", group=key[0], partition=key[2], error=exc.code.name)
        except Exception:
            log.exception("share_state_write_failed", group=key[0], partition=key[2])

    async def _persist(self, key: SharePartitionKey, entry: _Entry) -> None:
        """Write the share-partition's state; concurrent callers share one write."""
        entry.changes += 1
        wanted = entry.changes
        async with entry.write_lock:
            if entry.persisted >= wanted:
                return
            upto = entry.changes
            await self.persister.write_state(key[0], key[1], key[2], entry.share_partition.snapshot())
            entry.persisted = upto

    # --- admin --------------------------------------------------------------------------------

    def local(self, group_id: str) -> list[tuple[SharePartitionKey, SharePartition]]:
        return [(k, e.share_partition) for k, e in self.entries.items() if k[0] == group_id]

    async def reset_start_offset(self, group_id: str, topic_id: UUID, partition: int, offset: int) -> None:
        """AlterShareGroupOffsets: the share-partition starts again at ``offset``."""
        self._evict((group_id, topic_id, partition))
        await self.persister.write_state(group_id, topic_id, partition, PersistedState(offset, 0, -1))

    async def delete_partitions_state(self, group_id: str, partitions: list[tuple[UUID, int]]) -> None:
        for topic_id, partition in partitions:
            self._evict((group_id, topic_id, partition))
        await self.persister.delete_state(group_id, partitions)

    async def delete_group_state(self, group_id: str) -> None:
        """DeleteGroups of a share group: its share-partitions' state goes (the contract with
        the share group coordinator)."""
        partitions = await self.persister.group_partitions(group_id)
        await self.delete_partitions_state(group_id, partitions)

    def group_state_exists(self, group_id: str) -> bool:
        return any(k[0] == group_id for k in self.entries) or self.persister_has_group(group_id)

    def persister_has_group(self, group_id: str) -> bool:
        has = getattr(self.persister, "has_group", None)
        return bool(has and has(group_id))

    async def stop(self) -> None:
        self.tasks.cancel()


def now_ms() -> int:
    return int(time.time() * 1000)
