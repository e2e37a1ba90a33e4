"""Log compaction: latest value per key, tombstones and delete horizons, transactions, producer
state, codecs, the crash-safe swap, and the async pass."""

from __future__ import annotations

import asyncio
import os
import random
import struct

import pytest

from protocol import records as rb
from storage import cleaner as cl
from storage.cleaner import LogCleaner
from storage.log import Log, LogConfig

NOW = 1_700_000_000_000


class Clock:
    def __init__(self, t: int = NOW) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


@pytest.fixture
def log_dir(tmp_path):
    return str(tmp_path / "t-0")


def open_log(path: str, **cfg) -> Log:
    cfg.setdefault("cleanup_policy", "compact")
    lg, _ = Log.open(path, "t", 0, LogConfig(**cfg))
    return lg


def append(lg: Log, records, *, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False,
           codec: int = 0, ts: int = NOW, xerial: bool = False) -> int:
    base = lg.log_end_offset
    recs = [rb.Record(base + i, ts + i, k, v) for i, (k, v) in enumerate(records)]
    buf = rb.build_batch(recs, base_offset=base, producer_id=pid, producer_epoch=epoch,
                         base_sequence=seq, transactional=txn, compression=0 if xerial else codec,
                         partition_leader_epoch=4)
    if xerial:
        buf = _recompress_xerial(buf)
    lg.append_as_follower(bytes(buf))
    lg.high_watermark = lg.log_end_offset
    return base


def _recompress_xerial(buf: bytearray) -> bytearray:
    body = cl.compress(rb.COMPRESSION_SNAPPY, bytes(buf[rb.HEADER_SIZE:]), xerial=True)
    out = bytearray(buf[: rb.HEADER_SIZE]) + body
    struct.pack_into(">i", out, 8, len(out) - rb.LOG_OVERHEAD)
    (attrs,) = struct.unpack_from(">h", out, rb.ATTRIBUTES_OFFSET)
    struct.pack_into(">h", out, rb.ATTRIBUTES_OFFSET, attrs | rb.COMPRESSION_SNAPPY)
    struct.pack_into(">I", out, rb.CRC_OFFSET, rb.batch_crc(out, 0, len(out)))
    return out


def marker(lg: Log, pid: int, epoch: int, ctype: int, ts: int = NOW) -> int:
    base = lg.log_end_offset
    buf = rb.build_control_batch(ctype, pid, epoch, 7, ts)
    rb.set_base_offset(buf, 0, base)
    lg.append_as_follower(bytes(buf))
    lg.high_watermark = lg.log_end_offset
    return base


def batches(lg: Log) -> list[tuple[rb.BatchHeader, list[rb.Record], bytes]]:
    out = []
    for seg, pos, header in lg.batches():
        raw = seg.read_batch(pos, header)
        rb.check_batch(raw)
        out.append((header, rb.decode_records(raw)[1], raw))
    return out


def records(lg: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record, in log order."""
    return [(r.offset, r.key, r.value) for h, recs, _ in batches(lg) if not h.is_control for r in recs]


def latest(recs) -> dict:
    out = {}
    for off, k, v in recs:
        out[k] = (off, v)
    return out


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def stray_files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith((".cleaned", ".swap")))


# --- latest value per key ------------------------------------------------------------------

def test_keeps_latest_value_per_key_with_offsets_preserved(log_dir):
    lg = open_log(log_dir)
    for rnd in range(5):
        for k in range(10):
            append(lg, [(b"k%d" % k, b"v%d-%d" % (k, rnd))])
        lg.roll()
    append(lg, [(b"k0", b"in-active-segment")])
    before = records(lg)
    leo = lg.log_end_offset
    cleaner = LogCleaner()
    result = cleaner.clean_now(lg)
    assert result is not None
    after = records(lg)
    # every key once below the active segment, at its original offset; active segment untouched
    expected = latest(before[:-1])
    assert {k: (o, v) for o, k, v in after[:-1]} == expected
    assert len(after) == 11 and after[-1] == before[-1]
    assert [o for o, _, _ in after] == sorted(o for o, _, _ in after)
    assert lg.log_end_offset == leo and lg.log_start_offset == 0
    assert len(lg.segments) == 2 and lg.base_offsets == [0, 50]
    assert result.stats.records_removed == 40 and result.stats.superseded == 40
    assert cleaner.first_dirty_offset(lg) == 50
    # fetch path reads the cleaned segment
    data = lg.read(0, 1 << 20, lg.log_end_offset)
    assert [h.base_offset for _, h in rb.iter_batches(data)][:3] == [40, 41, 42]
    assert lg.read(3, 1 << 20, lg.log_end_offset)[:8] == struct.pack(">q", 40)
    # what is on disk is what we read, and the checkpoint survives a restart
    lg.close()
    lg2 = open_log(log_dir)
    assert records(lg2) == after
    assert LogCleaner().first_dirty_offset(lg2) == 50
    assert stray_files(log_dir) == []


def test_records_within_a_batch_are_filtered_and_batch_offsets_kept(log_dir):
    lg = open_log(log_dir)
    append(lg, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")])
    append(lg, [(b"a", b"2"), (b"c", b"2")])
    lg.roll()
    append(lg, [(b"z", b"z")])
    LogCleaner().clean_now(lg)
    (h0, r0, _), (_, r1, _), _ = batches(lg)
    assert (h0.base_offset, h0.last_offset_delta, h0.record_count) == (0, 2, 1)
    assert [(r.offset, r.key) for r in r0] == [(1, b"b")]
    assert r0[0].timestamp == NOW + 1 and h0.max_timestamp == NOW + 1
    assert h0.partition_leader_epoch == 4
    assert [(r.offset, r.value) for r in r1] == [(3, b"2"), (4, b"2")]


def test_keyless_records_are_dropped(log_dir):
    lg = open_log(log_dir)
    append(lg, [(None, b"x"), (b"k", b"v"), (None, b"y")])
    lg.roll()
    append(lg, [(b"z", b"z")])
    result = LogCleaner().clean_now(lg)
    assert result.stats.keyless_removed == 2
    assert records(lg) == [(1, b"k", b"v"), (3, b"z", b"z")]


# --- tombstones and the delete horizon ---------------------------------------------------------

def test_tombstone_kept_until_delete_retention_passes(log_dir):
    clock = Clock()
    cleaner = LogCleaner(time_ms=clock)
    lg = open_log(log_dir, delete_retention_ms=10_000)
    append(lg, [(b"k1", b"a"), (b"k2", b"b")], ts=NOW - 500)
    append(lg, [(b"k1", None)], ts=NOW - 100)
    lg.roll()
    append(lg, [(b"z", b"z")])
    cleaner.clean_now(lg)
    assert records(lg) == [(1, b"k2", b"b"), (2, b"k1", None), (3, b"z", b"z")]
    tomb = next(h for h, recs, _ in batches(lg) if recs and recs[0].value is None)
    assert tomb.attributes & rb.ATTR_DELETE_HORIZON
    assert tomb.base_timestamp == NOW + 10_000
    assert batches(lg)[1][1][0].timestamp == NOW - 100  # record timestamp unchanged
    assert tomb.max_timestamp == NOW - 100
    # no new data, ratio 0: not due until the horizon passes
    clock.t = NOW + 9_999
    assert cleaner.prepare(lg) is None
    cleaner.clean_now(lg)  # forced: still within delete.retention.ms
    assert (2, b"k1", None) in records(lg)
    clock.t = NOW + 10_000
    assert cleaner.prepare(lg) is not None  # due: a horizon has passed
    result = cleaner.clean_now(lg, force=False)
    assert result.stats.tombstones_removed == 1
    assert records(lg) == [(1, b"k2", b"b"), (3, b"z", b"z")]
    assert cleaner.prepare(lg) is None


def test_max_compaction_lag_makes_a_barely_dirty_log_due(log_dir):
    clock = Clock()
    cleaner = LogCleaner(time_ms=clock)
    lg = open_log(log_dir, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=60_000)
    append(lg, [(b"k%d" % i, b"v") for i in range(20)], ts=NOW)
    lg.roll()
    append(lg, [(b"k1", b"w")], ts=NOW + 1000)
    cleaner.clean_now(lg)  # the first segment is clean now
    lg.roll()
    append(lg, [(b"z", b"z")], ts=NOW + 2000)
    clock.t = NOW + 60_999
    assert cleaner.prepare(lg) is None  # dirty ratio far below 0.99, lag not yet exceeded
    clock.t = NOW + 61_000
    assert cleaner.prepare(lg) is not None  # the oldest dirty record is max.compaction.lag.ms old
    cleaner.clean_now(lg, force=False)
    assert latest(records(lg))[b"k1"] == (20, b"w") and (1, b"k1", b"v") not in records(lg)


def test_tombstone_in_same_pass_as_its_value_is_kept_first(log_dir):
    lg = open_log(log_dir, delete_retention_ms=0)
    append(lg, [(b"k", b"v")])
    append(lg, [(b"k", None)])
    lg.roll()
    append(lg, [(b"z", b"z")])
    cleaner = LogCleaner()
    cleaner.clean_now(lg)
    assert records(lg) == [(1, b"k", None), (2, b"z", b"z")]  # first cleaning only sets a horizon
    cleaner.clean_now(lg)
    assert records(lg) == [(2, b"z", b"z")]


# --- transactions --------------------------------------------------------------------------

def test_aborted_records_dropped_committed_kept_markers_expire(log_dir):
    clock = Clock()
    cleaner = LogCleaner(time_ms=clock)
    lg = open_log(log_dir, delete_retention_ms=1_000)
    append(lg, [(b"a1", b"x"), (b"a2", b"x")], pid=1, epoch=0, seq=0, txn=True)
    append(lg, [(b"c1", b"x"), (b"c2", b"x")], pid=2, epoch=0, seq=0, txn=True)
    abort_at = marker(lg, 1, 0, rb.CONTROL_ABORT)
    commit_at = marker(lg, 2, 0, rb.CONTROL_COMMIT)
    append(lg, [(b"a3", b"y")], pid=1, epoch=0, seq=2, txn=True)
    marker(lg, 1, 0, rb.CONTROL_COMMIT)
    lg.roll()
    append(lg, [(b"z", b"z")])
    result = cleaner.clean_now(lg)
    assert result.stats.aborted_removed == 2
    keys = [k for _, k, _ in records(lg)]
    assert keys == [b"c1", b"c2", b"a3", b"z"]
    controls = [h.base_offset for h, _, _ in batches(lg) if h.is_control]
    assert abort_at in controls and commit_at in controls  # aborted data was seen this pass
    # next pass: the ABORT marker's transaction has no data left -> it gets a horizon
    cleaner.clean_now(lg)
    abort = next(h for h, _, _ in batches(lg) if h.base_offset == abort_at)
    assert abort.attributes & rb.ATTR_DELETE_HORIZON and abort.base_timestamp == NOW + 1_000
    assert abort.is_control and abort.is_transactional and abort.producer_id == 1
    clock.t = NOW + 1_000
    result = cleaner.clean_now(lg)
    assert result.stats.markers_removed == 1
    controls = [h.base_offset for h, _, _ in batches(lg) if h.is_control]
    assert abort_at not in controls and commit_at in controls  # committed data remains
    assert [k for _, k, _ in records(lg)] == [b"c1", b"c2", b"a3", b"z"]
    lg.close()
    assert [k for _, k, _ in records(open_log(log_dir))] == [b"c1", b"c2", b"a3", b"z"]


def test_aborted_records_do_not_supersede_older_values(log_dir):
    lg = open_log(log_dir)
    append(lg, [(b"k", b"committed")])
    append(lg, [(b"k", b"aborted")], pid=3, epoch=0, seq=0, txn=True)
    marker(lg, 3, 0, rb.CONTROL_ABORT)
    append(lg, [(b"other", b"x")], pid=3, epoch=0, seq=1)
    lg.roll()
    append(lg, [(b"z", b"z")])
    LogCleaner().clean_now(lg)
    assert [(k, v) for _, k, v in records(lg)] == [(b"k", b"committed"), (b"other", b"x"), (b"z", b"z")]


def test_open_transaction_stops_cleaning_at_its_first_offset(log_dir):
    lg = open_log(log_dir)
    append(lg, [(b"k", b"v0")])
    append(lg, [(b"k", b"v1")])
    lg.roll()
    append(lg, [(b"k", b"v2")])
    txn_first = append(lg, [(b"t", b"open")], pid=9, epoch=0, seq=0, txn=True)
    lg.roll()
    append(lg, [(b"k", b"v3")])
    lg.roll()
    append(lg, [(b"z", b"z")])
    assert lg.producer_state.producers[9].current_txn_first_offset == txn_first
    seg1 = lg.segments[1]
    untouched = {s.base_offset: read_file(s.path(".log")) for s in lg.segments[1:]}
    cleaner = LogCleaner()
    job = cleaner.prepare(lg, force=True)
    assert job.end == seg1.base_offset and len(job.segments) == 1
    cleaner.swap(lg, job, cleaner.clean(job))
    assert [(o, v) for o, k, v in records(lg) if k == b"k"] == [(1, b"v1"), (2, b"v2"), (4, b"v3")]
    for s in lg.segments[1:]:
        assert read_file(s.path(".log")) == untouched[s.base_offset]
    assert cleaner.first_dirty_offset(lg) == seg1.base_offset
    # the transaction commits: its records stay, the rest compacts
    marker(lg, 9, 0, rb.CONTROL_COMMIT)
    lg.roll()
    cleaner.clean_now(lg)
    assert [(o, k, v) for o, k, v in records(lg)] == [(3, b"t", b"open"), (4, b"k", b"v3"), (5, b"z", b"z")]


def test_transaction_resolved_after_the_cleanable_range_is_honoured(log_dir):
    """A transaction begun in the range whose ABORT lies past it (another one still open)."""
    lg = open_log(log_dir)
    append(lg, [(b"k", b"good")])
    append(lg, [(b"k", b"aborted")], pid=1, epoch=0, seq=0, txn=True)
    lg.roll()
    append(lg, [(b"x", b"open")], pid=2, epoch=0, seq=0, txn=True)  # LSO stops here
    marker(lg, 1, 0, rb.CONTROL_ABORT)
    append(lg, [(b"y", b"y")], pid=1, epoch=0, seq=1)
    cleaner = LogCleaner()
    job = cleaner.prepare(lg, force=True)
    assert len(job.segments) == 1
    cleaner.swap(lg, job, cleaner.clean(job))
    assert [(k, v) for _, k, v in records(lg)][:1] == [(b"k", b"good")]
    assert (1, b"k", b"aborted") not in records(lg)


# --- producer state ----------------------------------------------------------------------------

def test_each_producers_last_batch_is_retained(log_dir):
    lg = open_log(log_dir)
    append(lg, [(b"x", b"1"), (b"y", b"1")], pid=5, epoch=3, seq=0)
    append(lg, [(b"p", b"1")], pid=6, epoch=0, seq=0)
    append(lg, [(b"q", b"1")], pid=6, epoch=0, seq=1)
    append(lg, [(b"x", b"2"), (b"y", b"2"), (b"p", b"2"), (b"q", b"2")])
    lg.roll()
    append(lg, [(b"z", b"z")])
    result = LogCleaner().clean_now(lg)
    assert result.stats.empty_batches_kept == 2
    hs = [h for h, _, _ in batches(lg)]
    empty5 = next(h for h in hs if h.producer_id == 5)
    assert (empty5.base_offset, empty5.last_offset_delta, empty5.record_count) == (0, 1, 0)
    assert (empty5.producer_epoch, empty5.base_sequence, empty5.last_sequence) == (3, 0, 1)
    assert [h.base_offset for h in hs if h.producer_id == 6] == [3]  # pid 6's first batch is gone
    assert all(h.record_count == 0 for h in hs if h.producer_id in (5, 6))
    # producer state rebuilt from the log alone (no snapshot) still knows both producers
    lg.close()
    for name in os.listdir(log_dir):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(log_dir, name))
    lg2 = open_log(log_dir)
    p5, p6 = lg2.producer_state.producers[5], lg2.producer_state.producers[6]
    assert (p5.producer_epoch, p5.last_seq, p6.last_seq) == (3, 1, 1)
    assert lg2.producer_state.check(rb.parse_header(rb.build_batch(
        [(b"x", b"3")], producer_id=5, producer_epoch=3, base_sequence=2))) is None


def test_last_control_batch_of_producer_without_data_is_retained(log_dir):
    clock = Clock()
    cleaner = LogCleaner(time_ms=clock)
    lg = open_log(log_dir, delete_retention_ms=0)
    append(lg, [(b"a", b"x")], pid=4, epoch=0, seq=0, txn=True)
    marker(lg, 4, 1, rb.CONTROL_ABORT)  # coordinator bumped the epoch: no data batch in epoch 1
    append(lg, [(b"a", b"y")])
    lg.roll()
    append(lg, [(b"z", b"z")])
    assert lg.producer_state.producers[4].batches == type(lg.producer_state.producers[4].batches)()
    for _ in range(4):
        cleaner.clean_now(lg)
        clock.t += 1
    hs = [h for h, _, _ in batches(lg)]
    ctrl = [h for h in hs if h.producer_id == 4]
    assert len(ctrl) == 1 and ctrl[0].is_control and ctrl[0].producer_epoch == 1
    assert ctrl[0].record_count == 0  # emptied, but kept for the producer's epoch


# --- codecs ------------------------------------------------------------------------------------

CODECS = [("gzip", rb.COMPRESSION_GZIP, False), ("snappy", rb.COMPRESSION_SNAPPY, False),
          ("snappy-xerial", rb.COMPRESSION_SNAPPY, True), ("lz4", rb.COMPRESSION_LZ4, False),
          ("zstd", rb.COMPRESSION_ZSTD, False)]


@pytest.mark.parametrize("name,codec,xerial", CODECS, ids=[c[0] for c in CODECS])
def test_compressed_batches_are_cleaned_with_the_same_codec(log_dir, name, codec, xerial):
    lg = open_log(log_dir)
    big = b"payload-" * 2000  # > 64 KiB per batch: several lz4 blocks / xerial blocks
    append(lg, [(b"k%02d" % i, b"a%d" % i + big) for i in range(20)], codec=codec, xerial=xerial)
    append(lg, [(b"k%02d" % i, b"b%d" % i) for i in range(10)], codec=codec, xerial=xerial)
    append(lg, [(b"k05", None)], codec=codec, xerial=xerial)
    lg.roll()
    append(lg, [(b"z", b"z")])
    LogCleaner().clean_now(lg)
    (h0, r0, raw0), (h1, r1, _), (h2, r2, _), _ = batches(lg)
    for h in (h0, h1, h2):
        assert h.compression == codec
    assert (h0.record_count, h0.last_offset_delta) == (10, 19)
    assert [(r.key, r.value) for r in r0] == [(b"k%02d" % i, b"a%d" % i + big) for i in range(10, 20)]
    assert [r.key for r in r1] == [b"k%02d" % i for i in range(10) if i != 5]
    assert (h1.base_offset, h1.last_offset_delta) == (20, 9)
    assert h2.attributes & rb.ATTR_DELETE_HORIZON and r2[0].value is None
    body = raw0[rb.HEADER_SIZE:]
    if xerial:
        assert body[:8] == b"\x82SNAPPY\x00"
    elif codec == rb.COMPRESSION_SNAPPY:
        assert body[:8] != b"\x82SNAPPY\x00"
    if codec == rb.COMPRESSION_LZ4:
        import lz4.frame

        assert len(lz4.frame.decompress(body)) > 64 * 1024


# --- crash safety --------------------------------------------------------------------------------

def _three_segments(log_dir) -> Log:
    lg = open_log(log_dir)
    for rnd in range(3):
        for k in range(8):
            append(lg, [(b"k%d" % k, b"r%d" % rnd)])
        lg.roll()
    append(lg, [(b"z", b"z")])
    return lg


def test_crash_after_writing_cleaned_files_leaves_the_old_log(log_dir):
    lg = _three_segments(log_dir)
    before = records(lg)
    cleaner = LogCleaner()
    job = cleaner.prepare(lg, force=True)
    result = cleaner.clean(job)
    assert any(n.endswith(".log.cleaned") for n in os.listdir(log_dir))
    lg.close(clean=False)  # crash: the swap never happens
    lg2 = open_log(log_dir)
    assert records(lg2) == before
    assert stray_files(log_dir) == []
    assert cleaner.clean_now(lg2) is not None  # and it can be cleaned afterwards
    assert len(records(lg2)) == 9
    del result


def test_crash_during_commit_before_the_log_rename_leaves_the_old_log(log_dir):
    lg = _three_segments(log_dir)
    before = records(lg)
    cleaner = LogCleaner()
    job = cleaner.prepare(lg, force=True)
    (g,) = cleaner.clean(job).groups
    os.rename(g.name(".timeindex", ".cleaned"), g.name(".timeindex", ".swap"))
    os.rename(g.name(".index", ".cleaned"), g.name(".index", ".swap"))
    lg.close(clean=False)
    lg2 = open_log(log_dir)
    assert records(lg2) == before and stray_files(log_dir) == []


@pytest.mark.parametrize("removed", [0, 1, 2])
def test_crash_after_commit_completes_the_swap_on_load(log_dir, removed):
    lg = _three_segments(log_dir)
    expected = latest(records(lg)[:-1])
    cleaner = LogCleaner()
    job = cleaner.prepare(lg, force=True)
    (g,) = cleaner.clean(job).groups
    assert [r.base_offset for r in g.refs] == [0, 8, 16]
    cl.commit_group(g)
    for ref in g.refs[1 : 1 + removed]:  # crash part-way through removing the old segments
        for suffix in (".index", ".timeindex", ".log"):
            os.unlink(os.path.join(log_dir, f"{ref.base_offset:020d}{suffix}"))
    g.out.close()
    lg.close(clean=False)
    lg2 = open_log(log_dir)
    assert stray_files(log_dir) == []
    assert lg2.base_offsets == [0, 24]
    recs = records(lg2)
    assert {k: (o, v) for o, k, v in recs[:-1]} == expected and len(recs) == 9
    assert lg2.log_end_offset == 25
    lg2.append_as_follower(bytes(rb.build_batch([(b"n", b"n")], base_offset=25)))
    assert records(lg2)[-1] == (25, b"n", b"n")


def test_swap_is_skipped_when_segments_changed_meanwhile(log_dir):
    lg = _three_segments(log_dir)
    before = records(lg)
    cleaner = LogCleaner()
    job = cleaner.prepare(lg, force=True)
    result = cleaner.clean(job)
    lg.delete_records_before(10)  # removes segment 0 of the (single) group meanwhile
    assert not cleaner.swap(lg, job, result)
    assert stray_files(log_dir) == []
    assert records(lg) == [r for r in before if r[0] >= 8]
    assert cleaner.first_dirty_offset(lg) == lg.log_start_offset


def test_groups_whose_segments_were_deleted_are_dropped_others_swapped(log_dir):
    lg = open_log(log_dir, segment_bytes=400)
    for rnd in range(4):
        for k in range(8):
            append(lg, [(b"k%d" % k, b"r%d" % rnd)])
    append(lg, [(b"z", b"z")])
    cleaner = LogCleaner()
    job = cleaner.prepare(lg, force=True)
    result = cleaner.clean(job)
    assert len(result.groups) >= 2
    second = result.groups[1].base_offset
    lg.delete_records_before(second)  # every segment of the first group goes
    assert lg.segments[0].base_offset == second
    expected = latest(records(lg))
    assert cleaner.swap(lg, job, result)
    assert stray_files(log_dir) == []
    after = records(lg)
    assert latest(after) == expected and len(after) == len(expected)
    assert cleaner.first_dirty_offset(lg) == job.end


def test_cancelled_cleaning_removes_its_files(log_dir):
    lg = _three_segments(log_dir)
    cleaner = LogCleaner()
    job = cleaner.prepare(lg, force=True)
    job.cancel.set()
    with pytest.raises(cl.CleanerAborted):
        cleaner.clean(job)
    assert stray_files(log_dir) == []


# --- scale, map budget, scheduling ---------------------------------------------------------------

def _big_log(log_dir, n_records=20_000, n_keys=500, seed=7) -> tuple[Log, dict]:
    rng = random.Random(seed)
    lg = open_log(log_dir, segment_bytes=64 * 1024)
    expected = {}
    for b in range(n_records // 10):
        recs = []
        for i in range(10):
            k = b"key-%04d" % rng.randrange(n_keys)
            v = None if rng.random() < 0.02 else b"value-%d-%d" % (b, i)
            recs.append((k, v))
        base = append(lg, recs, codec=rb.COMPRESSION_LZ4 if b % 3 == 0 else 0)
        for i, (k, v) in enumerate(recs):
            expected[k] = (base + i, v)
    lg.roll()
    append(lg, [(b"tail", b"t")])
    return lg, expected


def test_large_log_is_cleaned_correctly(log_dir):
    lg, expected = _big_log(log_dir)
    segments_before = len(lg.segments)
    assert segments_before > 10
    cleaner = LogCleaner()
    result = cleaner.clean_now(lg)
    recs = records(lg)
    assert recs[-1] == (20_000, b"tail", b"t")
    assert {k: (o, v) for o, k, v in recs[:-1]} == expected
    assert len(recs) - 1 == len(expected) == 500
    assert result.stats.records_read == 20_000 and result.stats.records_written == 500
    assert len(lg.segments) <= 3 and all(s.size <= 64 * 1024 for s in lg.segments)  # merged
    assert cleaner.clean_now(lg).stats.records_removed == 0
    assert len(lg.segments) == 2 and records(lg) == recs
    lg.close()
    lg2 = open_log(log_dir)
    assert records(lg2) == recs


def test_small_offset_map_converges_over_several_cleanings(log_dir):
    lg, expected = _big_log(log_dir, n_records=5_000, n_keys=200)
    cleaner = LogCleaner(dedupe_buffer_bytes=5_000)
    ends = []
    for _ in range(30):
        if cleaner.clean_now(lg) is None:
            break
        ends.append(cleaner.first_dirty_offset(lg))
        if ends[-1] == lg.active_segment.base_offset:
            break
    assert len(ends) > 1 and ends == sorted(ends)
    cleaner.clean_now(lg)
    recs = records(lg)
    assert {k: (o, v) for o, k, v in recs[:-1]} == expected


def test_dirty_ratio_and_compaction_lag(log_dir):
    clock = Clock(NOW + 1_000)
    cleaner = LogCleaner(time_ms=clock)
    lg = open_log(log_dir, min_cleanable_dirty_ratio=0.5, min_compaction_lag_ms=5_000)
    for k in range(20):
        append(lg, [(b"k%d" % (k % 5), b"v")])
    lg.roll()
    append(lg, [(b"z", b"z")])
    assert cleaner.prepare(lg, force=True) is None  # all records younger than the lag
    clock.t = NOW + 10_000
    assert cleaner.dirty_ratio(lg) == 1.0
    assert cleaner.clean_now(lg, force=False) is not None
    assert cleaner.dirty_ratio(lg) == 0.0
    # a little new dirty data: below the ratio, not due
    append(lg, [(b"k0", b"w")])
    lg.roll()
    append(lg, [(b"z2", b"z")])
    assert 0 < cleaner.dirty_ratio(lg) < 0.5
    assert cleaner.prepare(lg) is None


def test_clean_pass_runs_in_a_thread_and_swaps_on_the_loop(log_dir, tmp_path):
    lg = _three_segments(log_dir)
    other = open_log(str(tmp_path / "d-0"), cleanup_policy="delete")
    for _ in range(4):
        append(other, [(b"k", b"v")])
    other.roll()
    cleaner = LogCleaner(segment_close_delay_s=0.01)
    logs = {("t", 0): lg, ("d", 0): other}

    async def run():
        first = await cleaner.clean_pass(logs)
        second = await cleaner.clean_pass(logs)
        await asyncio.sleep(0.05)
        return first, second

    assert asyncio.run(run()) == (1, 0)
    assert len(records(lg)) == 9 and len(records(other)) == 4
    assert stray_files(log_dir) == []


def test_complete_interrupted_swaps_ignores_uncommitted_files(log_dir):
    os.makedirs(log_dir)
    with open(os.path.join(log_dir, f"{0:020d}.index.swap"), "wb"):
        pass
    assert cl.complete_interrupted_swaps(log_dir) == []
    assert cl.complete_interrupted_swaps(os.path.join(log_dir, "missing")) == []
