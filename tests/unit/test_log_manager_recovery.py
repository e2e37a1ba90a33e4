"""What a broker's start finds on disk: after a clean shutdown the active segments are loaded
from their indexes, not scanned (Kafka skips recovery when its clean-shutdown file is there);
after a crash, when a segment does not end where its indexes say, or for a log opened once
the broker runs, they are recovered. The directory's lock tells the next holder who held it
last."""

from __future__ import annotations

import os

import pytest

from protocol import records as rb
from storage.log import LogConfig
from storage.log_manager import CLEAN_SHUTDOWN_FILE, LogDirInUse, LogManager
from storage.segment import Segment

CONFIG = LogConfig(segment_bytes=2000, index_interval_bytes=300)
BATCHES = 30


def _batch(i: int, producer_id: int) -> bytes:
    return bytes(rb.build_batch([(b"k%d" % i, b"v" * 40)] * 3, timestamp=1000 + i,
                                producer_id=producer_id, producer_epoch=0, base_sequence=3 * i))


def _state(lg) -> tuple:
    seg = lg.active_segment
    return (lg.log_end_offset, len(lg.segments), seg.size, seg.max_timestamp, seg.offset_of_max_timestamp,
            seg.index_offsets, seg.index_positions, seg.time_stamps, seg.time_offsets)


@pytest.fixture
def scans(monkeypatch):
    """How many segments were recovered by scanning."""
    count = [0]
    recover = Segment.recover

    def counting(self, *a, **kw):
        count[0] += 1
        return recover(self, *a, **kw)

    monkeypatch.setattr(Segment, "recover", counting)
    return count


@pytest.fixture
def shut_down(tmp_path):
    """(directory, state of each partition) of three partitions of a few segments each, each
    written by its own idempotent producer, shut down cleanly."""
    path = str(tmp_path / "logs")
    lm = LogManager(path)
    for p in range(3):
        lg = lm.open_log("t", p, CONFIG)
        for i in range(BATCHES):
            lg.append_as_leader(_batch(i, 70 + p), leader_epoch=2)
    before = {p: _state(lm.logs[("t", p)]) for p in range(3)}
    lm.close()
    return path, before


def _open_all(path: str) -> LogManager:
    lm = LogManager(path)
    for topic, p in lm.existing_partitions():
        lm.open_log(topic, p, CONFIG)
    return lm


def test_a_clean_shutdown_is_loaded_without_scanning_and_reads_the_same(shut_down, scans):
    directory, before = shut_down
    lm = _open_all(directory)
    assert scans[0] == 0
    for p, state in before.items():
        lg = lm.logs[("t", p)]
        assert _state(lg) == state
        assert sum(1 for _ in rb.iter_batches(lg.read(0, 1 << 20, lg.log_end_offset))) == BATCHES
        # The producer's sequence goes on where it was: its state came back too.
        info = lg.append_as_leader(_batch(BATCHES, 70 + p), leader_epoch=2)
        assert info.base_offset == 3 * BATCHES and not info.duplicate
        assert lg.append_as_leader(_batch(BATCHES, 70 + p), leader_epoch=2).duplicate
    lm.close()


def test_a_crash_recovers_the_active_segments(shut_down, scans):
    directory, before = shut_down
    os.unlink(os.path.join(directory, CLEAN_SHUTDOWN_FILE))
    lm = _open_all(directory)
    assert scans[0] == 3
    assert {p: _state(lm.logs[("t", p)]) for p in range(3)} == before
    lm.close()


def test_bytes_after_the_indexed_end_are_recovered_even_after_a_clean_shutdown(shut_down, scans):
    directory, before = shut_down
    part = os.path.join(directory, "t-0")
    active = sorted(f for f in os.listdir(part) if f.endswith(".log"))[-1]
    with open(os.path.join(part, active), "ab") as f:
        f.write(_batch(99, 70)[:-9])  # a torn batch, which no clean shutdown leaves
    lm = _open_all(directory)
    assert scans[0] == 1
    assert {p: _state(lm.logs[("t", p)]) for p in range(3)} == before
    lm.close()


def test_a_log_opened_once_the_broker_runs_is_recovered(shut_down, scans):
    directory, _ = shut_down
    lm = LogManager(directory)
    lm.mark_unclean()  # running: a log on disk may have been closed uncleanly since the start
    lm.open_log("t", 0, CONFIG)
    assert scans[0] == 1
    lm.close()


def test_the_lock_names_its_last_owner_to_the_next_and_refuses_a_second_holder(tmp_path):
    first = LogManager(str(tmp_path), owner="first-life")
    assert first.previous_owner == ""
    with pytest.raises(LogDirInUse, match=f"pid {os.getpid()}"):
        LogManager(str(tmp_path), owner="intruder")
    first.release()  # as when its process ends, even by kill -9
    second = LogManager(str(tmp_path), owner="second-life")
    assert second.previous_owner == "first-life"
    second.close()
