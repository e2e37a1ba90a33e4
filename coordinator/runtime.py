"""What the group, transaction and share coordinators share: their internal topic's creation
on first use, partition ownership by leader epoch, loading a partition (replay with retry,
applied only at the epoch it was elected at) and its progress, writes applied only if the
epoch is unchanged when the append completes, timers on an injectable clock, background tasks
and periodic jobs, and the mapping of a failed internal-topic append to a coordinator error.

A coordinator owns the partitions of its internal topic (``__consumer_offsets``,
``__transaction_state``) that this broker leads. Leadership arrives with a leader epoch, which
is the coordinator epoch: a partition is *loading* from its election until its log has been
replayed (COORDINATOR_LOAD_IN_PROGRESS), then *owned* at that epoch until it resigns
(NOT_COORDINATOR). A write decided under one epoch is applied to memory only if the partition
is still owned at that epoch when the append completes.

Differs from Kafka 4.x's ``CoordinatorRuntime``: no per-partition event queue or timeline
snapshots (one event loop; state changes only after a durable append), just the bookkeeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import structlog

from protocol import records as rb
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from .services import InternalTopics

log = structlog.get_logger("coordinator.runtime")

LOAD_ATTEMPTS = 3
LOAD_PROGRESS_INTERVAL_S = 2.0  # a long load reports progress this often, not per partition
T = TypeVar("T")
R = TypeVar("R")
K = TypeVar("K")
V = TypeVar("V")


def fault_points(value: object) -> dict[str, str]:
    """The internal ``test.fault.points`` config, ``name[:argument],...``, as {name: argument}:
    points where a test makes a coordinator hold an operation, as a slow ISR or a pause would."""
    return {name: arg for name, _, arg in (f.strip().partition(":") for f in str(value or "").split(","))
            if name}


class BackgroundTasks:
    """The tasks a coordinator starts and no request awaits (loads, writes whose requester is
    gone, periodic jobs), kept so that :meth:`stop` cancels each and waits until it ended.
    Periodic jobs run on ``timer`` (the coordinator's: a unit test's fake clock moves them)."""

    def __init__(self, owner: str, timer: CoordinatorTimer | None = None) -> None:
        self.owner = owner
        self.timer: CoordinatorTimer = timer or LoopTimer()
        self.tasks: set[asyncio.Task] = set()

    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def every(self, interval_ms: int, job: Callable[[], Any], *, minimum_ms: int = 10) -> asyncio.Task:
        """Run ``job`` (a function, or one returning a coroutine) every ``interval_ms``; a
        failure is logged and the next run goes ahead."""
        return self.spawn(self._every(max(interval_ms, minimum_ms), job))

    async def _every(self, interval_ms: int, job: Callable[[], Any]) -> None:
        while True:
            await sleep_on(self.timer, interval_ms)
            try:
                result = job()
                if asyncio.iscoroutine(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("coordinator_periodic_job_failed", owner=self.owner,
                              job=getattr(job, "__name__", repr(job)))

    async def join(self) -> None:
        """Wait until every task started so far, and any those start, has ended."""
        while self.tasks:
            await asyncio.wait(set(self.tasks))

    def __len__(self) -> int:
        return len(self.tasks)

    def cancel(self) -> None:
        """Cancel every task without waiting (a synchronous shutdown)."""
        for task in list(self.tasks):
            task.cancel()

    async def stop(self) -> None:
        await cancel_and_wait(self.tasks)


async def cancel_and_wait(tasks) -> None:
    """Cancel tasks and wait until each has finished (their errors are theirs)."""
    tasks = [t for t in tasks if t is not None]
    for task in tasks:
        task.cancel()
    for task in tasks:
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class CoordinatorTimer(Protocol):
    """Where a coordinator's timers (sessions, rebalances, delayed joins) run: the event loop
    in a broker, a clock the test advances in unit tests (Kafka's ``Timer`` / ``MockTimer``)."""

    def schedule(self, delay_ms: float, callback: Callable[..., Any], *args: Any) -> TimerHandle: ...


class LoopTimer:
    """Timers on the running event loop."""

    def schedule(self, delay_ms: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000, callback, *args)


async def sleep_on(timer: CoordinatorTimer, delay_ms: float) -> None:
    """``asyncio.sleep`` on a coordinator timer (a unit test's fake clock moves it)."""
    woken = asyncio.get_running_loop().create_future()
    handle = timer.schedule(delay_ms, lambda: woken.done() or woken.set_result(None))
    try:
        await woken
    finally:
        handle.cancel()


class _ManualHandle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualTimer:
    """A fake clock: timers fire only when :meth:`advance` moves time past them, in deadline
    order (a timer scheduled by a callback fires in the same advance if it is due); one of no
    delay fires at the loop's next turn, as it would on the real clock."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self._due: list[tuple[float, int, _ManualHandle, Callable[..., Any], tuple]] = []
        self._seq = itertools.count()

    def schedule(self, delay_ms: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        handle = _ManualHandle()
        if delay_ms <= 0:  # due now: the next turn of the loop, as on the real clock
            asyncio.get_running_loop().call_soon(self._fire, handle, callback, args)
            return handle
        heapq.heappush(self._due, (self.now_ms + delay_ms, next(self._seq), handle, callback, args))
        return handle

    @staticmethod
    def _fire(handle: _ManualHandle, callback: Callable[..., Any], args: tuple) -> None:
        if not handle.cancelled:
            callback(*args)

    def advance(self, ms: float) -> int:
        """Move the clock ``ms`` forward, firing what falls due; returns how many fired."""
        target, fired = self.now_ms + ms, 0
        while self._due and self._due[0][0] <= target:
            deadline, _, handle, callback, args = heapq.heappop(self._due)
            self.now_ms = max(self.now_ms, deadline)
            if not handle.cancelled:
                callback(*args)
                fired += 1
        self.now_ms = target
        return fired

    @property
    def pending(self) -> int:
        return sum(not entry[2].cancelled for entry in self._due)


class PartitionOwnership:
    """The internal-topic partitions a coordinator loads or owns, each with its epoch."""

    def __init__(self, metadata_is_current: Callable[[], bool] | None = None) -> None:
        self.owned: dict[int, int] = {}    # partition -> coordinator epoch
        self.loading: dict[int, int] = {}  # partition -> epoch being loaded
        self.metadata_is_current = metadata_is_current or (lambda: True)

    def status(self, partition: int) -> int:
        """0 when owned; else COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR, which is also
        the answer while the broker's metadata is suspect (it resumed from a stall that may
        have moved the partition elsewhere: its state may be a stale copy)."""
        if partition in self.loading:
            return ErrorCode.coordinator_load_in_progress
        return 0 if partition in self.owned and self.metadata_is_current() else ErrorCode.not_coordinator

    def epoch(self, partition: int) -> int | None:
        """The epoch ``partition`` is owned at, None if not owned (or still loading)."""
        return None if partition in self.loading else self.owned.get(partition)

    def is_current(self, partition: int, epoch: int) -> bool:
        return self.epoch(partition) == epoch

    @property
    def is_loading(self) -> bool:
        return bool(self.loading)

    def begin_load(self, partition: int, epoch: int) -> bool:
        """An election at ``epoch``: False when already loading or owning it at that epoch."""
        if self.loading.get(partition) == epoch or self.epoch(partition) == epoch:
            return False
        self.owned.pop(partition, None)
        self.loading[partition] = epoch
        return True

    def finish_load(self, partition: int, epoch: int, ok: bool) -> bool:
        """The load at ``epoch`` ended: True when the partition is now owned (not resigned or
        re-elected meanwhile)."""
        if self.loading.get(partition) != epoch:
            return False
        del self.loading[partition]
        if ok:
            self.owned[partition] = epoch
        return ok

    def own(self, partition: int, epoch: int) -> None:
        """A partition created here: nothing to load."""
        self.loading.pop(partition, None)
        self.owned[partition] = epoch

    def resign(self, partition: int, epoch: int | None = None) -> bool:
        """Leadership moved away (at ``epoch``, or unconditionally): True if anything was held.
        A resignation older than the current election is ignored."""
        held = False
        if epoch is None or self.loading.get(partition, epoch) <= epoch:
            held = self.loading.pop(partition, None) is not None
        if epoch is None or self.owned.get(partition, epoch) <= epoch:
            held = self.owned.pop(partition, None) is not None or held
        return held

    def clear(self) -> None:
        self.owned.clear()
        self.loading.clear()


async def load_with_retry(read: Callable[[], T], *, topic: str, partition: int) -> T | None:
    """Run ``read`` (a log replay) in a worker thread, retrying a few times: a segment swapped
    by the cleaner under the reader is the usual cause. None when every attempt failed."""
    for attempt in range(1, LOAD_ATTEMPTS + 1):
        try:
            return await asyncio.to_thread(read)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("coordinator_load_failed", topic=topic, partition=partition,
                          attempt=attempt, attempts=LOAD_ATTEMPTS)
            await asyncio.sleep(0.1 * attempt)
    return None


async def load_partition(ownership: PartitionOwnership, partition: int, epoch: int, read: Callable[[], T],
                         apply: Callable[[T], R], *, topic: str) -> R | None:
    """Load one partition elected at ``epoch``: replay it (``read``, in a worker thread,
    retried) and, if it is still loading at that epoch once the replay is done (not resigned
    or re-elected meanwhile: that election loads its own), ``apply`` the replay to memory and
    own the partition. Returns what ``apply`` returned (a summary of what was loaded, never
    None), or None when the load failed or was superseded."""
    loaded = await load_with_retry(read, topic=topic, partition=partition)
    if ownership.loading.get(partition) != epoch:
        return None
    applied = None
    if loaded is not None:
        try:
            applied = apply(loaded)
        except Exception:
            log.exception("coordinator_load_apply_failed", topic=topic, partition=partition, epoch=epoch)
    ownership.finish_load(partition, epoch, applied is not None)
    return applied


async def append_then_apply(ownership: PartitionOwnership, partition: int, append: Callable[[], Awaitable[int]],
                            apply: Callable[[], None] | None = None, *,
                            too_large: int = ErrorCode.unknown_server_error) -> int:
    """A coordinator's write: ``append`` (acks=all) while the partition is owned, then
    ``apply`` it to memory only if the partition is still owned at the same epoch when the
    append completes (leadership may have moved, and come back at a newer epoch whose load
    already holds this write, while it was in flight). 0, else what the coordinator answers:
    the partition's status when it was not owned, the failed append's error as
    :func:`append_error` maps it, NOT_COORDINATOR when the epoch moved meanwhile."""
    epoch = ownership.epoch(partition)
    if epoch is None:
        return ownership.status(partition)
    code = await append()
    if code:
        return append_error(code, too_large=too_large)
    if not ownership.is_current(partition, epoch):
        return ErrorCode.not_coordinator
    if apply is not None:
        apply()
    return 0


def ensure_internal_topic(services: InternalTopics, name: str, partitions: int, configs: dict[str, str],
                          replication_factor: int, adopt: Callable[[int, int], None]) -> int:
    """The partition count of a coordinator's internal topic, creating it on first use as
    Kafka does on FindCoordinator (KafkaError while a cluster cannot create it). Its fresh
    partitions led here hold nothing to load: ``adopt(partition, leader epoch)`` makes each the
    coordinator's at once."""
    n = services.partition_count(name)
    if n is None:
        n = services.create_internal_topic(name, partitions, configs, replication_factor)
        for partition, epoch in services.led_partitions(name).items():
            adopt(partition, epoch)
        log.info("internal_topic_created", topic=name, partitions=n, replication_factor=replication_factor)
    return n


class LoadProgress:
    """What a long load of a coordinator's partitions tells the log: ``<name>_load_started``,
    ``<name>_load_progress`` at most every ``interval_s`` while it lasts, ``<name>_load_finished``
    with its totals. ``quiet``: a load that brings nothing (one partition gained by an election)
    is logged at debug level only."""

    def __init__(self, name: str, topic: str, partitions: int, *, quiet: bool = False,
                 interval_s: float = LOAD_PROGRESS_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.name, self.topic, self.partitions, self.quiet = name, topic, partitions, quiet
        self.interval_s, self.clock = interval_s, clock
        self.started = self.last_report = clock()
        (log.debug if quiet else log.info)(f"{name}_load_started", topic=topic, partitions=partitions)

    def report(self, partitions_loaded: int, **totals: int) -> None:
        """Log the progress if ``interval_s`` passed since the last report."""
        now = self.clock()
        if now - self.last_report >= self.interval_s:
            self.last_report = now
            log.info(f"{self.name}_load_progress", topic=self.topic, partitions_loaded=partitions_loaded,
                     partitions=self.partitions, **totals)

    def finished(self, **totals: int) -> None:
        quiet = self.quiet and not any(totals.values())
        (log.debug if quiet else log.info)(f"{self.name}_load_finished", topic=self.topic,
                                           partitions=self.partitions, **totals,
                                           seconds=round(self.clock() - self.started, 3))


def replay_latest(batches: Iterable[bytes], decode_key: Callable[[bytes], K],
                  decode_value: Callable[[bytes], V]) -> tuple[dict[K, V], int]:
    """Replay a compacted internal-topic partition (in a worker thread): the last value per
    key wins, a tombstone deletes, control batches are skipped. Returns (state, records read)."""
    state: dict[K, V] = {}
    records = 0
    for batch in batches:
        header, recs = rb.decode_records(batch)
        if header.is_control:
            continue
        for rec in recs:
            records += 1
            if rec.key is None:
                continue
            key = decode_key(rec.key)
            if rec.value is None:
                state.pop(key, None)
            else:
                state[key] = decode_value(rec.value)
    return state, records


def append_error(code: int, *, too_large: int = ErrorCode.unknown_server_error) -> int:
    """Kafka's mapping of a failed internal-topic append to what a coordinator answers:
    replication trouble is retriable COORDINATOR_NOT_AVAILABLE, lost leadership NOT_COORDINATOR,
    an oversized write ``too_large`` (INVALID_COMMIT_OFFSET_SIZE for offset commits)."""
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error,
                ErrorCode.fenced_leader_epoch):
        return ErrorCode.not_coordinator
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return too_large
    return code


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
