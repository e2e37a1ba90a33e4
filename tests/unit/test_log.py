"""Segment log: offsets, roll, reads, recovery, retention, idempotent sequences."""

from __future__ import annotations

import os
import time

import pytest

from protocol import records as rb
from protocol.errors import ErrorCode, KafkaError
from storage.log import Log, LogConfig


def batch(i: int, n: int = 1, pid: int = -1, epoch: int = -1, seq: int = -1, ts: int = 1000) -> bytes:
    return bytes(rb.build_batch([(b"k%d" % i, b"v" * 50)] * n, timestamp=ts + i, producer_id=pid,
                                producer_epoch=epoch, base_sequence=seq))


@pytest.fixture
def log_dir(tmp_path):
    return str(tmp_path / "t-0")


def open_log(path, **cfg):
    log, report = Log.open(path, "t", 0, LogConfig(**cfg))
    return log


def test_offsets_are_assigned_and_segments_roll(log_dir):
    log = open_log(log_dir, segment_bytes=1000)
    for i in range(40):
        info = log.append_as_leader(batch(i), leader_epoch=3)
        assert info.base_offset == i
    assert log.log_end_offset == 40
    assert len(log.segments) > 3
    data = log.read(10, 10_000, log.log_end_offset)
    headers = [h for _, h in rb.iter_batches(data)]
    assert headers[0].base_offset == 10
    assert all(h.partition_leader_epoch == 3 for h in headers)


def test_read_returns_first_batch_past_max_bytes(log_dir):
    log = open_log(log_dir)
    log.append_as_leader(batch(0, n=20), 0)
    assert len(log.read(0, 10, log.log_end_offset)) > 10


def test_read_stops_at_max_offset(log_dir):
    log = open_log(log_dir)
    for i in range(5):
        log.append_as_leader(batch(i), 0)
    data = log.read(0, 1 << 20, 3)
    assert [h.base_offset for _, h in rb.iter_batches(data)] == [0, 1, 2]


def test_read_out_of_range(log_dir):
    log = open_log(log_dir)
    log.append_as_leader(batch(0), 0)
    with pytest.raises(KafkaError) as err:
        log.read(5, 100, 10)
    assert err.value.code == ErrorCode.offset_out_of_range


def test_timestamp_lookup(log_dir):
    log = open_log(log_dir, segment_bytes=500)
    for i in range(20):
        log.append_as_leader(batch(i, ts=1000), 0)
    assert log.offset_for_timestamp(1007, 20) == (7, 1007)
    assert log.offset_for_timestamp(5000, 20) is None
    assert log.offset_of_max_timestamp(20) == (19, 1019)


def test_recovery_truncates_torn_tail(log_dir):
    log = open_log(log_dir)
    for i in range(10):
        log.append_as_leader(batch(i), 0)
    path = log.active_segment.path(".log")
    log.close(clean=False)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 7)
    log2, report = Log.open(log_dir, "t", 0, LogConfig())
    assert report.bytes_truncated > 0
    assert log2.log_end_offset == 9


def test_idempotent_duplicate_gets_original_offset(log_dir):
    log = open_log(log_dir)
    for seq in range(7):
        log.append_as_leader(batch(seq, pid=9, epoch=0, seq=seq), 0)
    info = log.append_as_leader(batch(0, pid=9, epoch=0, seq=5), 0)
    assert info.duplicate and info.base_offset == 5
    assert log.log_end_offset == 7


def test_idempotent_gap_and_stale_epoch(log_dir):
    log = open_log(log_dir)
    log.append_as_leader(batch(0, pid=9, epoch=1, seq=0), 0)
    with pytest.raises(KafkaError) as gap:
        log.append_as_leader(batch(0, pid=9, epoch=1, seq=5), 0)
    assert gap.value.code == ErrorCode.out_of_order_sequence_number
    with pytest.raises(KafkaError) as stale:
        log.append_as_leader(batch(0, pid=9, epoch=0, seq=1), 0)
    assert stale.value.code == ErrorCode.invalid_producer_epoch
    # A duplicate older than the five-batch window is out of order, not a silent success.
    for seq in range(1, 8):
        log.append_as_leader(batch(seq, pid=9, epoch=1, seq=seq), 0)
    with pytest.raises(KafkaError) as old:
        log.append_as_leader(batch(0, pid=9, epoch=1, seq=1), 0)
    assert old.value.code == ErrorCode.out_of_order_sequence_number


def test_producer_state_survives_restart(log_dir):
    log = open_log(log_dir, segment_bytes=600)
    for seq in range(12):
        log.append_as_leader(batch(seq, pid=4, epoch=0, seq=seq), 0)
    log.close(clean=False)  # unclean: rebuilt from snapshot + log tail
    log2 = open_log(log_dir, segment_bytes=600)
    info = log2.append_as_leader(batch(0, pid=4, epoch=0, seq=11), 0)
    assert info.duplicate and info.base_offset == 11


def test_retention_by_bytes_advances_log_start(log_dir):
    log = open_log(log_dir, segment_bytes=500, retention_bytes=1000)
    for i in range(40):
        log.append_as_leader(batch(i), 0)
    log.high_watermark = log.log_end_offset  # the replica layer's job; a single replica here
    deleted = log.apply_retention()
    assert deleted > 0
    assert log.log_start_offset == log.segments[0].base_offset > 0


def test_retention_by_time(log_dir):
    log = open_log(log_dir, segment_bytes=500, retention_ms=1000)
    for i in range(20):
        log.append_as_leader(batch(i, ts=0), 0)
    log.high_watermark = log.log_end_offset
    assert log.apply_retention(now_ms=10_000) > 0
    assert len(log.segments) == 1


def test_records_stamped_long_before_the_next_roll_the_segment_and_retention_takes_them(log_dir):
    """Kafka's timeWaitedForRoll: the incoming records' timestamp against the segment's first
    batch's, so data stamped long ago (mirrored, replayed) is in a segment of its own, which
    time retention deletes, while the log's newer records stay."""
    day = 24 * 3600 * 1000
    now = int(time.time() * 1000)
    log = open_log(log_dir, segment_ms=7 * day, retention_ms=7 * day)
    for i in range(3):
        log.append_as_leader(batch(i, ts=now - 400 * day), 0)  # one segment: 2 ms apart
    assert len(log.segments) == 1
    log.append_as_leader(batch(3, ts=now), 0)
    assert [s.base_offset for s in log.segments] == [0, 3]
    log.append_as_leader(batch(4, ts=now), 0)
    assert len(log.segments) == 2
    log.high_watermark = log.log_end_offset
    assert log.apply_retention(now_ms=now) == 1
    assert log.log_start_offset == 3

def test_delete_records_moves_log_start(log_dir):
    log = open_log(log_dir, segment_bytes=500)
    for i in range(30):
        log.append_as_leader(batch(i), 0)
    log.high_watermark = log.log_end_offset
    assert log.delete_records_before(17) == 17
    with pytest.raises(KafkaError):
        log.read(16, 100, 30)
    assert rb.parse_header(log.read(17, 100, 30)).base_offset == 17
    log.close()
    log2, _ = Log.open(log_dir, "t", 0, LogConfig(segment_bytes=500), log_start_offset=17)
    assert log2.log_start_offset == 17


def test_log_append_time_rewrites_timestamp_and_crc(log_dir):
    log = open_log(log_dir, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(batch(0), 0, now_ms=123456)
    assert info.log_append_time == 123456
    data = log.read(0, 1000, 1)
    header = rb.check_batch(data)  # CRC still valid
    assert header.max_timestamp == 123456 and header.attributes & rb.ATTR_LOG_APPEND_TIME


def test_leader_epoch_cache(log_dir):
    log = open_log(log_dir)
    log.leader_epochs.assign(1, 0)
    for i in range(5):
        log.append_as_leader(batch(i), 1)
    log.leader_epochs.assign(2, log.log_end_offset)
    for i in range(3):
        log.append_as_leader(batch(i), 2)
    assert log.leader_epochs.end_offset_for(1, log.log_end_offset) == (1, 5)
    assert log.leader_epochs.end_offset_for(2, log.log_end_offset) == (2, 8)
    assert log.leader_epochs.end_offset_for(7, log.log_end_offset) == (-1, -1)
    assert log.leader_epochs.end_offset_for(0, log.log_end_offset) == (0, 0)


def test_a_leaders_epoch_is_written_before_its_first_record_and_not_before(log_dir):
    from storage.leader_epoch import LeaderEpochCache

    log = open_log(log_dir)
    log.leader_epochs.assign(1, 0, persist=False)  # as make_leader does
    assert LeaderEpochCache(log.dir).epochs == []  # no record of it yet: nothing to tell after a restart
    assert log.leader_epochs.end_offset_for(1, 0) == (1, 0)  # though answered meanwhile
    log.append_as_leader(batch(0), 1)
    assert LeaderEpochCache(log.dir).epochs == [1]
    log.leader_epochs.assign(2, log.log_end_offset, persist=False)
    log.append_marker(7, 0, 0, True, 2)  # a marker is a record of the epoch too
    reopened = LeaderEpochCache(log.dir)
    assert (reopened.epochs, reopened.start_offsets) == ([1, 2], [0, 1])
    log.leader_epochs.assign(3, log.log_end_offset, persist=False)
    log.close()
    again, _ = Log.open(log.dir, log.topic, log.partition, log.config, clean_shutdown=True,
                        recovery_point=log.log_end_offset)
    assert again.leader_epochs.epochs == [1, 2]  # the epoch that never held a record is gone


def test_compacted_topic_refuses_keyless_records(log_dir):
    log = open_log(log_dir, cleanup_policy="compact")
    keyless = bytes(rb.build_batch([(None, b"v")], timestamp=1))
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(keyless, 0)
    assert err.value.code == ErrorCode.invalid_record
    assert log.append_as_leader(batch(0), 0).base_offset == 0


def test_leader_epoch_truncation_drops_epochs_starting_at_the_end(tmp_path):
    from storage.leader_epoch import LeaderEpochCache

    cache = LeaderEpochCache(str(tmp_path))
    cache.assign(0, 0)
    cache.assign(1, 7)  # became leader at offset 7, appended nothing
    cache.truncate_from_end(7)
    assert cache.latest_epoch == 0
    assert cache.end_offset_for(0, 7) == (0, 7)


def test_leader_epoch_cache_epoch_for_offset(tmp_path):
    from storage.leader_epoch import LeaderEpochCache

    cache = LeaderEpochCache(str(tmp_path))
    assert cache.epoch_for_offset(0) == -1
    cache.assign(2, 5)
    cache.assign(4, 9)
    assert [cache.epoch_for_offset(o) for o in (0, 4, 5, 8, 9, 100)] == [-1, -1, 2, 2, 4, 4]


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_segment_holds_one_descriptor_and_its_indexes_reach_the_files_on_flush_and_close(log_dir):
    before = _open_descriptors()
    log = open_log(log_dir, segment_bytes=600, index_interval_bytes=100)
    for i in range(30):
        log.append_as_leader(batch(i, ts=2000), 0)
        if i == 12:
            log.flush()  # the indexes written so far; the rest appended at close
    assert _open_descriptors() - before == len(log.segments)  # the .log files only
    rolled = log.segments[:-1]
    expected = [(s.base_offset, s.index_offsets, s.index_positions, s.time_stamps, s.time_offsets) for s in rolled]
    log.close()
    assert _open_descriptors() == before
    for base, offsets, _, stamps, _ in expected:  # 8-byte offset and 12-byte time entries
        assert os.path.getsize(os.path.join(log_dir, f"{base:020d}.index")) == 8 * len(offsets)
        assert os.path.getsize(os.path.join(log_dir, f"{base:020d}.timeindex")) == 12 * len(stamps)
    reopened = open_log(log_dir, segment_bytes=600, index_interval_bytes=100)
    # Clean segments below the recovery point load their index files instead of a scan.
    assert [(s.base_offset, s.index_offsets, s.index_positions, s.time_stamps, s.time_offsets)
            for s in reopened.segments[:-1]] == expected
    assert all(s.index_offsets for s in reopened.segments[:-1])
    assert reopened.offset_for_timestamp(2017, 30) == (17, 2017)
    assert reopened.offset_of_max_timestamp(30) == (29, 2029)
    reopened.close()


def test_a_new_log_is_created_without_recovery_and_reopens_as_any_other(tmp_path):
    """LogManager.open_log creates a log whose directory does not exist (its first segment and
    index files, nothing scanned); once written and closed it opens through recovery as before."""
    from storage.log_manager import LogManager

    lm = LogManager(str(tmp_path), replicated=True)
    log = lm.open_log("t", 0, LogConfig())
    assert sorted(os.listdir(log.dir)) == [f"{0:020d}{s}" for s in (".index", ".log", ".timeindex")]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    assert lm.open_log("t", 0, LogConfig()) is log
    log.leader_epochs.assign(2, 0)  # as Partition.make_leader does
    log.append_as_leader(batch(0, pid=7, epoch=0, seq=0), leader_epoch=2)
    log.close()
    with pytest.raises(FileExistsError):
        Log.create(log.dir, "t", 0, LogConfig())
    again, _ = Log.open(log.dir, "t", 0, LogConfig())
    assert again.log_end_offset == 1 and again.leader_epochs.latest_epoch == 2
    assert again.producer_state.producers[7].last_seq == 0


def test_checkpoints_are_rewritten_only_when_their_entries_changed(tmp_path):
    """LogManager.checkpoint leaves a checkpoint file whose entries it last wrote as it is: an
    idle broker does not rewrite and fsync its three files every interval."""
    from storage.checkpoint import read_checkpoint
    from storage.log_manager import HIGH_WATERMARK_FILE, LOG_START_FILE, RECOVERY_POINT_FILE, LogManager

    lm = LogManager(str(tmp_path), replicated=True)
    log = lm.open_log("t", 0, LogConfig())
    files = {name: tmp_path / name for name in (RECOVERY_POINT_FILE, LOG_START_FILE, HIGH_WATERMARK_FILE)}
    lm.checkpoint()
    inodes = {name: path.stat().st_ino for name, path in files.items()}  # each write replaces the file
    lm.checkpoint()
    assert {name: path.stat().st_ino for name, path in files.items()} == inodes
    log.high_watermark = 5
    lm.checkpoint()
    changed = {name for name, path in files.items() if path.stat().st_ino != inodes[name]}
    assert changed == {HIGH_WATERMARK_FILE} and read_checkpoint(str(files[HIGH_WATERMARK_FILE])) == {("t", 0): 5}
    lm.close()
