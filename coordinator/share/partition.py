"""The share-partition: one share group's view of one topic partition (KIP-932).

Owns, for a (group, topic, partition) led by this broker, the share-partition start offset
(SPSO), the in-flight records between it and the end of what has been fetched (the SPEO is
``next_offset - 1``), each in-flight record's :class:`RecordState`, delivery count, owning
member and acquisition-lock deadline; acquisition from the log (new records and records made
AVAILABLE again), acknowledgement (ACCEPT / RELEASE / REJECT / RENEW / GAP), lock expiry,
the delivery-count limit that archives poisoned records, the in-flight cap
(``share.partition.max.record.locks``), ``share.auto.offset.reset`` and
``share.isolation.level``. It is pure: the log is read through :class:`ShareLog`, time is
passed in, persistence and timers belong to the manager (``coordinator/share/manager.py``).

Differs from Apache Kafka's ``SharePartition``:
- In-flight state is kept per record (a dict keyed by offset), not as batches that are split
  into per-offset state on demand; acquired ranges in answers are rebuilt from runs of
  records acquired together, so clients see the same ranges.
- Control batches and, under read_committed, aborted transactional batches are archived here
  when they are reached, and never handed to a consumer; Kafka hands the whole range and
  lets the client acknowledge the gaps (GAP) and archive the aborted batches it skips.
- The in-flight cap (``share.partition.max.record.locks``) is strict: new records are acquired
  only up to it, splitting a log batch if needed; Kafka checks the cap before acquiring and
  then takes whole batches, so one fetch may overshoot it.
- A broker crash while records are ACQUIRED leaves them AVAILABLE with the delivery count
  last persisted (the same as Kafka, which persists only on acknowledgement and release).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from protocol import records as rb
from protocol.errors import ErrorCode

from ..group.group_config import parse_share_auto_offset_reset


class RecordState(enum.Enum):
    """An in-flight record's delivery state, with Kafka's persisted codes."""
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4

    @property
    def valid_previous(self) -> frozenset[RecordState]:
        return _VALID_PREVIOUS[self]

    @property
    def is_terminal(self) -> bool:
        return self in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


_VALID_PREVIOUS = {
    RecordState.AVAILABLE: frozenset({RecordState.ACQUIRED}),
    RecordState.ACQUIRED: frozenset({RecordState.AVAILABLE}),
    RecordState.ACKNOWLEDGED: frozenset({RecordState.ACQUIRED}),
    RecordState.ARCHIVED: frozenset({RecordState.AVAILABLE, RecordState.ACQUIRED}),
}


class AcknowledgeType(enum.IntEnum):
    """ShareFetch / ShareAcknowledge acknowledge types."""
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class InvalidTransition(Exception):
    pass


class ShareLog(Protocol):
    """What a share-partition reads of the partition's log (``storage.log.Log`` fits)."""
    log_start_offset: int

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool = True) -> bytes: ...

    def collect_aborted_txns(self, start_offset: int, upper_bound_offset: int) -> list: ...

    def offset_for_timestamp(self, timestamp: int, max_offset: int) -> tuple[int, int] | None: ...


@dataclass(slots=True)
class InFlightRecord:
    state: RecordState = RecordState.AVAILABLE
    delivery_count: int = 0
    member_id: str | None = None
    lock_deadline_ms: int = 0

    def transition(self, to: RecordState) -> None:
        if self.state not in to.valid_previous:
            raise InvalidTransition(f"{self.state.name} -> {to.name}")
        self.state = to
        if to is not RecordState.ACQUIRED:
            self.member_id = None
            self.lock_deadline_ms = 0


@dataclass(slots=True)
class ShareConfig:
    """The group's effective settings (group config overrides, else broker defaults)."""
    record_lock_duration_ms: int = 30000
    delivery_count_limit: int = 5
    max_record_locks: int = 2000
    auto_offset_reset: str = "latest"
    isolation_level: str = "read_uncommitted"

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"


@dataclass(slots=True)
class AcquiredRange:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(slots=True)
class Acquisition:
    """What one fetch acquired: the batches to send and the acquired offset ranges."""
    records: bytes = b""
    ranges: list[AcquiredRange] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(r.last_offset - r.first_offset + 1 for r in self.ranges)


@dataclass(slots=True)
class AckBatch:
    first_offset: int
    last_offset: int
    types: tuple[int, ...]


@dataclass(slots=True)
class StateBatch:
    """One persisted run of records sharing a state and delivery count."""
    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int


@dataclass(slots=True)
class PersistedState:
    start_offset: int
    state_epoch: int = 0
    leader_epoch: int = -1
    batches: list[StateBatch] = field(default_factory=list)


def reset_offset(log: ShareLog, strategy: str, now_ms: int, read_committed: bool) -> int:
    """Where a share-partition with no state starts (``share.auto.offset.reset``): the log
    start, the end (high watermark, or LSO under read_committed), or the first record at or
    after now minus the duration (the end if there is none)."""
    end = log.last_stable_offset if read_committed else log.high_watermark
    try:
        kind, duration = parse_share_auto_offset_reset(strategy)
    except ValueError:
        kind, duration = "latest", None
    if kind == "earliest":
        return log.log_start_offset
    if duration is not None:
        found = log.offset_for_timestamp(now_ms - duration, end)
        return end if found is None else found[0]
    return end


class SharePartition:
    """One share group's in-flight state on one topic partition (see the module docstring)."""

    def __init__(self, group_id: str, topic: str, partition: int, state: PersistedState) -> None:
        self.group_id = group_id
        self.topic = topic
        self.partition = partition
        self.start_offset = state.start_offset
        self.state_epoch = state.state_epoch
        self.leader_epoch = state.leader_epoch
        self.records: dict[int, InFlightRecord] = {}
        self.next_offset = state.start_offset
        for batch in state.batches:
            self._load_batch(batch)
        self._advance_start_offset()

    def _load_batch(self, batch: StateBatch) -> None:
        first = max(batch.first_offset, self.start_offset)
        for offset in range(self.next_offset, first):  # a gap in the persisted state
            self.records[offset] = InFlightRecord()
        for offset in range(first, batch.last_offset + 1):
            state = RecordState.AVAILABLE if batch.state is RecordState.ACQUIRED else batch.state
            self.records[offset] = InFlightRecord(state, batch.delivery_count)
        self.next_offset = max(self.next_offset, batch.last_offset + 1)

    # --- what is persisted --------------------------------------------------------------------

    def snapshot(self) -> PersistedState:
        """The state to persist: every in-flight record's state and delivery count, ACQUIRED
        written as AVAILABLE (a lock does not survive the leader)."""
        batches: list[StateBatch] = []
        for offset in range(self.start_offset, self.next_offset):
            rec = self.records.get(offset)
            if rec is None:
                continue
            state = RecordState.AVAILABLE if rec.state is RecordState.ACQUIRED else rec.state
            last = batches[-1] if batches else None
            if (last is not None and last.last_offset == offset - 1 and last.state is state
                    and last.delivery_count == rec.delivery_count):
                last.last_offset = offset
            else:
                batches.append(StateBatch(offset, offset, state, rec.delivery_count))
        return PersistedState(self.start_offset, self.state_epoch, self.leader_epoch, batches)

    # --- counts -------------------------------------------------------------------------------

    @property
    def in_flight_count(self) -> int:
        return self.next_offset - self.start_offset

    def delivery_complete_count(self) -> int:
        return sum(1 for r in self.records.values() if r.state.is_terminal)

    def has_available(self) -> bool:
        return any(r.state is RecordState.AVAILABLE for r in self.records.values())

    def can_acquire(self, log: ShareLog, config: ShareConfig) -> bool:
        """True when a fetch could acquire something now."""
        if self.has_available():
            return True
        end = log.last_stable_offset if config.read_committed else log.high_watermark
        return self.next_offset < end and self.in_flight_count < config.max_record_locks

    def next_lock_deadline_ms(self) -> int | None:
        deadlines = [r.lock_deadline_ms for r in self.records.values() if r.state is RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    # --- acquisition --------------------------------------------------------------------------

    def acquire(self, log: ShareLog, member_id: str, config: ShareConfig, now_ms: int,
                max_records: int, max_bytes: int) -> Acquisition:
        """Acquire up to ``max_records`` (whole batches: the last may overshoot) for
        ``member_id``: AVAILABLE in-flight records first, then new records from the log."""
        self.sync_log_start(log)
        end = log.last_stable_offset if config.read_committed else log.high_watermark
        begin = self._first_available()
        if begin is None:
            begin = self.next_offset
        if begin >= end or max_records <= 0:
            return Acquisition()
        data = log.read(begin, max(max_bytes, 1), end, min_one=True)
        aborted = _AbortedTracker(log, begin, data) if config.read_committed else None
        deadline = now_ms + config.record_lock_duration_ms
        chunks: list[bytes] = []
        acquired: list[tuple[int, int]] = []  # (offset, delivery count)
        budget = max_records
        for pos, header in rb.iter_batches(data):
            if budget <= 0:
                break
            if header.last_offset < begin:
                continue
            skip = (aborted is not None and aborted.is_aborted(header)) or header.is_control
            taken = self._acquire_batch(header, skip, member_id, deadline, config)
            if taken is None:  # the in-flight cap: no new records
                break
            if taken:
                chunks.append(bytes(data[pos:pos + header.size]))
                acquired.extend(taken)
                budget -= len(taken)
        self._advance_start_offset()
        return Acquisition(b"".join(chunks), _ranges(acquired))

    def _first_available(self) -> int | None:
        for offset in range(self.start_offset, self.next_offset):
            rec = self.records.get(offset)
            if rec is not None and rec.state is RecordState.AVAILABLE:
                return offset
        return None

    def _acquire_batch(self, header: rb.BatchHeader, skip: bool, member_id: str, deadline: int,
                       config: ShareConfig) -> list[tuple[int, int]] | None:
        """Acquire what can be of one log batch (all of it: ``max_records`` is applied at
        batch boundaries, as Kafka's batch-optimized mode); None when the in-flight cap
        stops it before it acquired anything."""
        taken: list[tuple[int, int]] = []
        first = max(header.base_offset, self.start_offset)
        for offset in range(first, min(header.last_offset + 1, self.next_offset)):
            rec = self.records.get(offset)
            if rec is None or rec.state is not RecordState.AVAILABLE:
                continue
            if skip:
                rec.transition(RecordState.ARCHIVED)
            else:
                self._lock(rec, member_id, deadline)
                taken.append((offset, rec.delivery_count))
        if header.last_offset < self.next_offset:
            return taken
        new_first = max(first, self.next_offset)
        new_last = header.last_offset
        if not skip:  # the in-flight cap is strict: it may split a batch
            room = config.max_record_locks - self.in_flight_count
            if room <= 0:
                return taken or None
            new_last = min(new_last, new_first + room - 1)
        for offset in range(new_first, new_last + 1):
            rec = InFlightRecord()
            self.records[offset] = rec
            if skip:
                rec.transition(RecordState.ARCHIVED)
            else:
                self._lock(rec, member_id, deadline)
                taken.append((offset, rec.delivery_count))
        self.next_offset = new_last + 1
        return taken

    @staticmethod
    def _lock(rec: InFlightRecord, member_id: str, deadline: int) -> None:
        rec.transition(RecordState.ACQUIRED)
        rec.delivery_count += 1
        rec.member_id = member_id
        rec.lock_deadline_ms = deadline

    # --- acknowledgement ----------------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: Iterable[AckBatch], config: ShareConfig,
                    now_ms: int) -> int:
        """Apply a member's acknowledgements, all or nothing: 0, or INVALID_REQUEST (malformed
        batches) / INVALID_RECORD_STATE (a record not acquired by ``member_id``)."""
        batches = list(batches)
        changes: dict[int, AcknowledgeType] = {}
        prev_end = -1
        for batch in batches:
            # Kafka's validateAcknowledgementBatches: batches in order, each well formed.
            error = self._validate_ack(batch) or (ErrorCode.invalid_request if batch.first_offset < prev_end else 0)
            if error:
                return error
            prev_end = batch.last_offset
            for offset, ack in _ack_types(batch):
                rec = self.records.get(offset)
                if ack is AcknowledgeType.GAP and (rec is None or offset < self.start_offset):
                    continue
                # A record acknowledged twice in one request is no longer ACQUIRED the second time.
                if (rec is None or rec.state is not RecordState.ACQUIRED or rec.member_id != member_id
                        or offset in changes):
                    return ErrorCode.invalid_record_state
                changes[offset] = ack
        for offset, ack in changes.items():
            self._apply_ack(self.records[offset], ack, config, now_ms)
        self._advance_start_offset()
        return 0

    def _validate_ack(self, batch: AckBatch) -> int:
        if batch.last_offset < batch.first_offset or not batch.types:
            return ErrorCode.invalid_request
        if len(batch.types) not in (1, batch.last_offset - batch.first_offset + 1):
            return ErrorCode.invalid_request
        if any(t not in AcknowledgeType._value2member_map_ for t in batch.types):
            return ErrorCode.invalid_request
        return 0

    def _apply_ack(self, rec: InFlightRecord, ack: AcknowledgeType, config: ShareConfig, now_ms: int) -> None:
        if ack is AcknowledgeType.ACCEPT:
            rec.transition(RecordState.ACKNOWLEDGED)
        elif ack is AcknowledgeType.RELEASE:
            self._release(rec, config)
        elif ack is AcknowledgeType.RENEW:
            rec.lock_deadline_ms = now_ms + config.record_lock_duration_ms
        else:  # REJECT, GAP
            rec.transition(RecordState.ARCHIVED)

    @staticmethod
    def _release(rec: InFlightRecord, config: ShareConfig) -> None:
        """Back to AVAILABLE, or ARCHIVED once delivered ``delivery_count_limit`` times."""
        if rec.delivery_count >= config.delivery_count_limit:
            rec.transition(RecordState.ARCHIVED)
        else:
            rec.transition(RecordState.AVAILABLE)

    def release_member(self, member_id: str, config: ShareConfig) -> bool:
        """A member's session ended: its acquired records become AVAILABLE (or ARCHIVED at
        the delivery limit). True if anything changed."""
        return self._release_where(lambda r: r.member_id == member_id, config)

    def expire_locks(self, now_ms: int, config: ShareConfig) -> bool:
        """Acquisition locks past their deadline release their records. True if any did."""
        return self._release_where(lambda r: r.lock_deadline_ms <= now_ms, config)

    def _release_where(self, predicate, config: ShareConfig) -> bool:
        changed = False
        for rec in self.records.values():
            if rec.state is RecordState.ACQUIRED and predicate(rec):
                self._release(rec, config)
                changed = True
        if changed:
            self._advance_start_offset()
        return changed

    # --- the start offset ---------------------------------------------------------------------

    def sync_log_start(self, log: ShareLog) -> None:
        """Records deleted from the log (retention, DeleteRecords) leave the share-partition."""
        if log.log_start_offset > self.start_offset:
            self.reset_start_offset(log.log_start_offset)

    def reset_start_offset(self, offset: int) -> None:
        """Move the SPSO (AlterShareGroupOffsets, log truncation): in-flight state is dropped."""
        self.records = {o: r for o, r in self.records.items() if o >= offset}
        self.start_offset = offset
        self.next_offset = max(self.next_offset, offset)
        if not self.records:
            self.next_offset = offset
        self._advance_start_offset()

    def _advance_start_offset(self) -> None:
        """The SPSO moves past every leading ACKNOWLEDGED / ARCHIVED record."""
        while self.start_offset < self.next_offset:
            rec = self.records.get(self.start_offset)
            if rec is not None and not rec.state.is_terminal:
                break
            self.records.pop(self.start_offset, None)
            self.start_offset += 1


def _ack_types(batch: AckBatch) -> Iterator[tuple[int, AcknowledgeType]]:
    single = len(batch.types) == 1
    for i, offset in enumerate(range(batch.first_offset, batch.last_offset + 1)):
        yield offset, AcknowledgeType(batch.types[0] if single else batch.types[i])


def _ranges(acquired: list[tuple[int, int]]) -> list[AcquiredRange]:
    """Runs of consecutive offsets with one delivery count."""
    out: list[AcquiredRange] = []
    for offset, count in acquired:
        last = out[-1] if out else None
        if last is not None and last.last_offset == offset - 1 and last.delivery_count == count:
            last.last_offset = offset
        else:
            out.append(AcquiredRange(offset, offset, count))
    return out


class _AbortedTracker:
    """Tells, batch by batch in offset order, which transactional batches were aborted (as a
    read_committed consumer does with the aborted-transaction list)."""

    def __init__(self, log: ShareLog, begin: int, data: bytes) -> None:
        upper = begin
        for _, header in rb.iter_batches(data):
            upper = header.next_offset
        self.pending = sorted(((e.first_offset, e.producer_id) for e in log.collect_aborted_txns(begin, upper)),
                              reverse=True)
        self.aborted: set[int] = set()

    def is_aborted(self, header: rb.BatchHeader) -> bool:
        while self.pending and self.pending[-1][0] <= header.last_offset:
            self.aborted.add(self.pending.pop()[1])
        if header.is_control:
            self.aborted.discard(header.producer_id)
            return False
        return header.is_transactional and header.producer_id in self.aborted
