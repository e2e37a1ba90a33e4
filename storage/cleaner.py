"""Log compaction (``cleanup.policy=compact``), transaction-aware, as Kafka's LogCleaner does it.

One cleaning of one log runs in three steps:

1. :meth:`LogCleaner.prepare` (event-loop thread, cheap). The cleanable range is the prefix of
   non-active segments lying wholly below the *first uncleanable offset*: the minimum of the
   active segment's base offset, the high watermark, the last stable offset (the smallest
   ``current_txn_first_offset`` of any producer with an open transaction) and, with
   ``min.compaction.lag.ms``, the base offset of the first dirty segment holding a record
   younger than the lag. The dirty section starts at the cleaner checkpoint
   (``cleaner-offset-checkpoint`` in the partition directory). The log is due when
   dirty / (clean + dirty) bytes >= ``min.cleanable.dirty.ratio`` or when a delete horizon
   written by an earlier cleaning has passed (Kafka's low-throughput tombstone rule).
   Captures the segments (object, size, next offset) and each active producer's last batch.

2. :meth:`LogCleaner.clean` (worker thread; the only place that decompresses records):

   a. walk the batch headers (and the control records) from the log start, on past the range
      until every transaction begun in it is resolved, giving each producer's transactions
      as ``[first offset, marker offset) -> aborted | committed`` (Kafka reads this from its
      transaction index);
   b. build ``key -> latest offset`` over the dirty section, skipping aborted and control
      batches; the map is bounded by ``dedupe_buffer_bytes`` at segment granularity (what does
      not fit is left for the next cleaning);
   c. rewrite every segment of the range (clean section too, like Kafka), grouped so that each
      output stays under ``segment.bytes`` (a segment joins the current output if the output so
      far plus its own size fits), into ``<base>.log.cleaned`` (+ ``.index.cleaned``,
      ``.timeindex.cleaned``) made by the same :class:`Segment` code. Per batch, Kafka's rules:

      * a record is kept if it is the latest for its key; a tombstone (null value) also only
        until the batch's delete horizon. A batch that keeps a tombstone and has no horizon yet
        gets one: attribute bit ``ATTR_DELETE_HORIZON`` (0x40) and ``baseTimestamp`` = now +
        ``delete.retention.ms``, record timestamp deltas relative to it (record timestamps are
        unchanged). Records without a key are dropped (Kafka counts them as invalid);
      * a data batch of an aborted transaction is dropped;
      * a COMMIT/ABORT marker whose transaction has no data batch left in the log may be
        removed: it first gets a delete horizon, and goes at the first cleaning after it;
      * the batch holding a producer's last data offset (or, if the producer has no data
        batch, its last control batch of the current epoch) is kept, as an empty batch (record
        count 0, same offsets, producer id/epoch, base sequence) if all its records go, so
        that producer state (epoch, sequences) survives; Kafka's ``RETAIN_EMPTY``;
      * a batch whose records all stay and needs no horizon is copied byte for byte; otherwise
        it is rebuilt with its base offset, last offset delta (hence last sequence), producer
        id/epoch, base sequence, partition leader epoch, transactional/control/LogAppendTime
        bits and compression codec (re-compressed with the same codec; snappy keeps the xerial
        framing if the source had it; lz4 is written with independent blocks, as Kafka's
        KafkaLZ4BlockInputStream needs). Empty kept batches are uncompressed, as in Kafka.

3. :meth:`LogCleaner.swap` (event-loop thread): only groups whose segments are all still in the
   log, contiguous, unchanged (size, next offset) and not active are swapped, in ascending
   order; a group whose segments retention/DeleteRecords removed altogether is dropped, and
   the first group that changed otherwise stops the swap. Crash-safe protocol per group
   (old segments ``b0..bn`` become one segment ``b0``):

   * ``b0.{timeindex,index,log}.cleaned`` are written and fsynced (step 2). A crash now leaves
     the old segments; ``Log._load`` deletes the ``.cleaned`` files.
   * commit: rename ``.timeindex.cleaned``/``.index.cleaned`` to ``.swap``, then
     ``b0.log.cleaned`` to ``b0.log.swap`` (the commit point), fsync the directory.
   * unlink the files of ``b1..bn``, rename the ``.swap`` files over ``b0``'s, ``.log`` last.
   * after a crash between the commit and the end, :func:`complete_interrupted_swaps` (called by
     ``Log._load`` before it deletes stray files) finishes the swap: it deletes the segments
     whose base offset falls inside the swapped segment's offset range and renames
     ``b0.log.swap`` to ``b0.log`` (dropping the index files so that they are rebuilt). So a
     crash leaves either the old segments or the new one, never a mix within a group; across
     groups, cleaned groups followed by uncleaned ones, which is a consistent log because a
     record is only ever removed for the sake of a later offset (swapping in ascending order
     never leaves a value whose tombstone is gone).

   The replaced segments' file descriptors are closed after a delay (like Kafka's
   ``file.delete.delay.ms``) because a group-commit fsync thread may still hold them.
   The checkpoint moves to the end of the cleaned range once every group is in.

Differs from Kafka: the offset map holds the keys themselves (a dict) instead of MD5 digests in a
fixed buffer; there is no transaction index (step 2a walks the log); the checkpoint is one file
per partition; no I/O throttling (``log.cleaner.io.max.bytes.per.second``); one log at a time.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from protocol import records as rb

from .segment import Segment, segment_name

if TYPE_CHECKING:
    from .log import Log

log = structlog.get_logger("storage.cleaner")

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
# Index files move before the .log file: the rename of the .log file is the commit point.
SEGMENT_SUFFIXES = (".timeindex", ".index", ".log")
DEFAULT_DEDUPE_BUFFER_BYTES = 128 << 20
MAP_ENTRY_OVERHEAD = 100  # rough bytes a dict entry costs besides its key
SEGMENT_CLOSE_DELAY_S = 60.0
READ_CHUNK = 1 << 20
YIELD_EVERY_S = 0.001  # see _Files._maybe_yield

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1

COMMITTED, ABORTED, UNRESOLVED = "committed", "aborted", "unresolved"

_HEADER = struct.Struct(">qiibIhiqqqhii")
_U32 = struct.Struct(">I")
_KEPT_ATTRIBUTES = rb.ATTR_LOG_APPEND_TIME | rb.ATTR_TRANSACTIONAL | rb.ATTR_CONTROL
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


class CleanerError(Exception):
    """The log cannot be cleaned (corrupt data): it is marked uncleanable, as Kafka does."""


class CleanerAborted(Exception):
    """This cleaning was given up (cancelled, or a segment vanished); nothing is wrong."""


# --- job description (built on the loop thread) ----------------------------------------------

@dataclass(slots=True)
class SegmentRef:
    """A segment as it was when the cleaning was prepared."""
    segment: Segment
    base_offset: int
    size: int
    next_offset: int
    path: str
    map_start: int = 0  # file position where the dirty section starts in this segment


@dataclass(slots=True)
class CleanJob:
    topic: str
    partition: int
    dir: str
    now_ms: int
    first_dirty: int
    end: int  # first offset not cleaned: base offset of the first segment left alone
    segments: list[SegmentRef]  # the cleanable prefix
    beyond: list[SegmentRef]  # the rest, read only to resolve transactions
    high_watermark: int
    last_batches: dict[int, tuple[int | None, int]]  # pid -> (last data offset, epoch)
    segment_bytes: int
    index_interval: int
    delete_retention_ms: int
    dirty_ratio: float
    dedupe_buffer_bytes: int
    cancel: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class CleanerStats:
    batches_read: int = 0
    batches_written: int = 0
    records_read: int = 0
    records_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    superseded: int = 0
    tombstones_removed: int = 0
    aborted_removed: int = 0
    keyless_removed: int = 0
    markers_removed: int = 0
    empty_batches_kept: int = 0
    horizons_set: int = 0
    map_keys: int = 0

    @property
    def records_removed(self) -> int:
        return self.records_read - self.records_written


class _CleanedSegment(Segment):
    """A segment written under ``<base>.<suffix>.cleaned`` names."""
    __slots__ = ()

    def path(self, suffix: str) -> str:
        return os.path.join(self.dir, segment_name(self.base_offset, suffix + CLEANED_SUFFIX))

    @classmethod
    def create(cls, directory: str, base_offset: int, index_interval: int) -> _CleanedSegment:
        for suffix in SEGMENT_SUFFIXES:
            _unlink(os.path.join(directory, segment_name(base_offset, suffix + CLEANED_SUFFIX)))
        return cls(directory, base_offset, index_interval)


@dataclass(slots=True)
class CleanedGroup:
    refs: list[SegmentRef]
    out: _CleanedSegment

    @property
    def base_offset(self) -> int:
        return self.refs[0].base_offset

    def name(self, suffix: str, state: str = "") -> str:
        return os.path.join(self.out.dir, segment_name(self.base_offset, suffix + state))

    def discard(self) -> None:
        self.out.close()
        for suffix in SEGMENT_SUFFIXES:
            _unlink(self.name(suffix, CLEANED_SUFFIX))


@dataclass(slots=True)
class CleanResult:
    groups: list[CleanedGroup]
    end: int  # the new checkpoint once every group is in
    stats: CleanerStats
    min_horizon: int | None  # earliest delete horizon still to pass among the kept batches
    seconds: float

    def discard(self) -> None:
        for g in self.groups:
            g.discard()


@dataclass(slots=True)
class _Plan:
    first_dirty: int
    count: int  # cleanable segments (a prefix of log.segments)
    clean_bytes: int
    dirty_bytes: int
    due: bool

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


# --- the cleaner -------------------------------------------------------------------------------

class LogCleaner:
    """Compacts logs; one instance per broker. Not thread-safe: one cleaning at a time."""

    def __init__(self, time_ms: Callable[[], int] | None = None,
                 dedupe_buffer_bytes: int = DEFAULT_DEDUPE_BUFFER_BYTES,
                 segment_close_delay_s: float = SEGMENT_CLOSE_DELAY_S) -> None:
        self.time_ms = time_ms or (lambda: int(time.time() * 1000))
        self.dedupe_buffer_bytes = dedupe_buffer_bytes
        self.segment_close_delay_s = segment_close_delay_s
        self.uncleanable: set[str] = set()

    # --- checkpoint ----------------------------------------------------------------------------

    def checkpoint(self, lg: Log) -> tuple[int, int | None]:
        """(first dirty offset as last written, earliest pending delete horizon or None)."""
        return read_checkpoint(lg.dir)

    def first_dirty_offset(self, lg: Log, offset: int | None = None) -> int:
        """The checkpoint, unless it no longer fits the log (then the log start offset)."""
        if offset is None:
            offset, _ = self.checkpoint(lg)
        if (offset < lg.log_start_offset or offset > lg.active_segment.base_offset
                or offset not in lg.base_offsets):
            return lg.log_start_offset
        return offset

    # --- planning (loop thread) ------------------------------------------------------------------

    def _plan(self, lg: Log, now: int) -> _Plan | None:
        cfg = lg.config
        if not cfg.compact or lg.dir in self.uncleanable or len(lg.segments) < 2:
            return None
        segs = lg.segments
        checkpoint, horizon = self.checkpoint(lg)
        first_dirty = self.first_dirty_offset(lg, checkpoint)
        limit = min(segs[-1].base_offset, lg.high_watermark)
        open_txns = [e.current_txn_first_offset for e in lg.producer_state.producers.values()
                     if e.current_txn_first_offset >= 0]
        if open_txns:
            limit = min(limit, min(open_txns))
        if cfg.min_compaction_lag_ms > 0:
            for s in segs[:-1]:
                if s.next_offset > first_dirty and s.max_timestamp > now - cfg.min_compaction_lag_ms:
                    limit = min(limit, s.base_offset)
                    break
        count = 0
        while count < len(segs) - 1 and segs[count].next_offset <= limit:
            count += 1
        if count == 0:
            return None
        clean_bytes = dirty_bytes = 0
        for s in segs[:count]:
            if s.next_offset > first_dirty:
                dirty_bytes += s.size
            else:
                clean_bytes += s.size
        plan = _Plan(first_dirty, count, clean_bytes, dirty_bytes, False)
        plan.due = ((dirty_bytes > 0 and plan.ratio >= cfg.min_cleanable_dirty_ratio)
                    or (horizon is not None and horizon <= now)
                    or self._max_lag_exceeded(segs[:count], first_dirty, cfg, now))
        return plan

    @staticmethod
    def _max_lag_exceeded(segs, first_dirty: int, cfg, now: int) -> bool:
        """max.compaction.lag.ms: a log whose oldest dirty record is older than the lag is cleaned
        whatever its dirty ratio (Kafka's LogCleanerManager), judged by the first dirty segment's
        first time-index entry (the first batch's timestamp)."""
        if cfg.max_compaction_lag_ms >= (1 << 63) - 1:
            return False
        dirty = next((seg for seg in segs if seg.next_offset > first_dirty), None)
        if dirty is None:
            return False
        first_ts = dirty.time_stamps[0] if dirty.time_stamps else dirty.max_timestamp
        return 0 <= first_ts <= now - cfg.max_compaction_lag_ms

    def dirty_ratio(self, lg: Log) -> float:
        plan = self._plan(lg, self.time_ms())
        return plan.ratio if plan else 0.0

    def prepare(self, lg: Log, force: bool = False) -> CleanJob | None:
        """Describe the next cleaning of ``lg``, or None if it is not due (``force``: if possible)."""
        now = self.time_ms()
        plan = self._plan(lg, now)
        if plan is None or not (plan.due or force):
            return None
        cfg = lg.config
        refs = []
        for s in lg.segments:
            ref = SegmentRef(s, s.base_offset, s.size, s.next_offset, s.path(".log"))
            if s.base_offset <= plan.first_dirty < s.next_offset:
                ref.map_start = s.position_for(plan.first_dirty)
            refs.append(ref)
        last_batches = {pid: (e.batches[-1].last_offset if e.batches else None, e.producer_epoch)
                        for pid, e in lg.producer_state.producers.items()}
        return CleanJob(
            topic=lg.topic, partition=lg.partition, dir=lg.dir, now_ms=now,
            first_dirty=plan.first_dirty, end=refs[plan.count].base_offset,
            segments=refs[: plan.count], beyond=refs[plan.count :],
            high_watermark=lg.high_watermark, last_batches=last_batches,
            segment_bytes=cfg.segment_bytes, index_interval=cfg.index_interval_bytes,
            delete_retention_ms=cfg.delete_retention_ms, dirty_ratio=plan.ratio,
            dedupe_buffer_bytes=self.dedupe_buffer_bytes)

    # --- cleaning (worker thread) ------------------------------------------------------------------

    def clean(self, job: CleanJob) -> CleanResult:
        """Write the cleaned groups of ``job``; touches nothing the log owns but reads its files."""
        started = time.monotonic()
        files = _Files(job.cancel)
        groups: list[CleanedGroup] = []
        try:
            fates = _walk_transactions(job, files)
            key_map, count = _build_offset_map(job, files, fates)
            refs = job.segments[:count]
            end = job.segments[count].base_offset if count < len(job.segments) else job.end
            filt = _BatchFilter(job, fates, key_map)
            for ref in refs:
                if not groups or not _fits(groups[-1], ref, job.segment_bytes):
                    if groups:
                        groups[-1].out.flush()
                    out = _CleanedSegment.create(job.dir, ref.base_offset, job.index_interval)
                    groups.append(CleanedGroup([ref], out))
                else:
                    groups[-1].refs.append(ref)
                out = groups[-1].out
                for h, buf, rel in files.scan(ref, strict=True):
                    data, max_ts = filt.filter(h, buf, rel)
                    if data is not None:
                        out.append(data, h.base_offset, h.next_offset, max_ts, h.base_offset)
                        filt.stats.bytes_written += len(data)
            if groups:
                groups[-1].out.flush()
            return CleanResult(groups, end, filt.stats, filt.min_horizon, time.monotonic() - started)
        except BaseException:
            for g in groups:
                g.discard()
            raise
        finally:
            files.close()

    # --- swapping (loop thread) ------------------------------------------------------------------

    def swap(self, lg: Log, job: CleanJob, result: CleanResult) -> bool:
        """Put the cleaned groups in place of the segments they came from, if still there."""
        segs = lg.segments
        position = {id(s): i for i, s in enumerate(segs)}
        ready: list[CleanedGroup] = []
        dropped: list[CleanedGroup] = []
        complete = True
        for gi, g in enumerate(result.groups):
            idx = [position.get(id(r.segment)) for r in g.refs]
            if all(i is None for i in idx):  # removed by retention / DeleteRecords meanwhile
                dropped.append(g)
                continue
            if (None in idx or idx != list(range(idx[0], idx[0] + len(idx)))
                    or idx[-1] >= len(segs) - 1
                    or any(r.segment.size != r.size or r.segment.next_offset != r.next_offset
                           for r in g.refs)):
                dropped.extend(result.groups[gi:])
                complete = False
                break
            ready.append(g)
        for g in dropped:
            g.discard()
        if not ready:
            log.info("log_cleaning_discarded", topic=job.topic, partition=job.partition,
                     reason="segments changed during cleaning")
            return False
        try:
            for g in ready:
                commit_group(g)
            _fsync_dir(lg.dir)
            for g in ready:
                remove_replaced_files(g)
                new = finish_group(g)
                old = [r.segment for r in g.refs]
                lg.replace_segments(old, [new])
                self._retire(old)
        except OSError:
            log.exception("log_cleaner_swap_failed", topic=job.topic, partition=job.partition)
            self.uncleanable.add(lg.dir)
            for g in ready:
                if os.path.exists(g.name(".log", CLEANED_SUFFIX)):
                    g.discard()
            return False
        if complete:
            write_checkpoint(lg.dir, result.end, result.min_horizon)
        st = result.stats
        log.info("log_cleaned", topic=job.topic, partition=job.partition,
                 bytes_before=sum(r.size for g in ready for r in g.refs),
                 bytes_after=sum(g.out.size for g in ready),
                 records_removed=st.records_removed, records_kept=st.records_written,
                 superseded=st.superseded, tombstones_removed=st.tombstones_removed,
                 aborted_removed=st.aborted_removed, markers_removed=st.markers_removed,
                 keyless_removed=st.keyless_removed, horizons_set=st.horizons_set,
                 segments_before=sum(len(g.refs) for g in ready), segments_after=len(ready),
                 first_dirty=job.first_dirty, end=result.end, dirty_ratio=round(job.dirty_ratio, 3),
                 map_keys=st.map_keys, complete=complete,
                 clean_ms=round(result.seconds * 1000, 1),
                 duration_ms=round((time.monotonic() - job.started) * 1000, 1))
        return True

    def _retire(self, segments: list[Segment]) -> None:
        """Close replaced segments later: a flush thread may still be fsyncing them."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or self.segment_close_delay_s <= 0:
            for s in segments:
                s.close()
        else:
            loop.call_later(self.segment_close_delay_s, _close_all, segments)

    # --- drivers -----------------------------------------------------------------------------------

    def clean_now(self, lg: Log, force: bool = True) -> CleanResult | None:
        """prepare + clean + swap in the calling thread (tests, tools). None if nothing to do."""
        job = self.prepare(lg, force=force)
        if job is None:
            return None
        result = self.clean(job)
        return result if self.swap(lg, job, result) else None

    async def clean_pass(self, logs: Mapping[object, Log]) -> int:
        """Clean every compacted log that is due, filthiest first; returns how many were cleaned.

        The heavy part runs in a worker thread; the swap happens here, on the loop thread, and
        only if the log is still the one in ``logs``.
        """
        now = self.time_ms()
        due = []
        for key, lg in list(logs.items()):
            plan = self._plan(lg, now)
            if plan is not None and plan.due:
                due.append((plan.ratio, key))
        due.sort(key=lambda item: item[0], reverse=True)
        cleaned = 0
        for _, key in due:
            lg = logs.get(key)
            if lg is None:
                continue
            job = self.prepare(lg)
            if job is None:
                continue
            try:
                result = await asyncio.to_thread(self.clean, job)
            except asyncio.CancelledError:
                job.cancel.set()  # the thread stops at its next chunk and removes its files
                raise
            except CleanerAborted as exc:
                log.info("log_cleaning_aborted", topic=lg.topic, partition=lg.partition, reason=str(exc))
                continue
            except Exception:
                log.exception("log_cleaner_failed", topic=lg.topic, partition=lg.partition)
                self.uncleanable.add(lg.dir)
                continue
            if logs.get(key) is not lg:  # deleted or reopened meanwhile
                result.discard()
                continue
            if self.swap(lg, job, result):
                cleaned += 1
        return cleaned


# --- step 2a: transactions ---------------------------------------------------------------------

class _TxnFates:
    """Per producer id: its transactions as [first offset, marker offset) and their outcome."""

    def __init__(self) -> None:
        self.starts: dict[int, list[int]] = {}
        self.spans: dict[int, list[tuple[int, int, str]]] = {}

    def add(self, pid: int, first: int, end: int, fate: str) -> None:
        self.starts.setdefault(pid, []).append(first)
        self.spans.setdefault(pid, []).append((first, end, fate))

    def fate(self, pid: int, offset: int) -> str:
        starts = self.starts.get(pid)
        if starts:
            i = bisect.bisect_right(starts, offset) - 1
            if i >= 0:
                _, end, fate = self.spans[pid][i]
                if offset < end:
                    return fate
        return COMMITTED  # not seen as part of a transaction: nothing to drop


def _control_type(records: list[rb.Record]) -> int | None:
    """ABORT (0) / COMMIT (1) / other of a control batch; None for an emptied one."""
    if not records:
        return None
    key = records[0].key
    if key is None or len(key) < 4:
        return -1
    return struct.unpack_from(">h", key, 2)[0]


def _decode(buf, rel: int) -> list[rb.Record]:
    try:
        return rb.decode_records(buf, rel)[1]
    except rb.CorruptRecord as exc:
        raise CleanerError(f"cannot decode batch: {exc}") from exc


def _walk_transactions(job: CleanJob, files: _Files) -> _TxnFates:
    fates = _TxnFates()
    open_txns: dict[int, int] = {}
    pending = 0  # open transactions that began below job.end
    done = False
    for ref in job.segments + job.beyond:
        if done or (ref.base_offset >= job.end and pending == 0):
            break
        for h, buf, rel in files.scan(ref, strict=ref.base_offset < job.end):
            if h.base_offset >= job.high_watermark or (h.base_offset >= job.end and pending == 0):
                done = True
                break
            pid = h.producer_id
            if pid == rb.NO_PRODUCER_ID:
                continue
            if h.is_control:
                ctype = _control_type(_decode(buf, rel))
                if ctype not in (rb.CONTROL_ABORT, rb.CONTROL_COMMIT, None):
                    continue
                first = open_txns.pop(pid, None)
                if first is not None:
                    if first < job.end:
                        pending -= 1
                    fates.add(pid, first, h.base_offset, ABORTED if ctype == rb.CONTROL_ABORT else COMMITTED)
            elif h.is_transactional and pid not in open_txns:
                open_txns[pid] = h.base_offset
                if h.base_offset < job.end:
                    pending += 1
    for pid, first in open_txns.items():  # no marker below the high watermark: keep, don't index
        fates.add(pid, first, INT64_MAX, UNRESOLVED)
    return fates


# --- step 2b: the offset map -----------------------------------------------------------------------

def _build_offset_map(job: CleanJob, files: _Files, fates: _TxnFates) -> tuple[dict[bytes, int], int]:
    """key -> latest offset over the dirty section; returns it and how many segments to clean."""
    key_map: dict[bytes, int] = {}
    cost = 0
    first_dirty = job.first_dirty
    count = len(job.segments)
    for i, ref in enumerate(job.segments):
        if ref.next_offset <= first_dirty:
            continue
        for h, buf, rel in files.scan(ref, ref.map_start, strict=True):
            if h.last_offset < first_dirty or h.is_control or h.record_count == 0:
                continue
            if h.is_transactional and fates.fate(h.producer_id, h.base_offset) != COMMITTED:
                continue
            for r in _decode(buf, rel):
                if r.key is not None and r.offset >= first_dirty:
                    if r.key not in key_map:
                        cost += len(r.key) + MAP_ENTRY_OVERHEAD
                    key_map[r.key] = r.offset
        if cost >= job.dedupe_buffer_bytes and i + 1 < len(job.segments):
            count = i + 1  # full: the rest of the dirty section waits for the next cleaning
            break
    return key_map, count


def _fits(group: CleanedGroup, ref: SegmentRef, max_size: int) -> bool:
    """May ``ref`` be cleaned into ``group``'s output? Kafka groups by the sizes before cleaning;
    we use the output so far plus the next input (cleaning does not grow a segment), so a
    cleaning merges what it shrank. Relative offsets in the index must stay within int32."""
    return (group.out.size + ref.size <= max_size
            and (ref.size == 0 or ref.next_offset - 1 - group.base_offset <= INT32_MAX))


# --- step 2c: filtering one batch ---------------------------------------------------------------

class _BatchFilter:
    def __init__(self, job: CleanJob, fates: _TxnFates, key_map: dict[bytes, int]) -> None:
        self.now = job.now_ms
        self.new_horizon = min(job.now_ms + job.delete_retention_ms, INT64_MAX)
        self.fates = fates
        self.key_map = key_map
        self.last_batches = job.last_batches
        self.observed: set[int] = set()  # producers with a data batch seen in their current txn
        self.stats = CleanerStats(map_keys=len(key_map))
        self.min_horizon: int | None = None

    def _is_last_of_producer(self, h: rb.BatchHeader) -> bool:
        info = self.last_batches.get(h.producer_id)
        if info is None:
            return False
        last_data_offset, epoch = info
        if last_data_offset is not None:
            return h.last_offset == last_data_offset
        return h.is_control and h.producer_epoch == epoch

    def _keep(self, r: rb.Record, horizon: int | None) -> bool:
        st = self.stats
        if r.key is None:
            st.keyless_removed += 1
            return False
        if r.offset < self.key_map.get(r.key, -1):
            st.superseded += 1
            return False
        if r.value is None and horizon is not None and horizon <= self.now:
            st.tombstones_removed += 1
            return False
        return True

    def filter(self, h: rb.BatchHeader, buf, rel: int) -> tuple[bytes | None, int]:
        """The batch to write in place of the one at ``buf[rel:]`` (None: drop) and its max timestamp."""
        st = self.stats
        st.batches_read += 1
        st.records_read += h.record_count
        st.bytes_read += h.size
        try:
            rb.check_batch(buf, rel, rel + h.size)
        except (rb.CorruptRecord, rb.InvalidRecord) as exc:
            raise CleanerError(f"batch at offset {h.base_offset}: {exc}") from exc
        pid = h.producer_id
        horizon = h.base_timestamp if h.attributes & rb.ATTR_DELETE_HORIZON else None
        marker_discardable = False
        records: list[rb.Record] | None = None
        if h.is_control:
            records = _decode(buf, rel)
            ctype = _control_type(records)
            if ctype is None or ctype in (rb.CONTROL_ABORT, rb.CONTROL_COMMIT):
                # Kafka: a marker may go once no batch of its transaction is left.
                marker_discardable = ctype is None or pid not in self.observed
                self.observed.discard(pid)
            discard = marker_discardable and horizon is not None and horizon <= self.now
            fate = COMMITTED
        else:
            fate = COMMITTED
            if h.is_transactional:
                fate = self.fates.fate(pid, h.base_offset)
                self.observed.add(pid)
            discard = fate == ABORTED
        last = pid != rb.NO_PRODUCER_ID and self._is_last_of_producer(h)
        if discard and not last:
            if h.is_control:
                st.markers_removed += 1
            else:
                st.aborted_removed += h.record_count
            return None, 0
        # retained: the records to keep; None = all of them, bytes untouched
        if discard:
            if not h.is_control:
                st.aborted_removed += h.record_count
            retained, changed = [], h.record_count > 0
        elif h.is_control:
            retained, changed = records, False
        elif fate == UNRESOLVED:
            retained, changed = None, False
        else:
            records = _decode(buf, rel)
            retained = [r for r in records if self._keep(r, horizon)]
            changed = len(retained) != len(records)
        pending_delete = retained is not None and (
            (h.is_control and marker_discardable) or
            (not h.is_control and any(r.value is None for r in retained)))
        set_horizon = pending_delete and horizon is None and bool(retained)
        if retained is None or retained:
            if set_horizon:
                horizon = self.new_horizon
                st.horizons_set += 1
            if pending_delete and horizon is not None and horizon > self.now:
                self.min_horizon = horizon if self.min_horizon is None else min(self.min_horizon, horizon)
            st.batches_written += 1
            st.records_written += h.record_count if retained is None else len(retained)
            if not changed and not set_horizon:
                return bytes(buf[rel : rel + h.size]), h.max_timestamp
            return _rebuild_batch(h, retained, horizon, buf, rel)
        if last:
            st.batches_written += 1
            st.empty_batches_kept += 1
            return _empty_batch(h), h.max_timestamp
        return None, 0


# --- batch encoding ----------------------------------------------------------------------------

def _finish_header(buf: bytearray) -> bytes:
    _U32.pack_into(buf, rb.CRC_OFFSET, rb.batch_crc(buf, 0, len(buf)))
    return bytes(buf)


def _rebuild_batch(h: rb.BatchHeader, records: list[rb.Record], horizon: int | None,
                   src, rel: int) -> tuple[bytes, int]:
    """Re-encode ``records`` under ``h``'s identity, same codec; returns (batch, max timestamp)."""
    codec = h.compression
    xerial = (codec == rb.COMPRESSION_SNAPPY
              and bytes(src[rel + rb.HEADER_SIZE : rel + rb.HEADER_SIZE + 8]) == _XERIAL_MAGIC)
    if h.attributes & rb.ATTR_LOG_APPEND_TIME:
        max_ts = h.max_timestamp
    else:
        max_ts = max(r.timestamp for r in records)
    base_ts = horizon if horizon is not None else records[0].timestamp
    body = bytearray()
    for r in records:
        rb.encode_record(body, r.offset - h.base_offset, r.timestamp - base_ts, r.key, r.value, r.headers)
    payload = compress(codec, bytes(body), xerial)
    attributes = (h.attributes & _KEPT_ATTRIBUTES) | codec
    if horizon is not None:
        attributes |= rb.ATTR_DELETE_HORIZON
    buf = bytearray(_HEADER.pack(h.base_offset, rb.HEADER_SIZE - rb.LOG_OVERHEAD + len(payload),
                                 h.partition_leader_epoch, 2, 0, attributes, h.last_offset_delta,
                                 base_ts, max_ts, h.producer_id, h.producer_epoch, h.base_sequence,
                                 len(records)))
    buf += payload
    return _finish_header(buf), max_ts


def _empty_batch(h: rb.BatchHeader) -> bytes:
    """Kafka's writeEmptyHeader: no records, same offsets and producer metadata, no codec."""
    buf = bytearray(_HEADER.pack(h.base_offset, rb.HEADER_SIZE - rb.LOG_OVERHEAD,
                                 h.partition_leader_epoch, 2, 0, h.attributes & _KEPT_ATTRIBUTES,
                                 h.last_offset_delta, h.max_timestamp, h.max_timestamp,
                                 h.producer_id, h.producer_epoch, h.base_sequence, 0))
    return _finish_header(buf)


def compress(codec: int, data: bytes, xerial: bool = False) -> bytes:
    """Compress as Kafka's clients do: xerial-framed snappy on request, lz4 independent blocks."""
    if codec == rb.COMPRESSION_SNAPPY and xerial:
        import cramjam

        out = bytearray(_XERIAL_HEADER)
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == rb.COMPRESSION_LZ4:
        import lz4.frame

        return lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
    return rb.compress(codec, data)


# --- reading segment files from the worker thread --------------------------------------------------

class _Files:
    """Our own read-only descriptors: the log may close or delete its segments meanwhile."""

    def __init__(self, cancel: threading.Event) -> None:
        self.cancel = cancel
        self.fds: dict[str, int] = {}
        self.last_yield = time.monotonic()

    def _maybe_yield(self) -> None:
        """Hand the GIL to the event loop every few ms of pure-Python work: otherwise a waiting
        loop thread waits out the whole switch interval (5 ms) at every wake-up."""
        now = time.monotonic()
        if now - self.last_yield >= YIELD_EVERY_S:
            time.sleep(0)
            self.last_yield = time.monotonic()

    def _fd(self, ref: SegmentRef) -> int:
        fd = self.fds.get(ref.path)
        if fd is None:
            try:
                fd = os.open(ref.path, os.O_RDONLY)
            except FileNotFoundError:
                raise CleanerAborted(f"segment {ref.base_offset} was removed") from None
            self.fds[ref.path] = fd
        return fd

    def scan(self, ref: SegmentRef, start: int = 0, strict: bool = False):
        """Yield (header, buffer, position in buffer) for each batch of ``ref`` from ``start``.

        ``strict``: the segment must parse to exactly its recorded size and next offset.
        """
        fd = self._fd(ref)
        end = ref.size
        pos = start
        last: rb.BatchHeader | None = None
        while pos + rb.HEADER_SIZE <= end:
            if self.cancel.is_set():
                raise CleanerAborted("cancelled")
            chunk = os.pread(fd, min(READ_CHUNK, end - pos), pos)
            consumed = 0
            for rel, h in rb.iter_batches(chunk):
                last = h
                yield h, chunk, rel
                self._maybe_yield()
                consumed = rel + h.size
            if consumed == 0:  # one batch bigger than the chunk
                if len(chunk) < rb.HEADER_SIZE:
                    break
                h = rb.parse_header(chunk)
                if h.batch_length < rb.HEADER_SIZE - rb.LOG_OVERHEAD or pos + h.size > end:
                    break
                data = os.pread(fd, h.size, pos)
                if len(data) < h.size:
                    break
                last = h
                yield h, data, 0
                consumed = h.size
            pos += consumed
        if strict and (pos != end or (last is not None and last.next_offset != ref.next_offset)):
            raise CleanerError(f"segment {ref.base_offset} does not parse to its size "
                               f"({pos} of {end} bytes)")

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


# --- the swap protocol -------------------------------------------------------------------------

def commit_group(g: CleanedGroup) -> None:
    """``.cleaned`` -> ``.swap``; renaming the ``.log`` file last is the commit point."""
    for suffix in SEGMENT_SUFFIXES:
        os.rename(g.name(suffix, CLEANED_SUFFIX), g.name(suffix, SWAP_SUFFIX))


def remove_replaced_files(g: CleanedGroup) -> None:
    """Unlink the group's segments other than the first (whose files the swap overwrites)."""
    for ref in g.refs[1:]:
        for suffix in (".timeindex", ".index", ".txnindex", ".log"):
            _unlink(os.path.join(g.out.dir, segment_name(ref.base_offset, suffix)))


def finish_group(g: CleanedGroup) -> Segment:
    """``.swap`` -> live names (``.log`` last); the written segment becomes a plain Segment."""
    for suffix in SEGMENT_SUFFIXES:
        os.replace(g.name(suffix, SWAP_SUFFIX), g.name(suffix))
    seg = Segment.__new__(Segment)
    for slot in Segment.__slots__:  # same descriptors: a rename does not affect them
        setattr(seg, slot, getattr(g.out, slot))
    seg.dirty = False
    return seg


def complete_interrupted_swaps(directory: str) -> list[int]:
    """Finish the swaps a crash interrupted after their commit point; returns their base offsets.

    For ``<b>.log.swap``: delete every segment whose base offset lies in (b, the swap's next
    offset), then rename the swap to ``<b>.log``. The swapped segment's index files are dropped
    so that ``Log._load`` rebuilds them from the data (which of old/new they are is unknown).
    Index ``.swap`` files without a ``.log.swap`` belong to an uncommitted swap; they, and any
    ``.cleaned`` file, are left for ``Log._load`` to delete.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    done = []
    tail = ".log" + SWAP_SUFFIX
    for name in sorted(names):
        if not name.endswith(tail) or not name[: -len(tail)].isdigit():
            continue
        base = int(name[: -len(tail)])
        swap_path = os.path.join(directory, name)
        next_offset = _next_offset_of_file(swap_path, base)
        for other in names:
            if other.endswith(".log") and other[:-4].isdigit() and base < int(other[:-4]) < next_offset:
                for suffix in (".timeindex", ".index", ".txnindex", ".log"):
                    _unlink(os.path.join(directory, segment_name(int(other[:-4]), suffix)))
        for suffix in (".timeindex", ".index"):
            _unlink(os.path.join(directory, segment_name(base, suffix + SWAP_SUFFIX)))
            _unlink(os.path.join(directory, segment_name(base, suffix)))
        os.replace(swap_path, os.path.join(directory, segment_name(base, ".log")))
        log.warning("cleaner_swap_completed_on_load", dir=directory, base_offset=base,
                    next_offset=next_offset)
        done.append(base)
    if done:
        _fsync_dir(directory)
    return done


def _next_offset_of_file(path: str, base: int) -> int:
    next_offset = base
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        ref = SegmentRef(None, base, size, -1, path)  # type: ignore[arg-type]
        files = _Files(threading.Event())
        files.fds[path] = fd
        for h, _, _ in files.scan(ref):
            next_offset = h.next_offset
    finally:
        os.close(fd)
    return next_offset


# --- small helpers -----------------------------------------------------------------------------

def write_checkpoint(directory: str, offset: int, horizon: int | None) -> None:
    path = os.path.join(directory, CHECKPOINT_FILE)
    try:
        with open(path + ".tmp", "w") as f:
            f.write(f"0\n{offset} {-1 if horizon is None else horizon}\n")
        os.replace(path + ".tmp", path)
    except OSError as exc:  # only costs a longer cleaning next time
        log.warning("cleaner_checkpoint_not_written", dir=directory, error=str(exc))


def truncate_checkpoint(directory: str, offset: int) -> None:
    """For ``Log.truncate_to``: a checkpoint above the truncation point would call new data clean
    (Kafka's ``LogCleanerManager.maybeTruncateCheckpoint``)."""
    checkpoint, horizon = read_checkpoint(directory)
    if checkpoint > offset:
        write_checkpoint(directory, offset, horizon)


def read_checkpoint(directory: str) -> tuple[int, int | None]:
    try:
        with open(os.path.join(directory, CHECKPOINT_FILE)) as f:
            lines = f.read().split("\n")
        offset, horizon = (int(x) for x in lines[1].split())
        return offset, (None if horizon < 0 else horizon)
    except (OSError, ValueError, IndexError):
        return -1, None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _close_all(segments: list[Segment]) -> None:
    for s in segments:
        s.close()
