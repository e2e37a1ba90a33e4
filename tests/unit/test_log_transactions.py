"""Partition side of transactions: LSO, markers, aborted-transaction index, recovery."""

from __future__ import annotations

import pytest

from protocol import records as rb
from protocol.errors import ErrorCode, KafkaError
from storage.log import Log, LogConfig


def txn_batch(pid: int, epoch: int, seq: int, n: int = 2, transactional: bool = True) -> bytes:
    return bytes(rb.build_batch([(b"k", b"v%d" % i) for i in range(n)], timestamp=1000,
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                transactional=transactional))


@pytest.fixture
def log(tmp_path):
    lg, _ = Log.open(str(tmp_path / "t-0"), "t", 0, LogConfig(segment_bytes=600))
    return lg


def append(lg: Log, data: bytes):
    info = lg.append_as_leader(data, 0)
    lg.high_watermark = lg.log_end_offset
    return info


def marker(lg: Log, pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0):
    info = lg.append_marker(pid, epoch, coordinator_epoch, commit, 0)
    lg.high_watermark = lg.log_end_offset
    return info


def test_open_transaction_holds_the_lso(log):
    append(log, bytes(rb.build_batch([(b"a", b"b")], timestamp=1)))  # offset 0, plain
    append(log, txn_batch(7, 0, 0))  # offsets 1-2
    append(log, txn_batch(8, 0, 0))  # offsets 3-4
    assert log.high_watermark == 5 and log.last_stable_offset == 1
    marker(log, 7, 0, commit=True)  # offset 5
    assert log.last_stable_offset == 3
    marker(log, 8, 0, commit=False)  # offset 6
    assert log.last_stable_offset == log.high_watermark == 7


def test_abort_marker_indexes_the_aborted_range(log):
    append(log, txn_batch(7, 0, 0))  # 0-1
    append(log, txn_batch(9, 0, 0))  # 2-3
    marker(log, 7, 0, commit=False)  # 4
    marker(log, 9, 0, commit=True)  # 5
    aborted = log.collect_aborted_txns(0, 6)
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in aborted] == [(7, 0, 4)]
    assert log.collect_aborted_txns(5, 6) == []  # the marker is before the fetched range
    assert log.collect_aborted_txns(0, 0) == []  # nothing fetched below its first offset


def test_marker_checks_producer_then_coordinator_epoch(log):
    append(log, txn_batch(7, 3, 0))
    marker(log, 7, 3, commit=True, coordinator_epoch=5)
    with pytest.raises(KafkaError) as stale:
        log.append_marker(7, 2, 5, True, 0)
    assert stale.value.code == ErrorCode.invalid_producer_epoch
    with pytest.raises(KafkaError) as fenced:
        log.append_marker(7, 3, 4, True, 0)
    assert fenced.value.code == ErrorCode.transaction_coordinator_fenced


def test_marker_without_open_transaction_takes_an_offset(log):
    info = marker(log, 42, 0, commit=False)
    assert info.base_offset == 0 and log.log_end_offset == 1
    assert log.collect_aborted_txns(0, 10) == []


def test_non_transactional_write_during_open_transaction(log):
    append(log, txn_batch(7, 0, 0))
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(txn_batch(7, 0, 2, transactional=False), 0)
    assert err.value.code == ErrorCode.invalid_txn_state


def test_bumped_epoch_marker_resets_sequences(log):
    append(log, txn_batch(7, 0, 0))
    marker(log, 7, 1, commit=False)  # fencing abort at epoch + 1
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(txn_batch(7, 0, 2), 0)
    assert err.value.code == ErrorCode.invalid_producer_epoch
    assert append(log, txn_batch(7, 1, 0)).base_offset == 3


def test_verification_needed_only_for_a_new_transaction(log):
    first = rb.parse_header(txn_batch(7, 0, 0))
    assert log.producer_state.needs_verification(first)
    append(log, txn_batch(7, 0, 0))
    assert not log.producer_state.needs_verification(rb.parse_header(txn_batch(7, 0, 2)))
    assert not log.producer_state.needs_verification(rb.parse_header(txn_batch(7, 0, 2, transactional=False)))


def test_lso_waits_for_marker_above_high_watermark(log):
    append(log, txn_batch(7, 0, 0))
    log.append_marker(7, 0, 0, True, 0)  # not yet below the high watermark
    assert log.high_watermark == 2 and log.last_stable_offset == 0
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 3


@pytest.mark.parametrize("clean", [True, False])
def test_transaction_state_survives_restart(tmp_path, clean):
    path = str(tmp_path / "t-0")
    lg, _ = Log.open(path, "t", 0, LogConfig(segment_bytes=300))
    for i in range(6):
        append(lg, txn_batch(7, 0, i * 2))
        marker(lg, 7, 0, commit=i % 2 == 0)
        # each transaction is 2 records + a marker: offsets 3i .. 3i+2
    append(lg, txn_batch(9, 0, 0))  # open: 18-19
    expected_aborted = [(e.producer_id, e.first_offset, e.last_offset) for e in lg.collect_aborted_txns(0, 100)]
    assert expected_aborted == [(7, 3, 5), (7, 9, 11), (7, 15, 17)]
    lg.close(clean=clean)
    lg2, _ = Log.open(path, "t", 0, LogConfig(segment_bytes=300))
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in lg2.collect_aborted_txns(0, 100)] == expected_aborted
    assert lg2.last_stable_offset == 18
    marker(lg2, 9, 0, commit=False)
    assert lg2.last_stable_offset == lg2.log_end_offset


def test_recovery_rebuilds_lost_txn_index(tmp_path):
    import glob
    import os

    path = str(tmp_path / "t-0")
    lg, _ = Log.open(path, "t", 0, LogConfig())
    append(lg, txn_batch(7, 0, 0))
    marker(lg, 7, 0, commit=False)
    lg.close(clean=False)
    for f in glob.glob(os.path.join(path, "*.txnindex")) + glob.glob(os.path.join(path, "*.snapshot")):
        os.unlink(f)
    lg2, _ = Log.open(path, "t", 0, LogConfig())
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in lg2.collect_aborted_txns(0, 10)] == [(7, 0, 2)]


def test_a_tv2_marker_must_be_newer_than_the_producers_epoch(log):
    """KIP-1228: under transaction version 2 the coordinator bumped the epoch to end the
    transaction, so a marker at the data's own epoch is a stale one; the same epoch again once
    the transaction ended is a retry of a marker already written (KAFKA-19999)."""
    append(log, txn_batch(7, 3, 0))
    with pytest.raises(KafkaError) as stale:
        log.append_marker(7, 3, 0, True, 0, transaction_version=2)
    assert stale.value.code == ErrorCode.invalid_producer_epoch
    log.append_marker(7, 4, 0, True, 0, transaction_version=2)
    log.append_marker(7, 4, 0, True, 0, transaction_version=2)  # the retry
    with pytest.raises(KafkaError) as delayed:  # a produce of the ended transaction, late
        log.append_as_leader(txn_batch(7, 3, 2), 0)
    assert delayed.value.code == ErrorCode.invalid_producer_epoch


def test_a_tv2_verification_guard_outlives_the_previous_transactions_marker(log):
    """The next transaction's add starts at the bumped epoch, which the previous transaction's
    marker carries too: that marker leaves the guard (Kafka's isV2NextTransactionStarted); a
    TV1 guard it clears."""
    append(log, txn_batch(7, 3, 0))
    ps = log.producer_state
    guard = ps.start_verification(7, 4, supports_epoch_bump=True)
    log.append_marker(7, 4, 0, True, 0, transaction_version=2)
    ps.check_verification(rb.parse_header(txn_batch(7, 4, 0)), guard)  # still valid
    append(log, txn_batch(7, 4, 0))
    tv1_guard = ps.start_verification(8, 0)
    log.append_marker(8, 0, 0, False, 0)
    with pytest.raises(KafkaError) as ended:
        ps.check_verification(rb.parse_header(txn_batch(8, 0, 0)), tv1_guard)
    assert ended.value.code == ErrorCode.invalid_txn_state


def test_the_first_batch_after_a_tv2_marker_must_start_at_sequence_0(log):
    """The marker of transaction version 2 carries the epoch the producer's next transaction
    writes at, so no batch is known at that epoch yet: a later batch of the next transaction
    (sequence 2) is out of order while its first (sequence 0) is still being retried, and the
    first, once in, is the only one its retry can duplicate."""
    append(log, txn_batch(7, 3, 0))
    log.append_marker(7, 4, 0, True, 0, transaction_version=2)
    with pytest.raises(KafkaError) as gap:
        log.append_as_leader(txn_batch(7, 4, 2), 0)
    assert gap.value.code == ErrorCode.out_of_order_sequence_number
    first = append(log, txn_batch(7, 4, 0))
    assert append(log, txn_batch(7, 4, 2)).base_offset == first.base_offset + 2
    assert log.append_as_leader(txn_batch(7, 4, 0), 0).base_offset == first.base_offset  # a retry
