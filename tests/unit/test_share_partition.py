"""The share-partition state machine (coordinator/share/partition.py) over an in-memory log."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from coordinator.share.partition import (
    AckBatch,
    AcknowledgeType,
    InFlightRecord,
    InvalidTransition,
    PersistedState,
    RecordState,
    ShareConfig,
    SharePartition,
    reset_offset,
)
from protocol import records as rb
from protocol.errors import ErrorCode

A, R, J, G, N = (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT,
                 AcknowledgeType.GAP, AcknowledgeType.RENEW)


@dataclass
class _Aborted:
    producer_id: int
    first_offset: int


@dataclass
class FakeLog:
    """Batches appended in order; the high watermark is the log end unless set."""
    batches: list[bytes] = field(default_factory=list)
    log_start_offset: int = 0
    end: int = 0
    lso: int | None = None
    aborted: list[_Aborted] = field(default_factory=list)

    @property
    def high_watermark(self) -> int:
        return self.end

    @property
    def last_stable_offset(self) -> int:
        return self.end if self.lso is None else self.lso

    def append(self, n: int, *, pid: int = -1, transactional: bool = False, timestamp: int = 0) -> int:
        base = self.end
        self.batches.append(bytes(rb.build_batch([(None, b"v%d" % i) for i in range(n)], base_offset=base,
                                                 producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                                 transactional=transactional, timestamp=timestamp)))
        self.end += n
        return base

    def marker(self, pid: int, commit: bool) -> None:
        batch = rb.build_control_batch(rb.CONTROL_COMMIT if commit else rb.CONTROL_ABORT, pid, 0, 0, 0)
        rb.set_base_offset(batch, 0, self.end)
        self.batches.append(bytes(batch))
        self.end += 1

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool = True) -> bytes:
        out = b""
        for data in self.batches:
            header = rb.parse_header(data)
            if header.last_offset < offset or header.base_offset >= max_offset:
                continue
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return out

    def collect_aborted_txns(self, start: int, upper: int) -> list:
        return [a for a in self.aborted if a.first_offset < upper]

    def offset_for_timestamp(self, timestamp: int, max_offset: int):
        for data in self.batches:
            header = rb.parse_header(data)
            if header.max_timestamp >= timestamp and header.base_offset < max_offset and not header.is_control:
                return header.base_offset, header.max_timestamp
        return None


CONFIG = ShareConfig(record_lock_duration_ms=1000, delivery_count_limit=3, max_record_locks=100)


def _offsets(acq) -> list[tuple[int, int]]:
    return [(o, r.delivery_count) for r in acq.ranges for o in range(r.first_offset, r.last_offset + 1)]


def _sp(start: int = 0) -> SharePartition:
    return SharePartition("g", "t", 0, PersistedState(start))


def test_record_states_have_kafkas_valid_previous_states():
    assert RecordState.ACQUIRED.valid_previous == {RecordState.AVAILABLE}
    assert RecordState.ACKNOWLEDGED.valid_previous == {RecordState.ACQUIRED}
    rec = InFlightRecord(RecordState.ACKNOWLEDGED)
    with pytest.raises(InvalidTransition):
        rec.transition(RecordState.AVAILABLE)


def test_acquire_locks_new_records_and_accept_advances_the_start_offset():
    log, sp = FakeLog(), _sp()
    log.append(3)
    acq = sp.acquire(log, "m1", CONFIG, 0, 500, 1 << 20)
    assert _offsets(acq) == [(0, 1), (1, 1), (2, 1)]
    assert rb.parse_header(acq.records).base_offset == 0
    assert sp.acquire(log, "m2", CONFIG, 0, 500, 1 << 20).ranges == []  # all locked by m1
    assert sp.acknowledge("m1", [AckBatch(0, 1, (A,))], CONFIG, 0) == 0
    assert sp.start_offset == 2
    assert sp.acknowledge("m1", [AckBatch(2, 2, (J,))], CONFIG, 0) == 0
    assert (sp.start_offset, sp.records) == (3, {})


def test_acknowledgements_are_all_or_nothing_and_only_by_the_owner():
    log, sp = FakeLog(), _sp()
    log.append(2)
    sp.acquire(log, "m1", CONFIG, 0, 500, 1 << 20)
    assert sp.acknowledge("m2", [AckBatch(0, 0, (A,))], CONFIG, 0) == ErrorCode.invalid_record_state
    assert sp.acknowledge("m1", [AckBatch(0, 0, (A,)), AckBatch(5, 5, (A,))], CONFIG, 0) == \
        ErrorCode.invalid_record_state
    assert sp.records[0].state is RecordState.ACQUIRED  # nothing applied
    assert sp.acknowledge("m1", [AckBatch(0, 1, (A, A, A))], CONFIG, 0) == ErrorCode.invalid_request


def test_overlapping_or_out_of_order_batches_change_nothing():
    log, sp = FakeLog(), _sp()
    log.append(5)
    sp.acquire(log, "m", CONFIG, 0, 500, 1 << 20)
    # Kafka's validateAcknowledgementBatches: a batch starting before the previous one ends.
    assert sp.acknowledge("m", [AckBatch(3, 4, (A,)), AckBatch(0, 2, (A,))], CONFIG, 0) == \
        ErrorCode.invalid_request
    # Offset 2 twice: no longer ACQUIRED the second time; the first batch is not applied either.
    assert sp.acknowledge("m", [AckBatch(0, 2, (A,)), AckBatch(2, 4, (J,))], CONFIG, 0) == \
        ErrorCode.invalid_record_state
    assert all(sp.records[o].state is RecordState.ACQUIRED for o in range(5))


def test_release_redelivers_with_the_delivery_count_and_the_limit_archives():
    log, sp = FakeLog(), _sp()
    log.append(1)
    for attempt in range(1, CONFIG.delivery_count_limit + 1):
        assert _offsets(sp.acquire(log, "m", CONFIG, 0, 500, 1 << 20)) == [(0, attempt)]
        assert sp.acknowledge("m", [AckBatch(0, 0, (R,))], CONFIG, 0) == 0
    assert sp.acquire(log, "m", CONFIG, 0, 500, 1 << 20).ranges == []
    assert sp.start_offset == 1  # archived: the start offset moved past it


def test_lock_expiry_makes_records_available_again_and_renew_extends_the_lock():
    log, sp = FakeLog(), _sp()
    log.append(2)
    sp.acquire(log, "m", CONFIG, 0, 500, 1 << 20)
    assert sp.acknowledge("m", [AckBatch(1, 1, (N,))], CONFIG, 900) == 0  # renewed until 1900
    assert sp.expire_locks(1000, CONFIG)
    assert sp.records[0].state is RecordState.AVAILABLE
    assert sp.records[1].state is RecordState.ACQUIRED
    assert _offsets(sp.acquire(log, "m2", CONFIG, 1000, 500, 1 << 20)) == [(0, 2)]


def test_release_member_frees_only_its_records():
    log, sp = FakeLog(), _sp()
    log.append(1)
    log.append(1)
    sp.acquire(log, "a", CONFIG, 0, 1, 1 << 20)
    sp.acquire(log, "b", CONFIG, 0, 1, 1 << 20)
    assert sp.release_member("a", CONFIG)
    assert [sp.records[o].state for o in (0, 1)] == [RecordState.AVAILABLE, RecordState.ACQUIRED]


def test_max_records_is_applied_at_batch_boundaries():
    log, sp = FakeLog(), _sp()
    log.append(4)
    log.append(4)
    assert len(_offsets(sp.acquire(log, "m", CONFIG, 0, 2, 1 << 20))) == 4  # one whole batch


def test_the_in_flight_cap_splits_a_batch_and_holds_until_the_start_offset_moves():
    config = ShareConfig(record_lock_duration_ms=1000, delivery_count_limit=3, max_record_locks=100)
    log, sp = FakeLog(), _sp()
    log.append(150)
    assert len(_offsets(sp.acquire(log, "m", config, 0, 500, 1 << 20))) == 100
    assert sp.acquire(log, "m", config, 0, 500, 1 << 20).ranges == []
    assert sp.acknowledge("m", [AckBatch(0, 49, (A,))], config, 0) == 0
    assert _offsets(sp.acquire(log, "m", config, 0, 500, 1 << 20))[0] == (100, 1)
    assert sp.next_offset == 150


def test_read_committed_stops_at_the_lso_and_archives_aborted_batches_and_markers():
    log = FakeLog()
    first = log.append(2, pid=7, transactional=True)
    log.aborted.append(_Aborted(7, first))
    log.marker(7, commit=False)
    log.append(1)
    log.append(1, pid=8, transactional=True)  # open transaction: the LSO stays before it
    log.lso = 4
    config = ShareConfig(record_lock_duration_ms=1000, delivery_count_limit=3, max_record_locks=100,
                         isolation_level="read_committed")
    sp = _sp()
    assert _offsets(sp.acquire(log, "m", config, 0, 500, 1 << 20)) == [(3, 1)]
    assert sp.start_offset == 3  # the aborted records and the marker were archived


def test_gap_acknowledgements_archive():
    log, sp = FakeLog(), _sp()
    log.append(3)
    sp.acquire(log, "m", CONFIG, 0, 500, 1 << 20)
    assert sp.acknowledge("m", [AckBatch(0, 2, (A, G, A))], CONFIG, 0) == 0
    assert sp.start_offset == 3


def test_snapshot_round_trip_keeps_states_and_delivery_counts():
    log, sp = FakeLog(), _sp()
    log.append(4)
    sp.acquire(log, "m", CONFIG, 0, 500, 1 << 20)
    sp.acknowledge("m", [AckBatch(0, 0, (A,)), AckBatch(2, 2, (A,)), AckBatch(3, 3, (R,))], CONFIG, 0)
    restored = SharePartition("g", "t", 0, sp.snapshot())
    assert restored.start_offset == 1
    assert {o: (r.state, r.delivery_count) for o, r in restored.records.items()} == {
        1: (RecordState.AVAILABLE, 1), 2: (RecordState.ACKNOWLEDGED, 1), 3: (RecordState.AVAILABLE, 1)}
    assert _offsets(restored.acquire(log, "m", CONFIG, 0, 500, 1 << 20)) == [(1, 2), (3, 2)]


def test_log_start_moving_past_the_start_offset_drops_in_flight_records():
    log, sp = FakeLog(), _sp()
    log.append(3)
    sp.acquire(log, "m", CONFIG, 0, 500, 1 << 20)
    log.log_start_offset = 2
    sp.sync_log_start(log)
    assert sp.start_offset == 2 and set(sp.records) == {2}


@pytest.mark.parametrize("strategy,expected", [("earliest", 1), ("latest", 3), ("by_duration:PT1S", 2),
                                               ("by_duration:P1D", 1)])
def test_auto_offset_reset(strategy, expected):
    log = FakeLog(log_start_offset=1)
    log.end = 1
    log.append(1, timestamp=10_000)
    log.append(1, timestamp=50_000)
    assert reset_offset(log, strategy, 50_500, read_committed=False) == expected
