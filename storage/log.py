"""A partition's log: an ordered list of segments, with offsets, recovery and retention.

Owns: the segment files of one partition directory, its log start offset, log end offset,
high watermark and recovery point, the producer state of the partition, append-time
validation of client batches (CRC, magic, sizes, idempotent sequences), reads for Fetch and
ListOffsets, roll, retention and DeleteRecords.

Differs from Kafka: segments are read with ``pread`` (no sendfile); a batch's index entry is
its base offset; the high watermark is the log end offset on this single replica, advanced by
the replica layer.
"""

from __future__ import annotations

import bisect
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import structlog

from protocol import records as rb
from protocol.errors import ErrorCode, KafkaError

from .cleaner import complete_interrupted_swaps
from .leader_epoch import LeaderEpochCache
from .log_dir_failure import storage_operation
from .producer_state import AppendOrigin, CompletedTxn, ProducerStateManager
from .segment import Segment
from .txn_index import AbortedTxn, AbortedTxnList, append_entry, read_index, rewrite_index

LONG_MAX = (1 << 63) - 1

log = structlog.get_logger("storage.log")

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = (1 << 63) - 1
    message_timestamp_after_max_ms: int = 3_600_000
    cleanup_policy: str = "delete"
    flush_interval_messages: int = (1 << 63) - 1
    flush_interval_ms: int = (1 << 63) - 1
    delete_retention_ms: int = 86_400_000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = (1 << 63) - 1
    producer_id_expiration_ms: int = 86_400_000

    def with_overrides(self, **kwargs) -> LogConfig:
        return replace(self, **kwargs)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def flushes_on_its_own(self) -> bool:
        """flush.ms or flush.messages is bounded (both unbounded by default: the OS flushes)."""
        return self.flush_interval_ms < LONG_MAX or self.flush_interval_messages < LONG_MAX


@dataclass(slots=True)
class AppendInfo:
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless LogAppendTime
    log_start_offset: int
    record_count: int
    duplicate: bool = False


@dataclass(slots=True)
class RecoveryReport:
    segments_scanned: int
    bytes_truncated: int
    truncated_at: int


def _java_long(v: int) -> int:
    """Wrap as Java's long arithmetic does (Kafka prints now - Long.MAX_VALUE wrapped)."""
    return (v + (1 << 63)) % (1 << 64) - (1 << 63)


def _record_validation_error(errors: list[tuple[int, str]], bad_timestamp: bool) -> KafkaError:
    """Kafka's LogValidator.processRecordErrors: one error for the batch, naming its records."""
    if bad_timestamp:
        return KafkaError(ErrorCode.invalid_timestamp,
                          "One or more records have been rejected due to invalid timestamp", errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return KafkaError(ErrorCode.invalid_record,
                      f"One or more records have been rejected due to {len(errors)} record errors "
                      f"in total, and only showing the first three errors at most: [{shown}]", errors)


class Log:
    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig) -> None:
        self.dir = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments: list[Segment] = []
        self.base_offsets: list[int] = []
        self.log_start_offset = 0
        self._high_watermark = 0
        self.recovery_point = 0
        self.producer_state = ProducerStateManager(directory, config.producer_id_expiration_ms)
        self.aborted_txns = AbortedTxnList()
        self.leader_epochs = LeaderEpochCache(directory)
        self.unflushed_messages = 0
        self.last_flush_ms = int(time.time() * 1000)
        # Where the first append after a flush announces this log (the replica manager's flush
        # pass watches only these), or None.
        self.flush_watch: set[Log] | None = None
        # Storage errors (log_dir_failure): (directory, reason) once its directory is offline,
        # and what an OSError of this log's I/O becomes (set by the log manager that owns it).
        self.offline: tuple[str, str] | None = None
        self.on_storage_error: Callable[[str, OSError], Exception] | None = None

    # --- opening ------------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: str, topic: str, partition: int, config: LogConfig) -> Log:
        """A log that did not exist: its directory and first segment, nothing to recover (the
        steps of :meth:`open` that would find nothing are skipped, which matters to a broker
        handed thousands of new partitions at once). Raises FileExistsError if it does exist."""
        os.mkdir(directory)
        self = cls(directory, topic, partition, config)
        self.segments = [Segment(directory, 0, config.index_interval_bytes)]
        self.base_offsets = [0]
        return self

    @classmethod
    def open(cls, directory: str, topic: str, partition: int, config: LogConfig,
             recovery_point: int = 0, log_start_offset: int = 0,
             high_watermark: int | None = None, clean_shutdown: bool = False) -> tuple[Log, RecoveryReport]:
        """Open an existing log. After a clean shutdown (``clean_shutdown``) the active
        segment is not scanned when its indexes end where the checkpointed recovery point
        says the log ends, as Kafka skips recovery when it finds its clean-shutdown file."""
        os.makedirs(directory, exist_ok=True)
        self = cls(directory, topic, partition, config)
        report = self._load(recovery_point, clean_shutdown)
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        # Single replica: everything recovered is committed; replicated: the checkpointed value.
        hw = self.log_end_offset if high_watermark is None else high_watermark
        self.high_watermark = max(self.log_start_offset, min(hw, self.log_end_offset))
        return self, report

    def _load(self, recovery_point: int, clean_shutdown: bool = False) -> RecoveryReport:
        complete_interrupted_swaps(self.dir)  # a committed cleaner swap is finished, not deleted
        bases = sorted(int(n[:-4]) for n in os.listdir(self.dir)
                       if n.endswith(".log") and n[:-4].isdigit())
        for stale in os.listdir(self.dir):
            if stale.endswith((".cleaned", ".swap", ".tmp")):
                os.unlink(os.path.join(self.dir, stale))
        if not bases:
            bases = [0]
        segments = [Segment(self.dir, b, self.config.index_interval_bytes) for b in bases]
        scanned = truncated = 0
        truncated_at = -1
        for i, seg in enumerate(segments):
            is_last = i == len(segments) - 1
            if is_last:
                if clean_shutdown and seg.load_indexes() and seg.next_offset == recovery_point:
                    continue
            elif segments[i + 1].base_offset <= recovery_point and seg.load_indexes():
                continue
            scanned += 1
            cut, _headers = seg.recover(validate=True)
            if cut:
                truncated += cut
                truncated_at = seg.next_offset
                log.warning("log_truncated_on_recovery", topic=self.topic, partition=self.partition,
                            segment=seg.base_offset, offset=seg.next_offset, bytes_truncated=cut)
                for later in segments[i + 1 :]:
                    truncated += later.size
                    later.delete()
                segments = segments[: i + 1]
                break
        self.segments = segments
        self.base_offsets = [s.base_offset for s in segments]
        self.recovery_point = self.log_end_offset
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self._load_aborted_txns()
        self._rebuild_producer_state()
        return RecoveryReport(scanned, truncated, truncated_at)

    def _load_aborted_txns(self) -> None:
        """Read every segment's ``.txnindex``, dropping entries past the (recovered) end."""
        end = self.log_end_offset
        for seg in self.segments:
            path = seg.path(".txnindex")
            entries = read_index(path)
            kept = [e for e in entries if e.last_offset < end]
            if len(kept) != len(entries):
                rewrite_index(path, kept)
            for e in kept:
                self.aborted_txns.add(e)

    def _rebuild_producer_state(self) -> None:
        """Load the newest usable snapshot, then replay the batches after it; markers in the
        replayed range re-create their aborted-transaction index entries if missing."""
        psm = self.producer_state
        psm.delete_snapshots_above(self.log_end_offset)
        start = psm.load_latest_snapshot(self.log_end_offset)
        if start < 0:
            start = self.log_start_offset
        for seg in self.segments:
            if seg.next_offset <= start:
                continue
            for pos, header in seg.scan(seg.position_for(start)):
                if header.base_offset < start:
                    continue
                if header.is_control and header.producer_id != rb.NO_PRODUCER_ID:
                    control_type, coordinator_epoch = _read_marker(seg.read_batch(pos, header))
                    completed = psm.update(header, control_type, coordinator_epoch)
                    if completed is not None and completed.is_aborted:
                        self._index_aborted(completed, seg, lso=completed.first_offset)
                else:
                    psm.update(header)

    def _index_aborted(self, txn: CompletedTxn, seg: Segment, lso: int) -> None:
        entry = AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)
        if self.aborted_txns.add(entry):
            append_entry(seg.path(".txnindex"), entry)

    # --- offsets ------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._high_watermark = value
        self.producer_state.on_high_watermark_updated(value)

    @property
    def last_stable_offset(self) -> int:
        """Below it every transactional record is decided: min(high watermark, first
        offset of the earliest open or not-yet-replicated completed transaction)."""
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is None:
            return self._high_watermark
        return min(self._high_watermark, first_unstable)

    def collect_aborted_txns(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        return self.aborted_txns.collect(start_offset, upper_bound_offset)

    @property
    def active_segment(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def _segment_for(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self.base_offsets, offset) - 1)

    # --- appending ----------------------------------------------------------------------------

    def validate_client_batch(self, data, pos: int, limit: int, now_ms: int) -> rb.BatchHeader:
        """Kafka's LogValidator checks for a batch from a client; raises KafkaError."""
        try:
            header = rb.check_batch(data, pos, limit)
        except rb.CorruptRecord as exc:
            raise KafkaError(ErrorCode.corrupt_message, str(exc)) from None
        except rb.InvalidRecord as exc:
            raise KafkaError(ErrorCode.invalid_record, str(exc)) from None
        if header.is_control:
            raise KafkaError(ErrorCode.invalid_record, "clients may not write control batches")
        if header.record_count < 1 or header.last_offset_delta != header.record_count - 1:
            raise KafkaError(ErrorCode.invalid_record,
                             "record count does not match the last offset delta")
        if header.size > self.config.max_message_bytes:
            raise KafkaError(ErrorCode.message_too_large,
                             f"batch of {header.size} bytes exceeds max.message.bytes "
                             f"{self.config.max_message_bytes}")
        self._check_records(data, pos, header, now_ms)
        return header

    def _check_records(self, data, pos: int, header: rb.BatchHeader, now: int) -> None:
        """Kafka's LogValidator record checks: a compacted topic refuses keyless records and a
        CreateTime timestamp must lie within message.timestamp.before/after.max.ms of now. Every
        refused record is named (KIP-467) and the batch is refused as a whole. The records are
        decoded only when a check can fail, so the common produce path stays header-only."""
        if not self._records_may_fail(header, now):
            return
        try:
            _, records = rb.decode_records(memoryview(data)[pos : pos + header.size])
        except rb.CorruptRecord as exc:
            raise KafkaError(ErrorCode.corrupt_message, str(exc)) from None
        errors: list[tuple[int, str]] = []
        bad_timestamp = False
        for index, record in enumerate(records):
            # The key first, as Kafka's validateRecord: a keyless record is not also a bad timestamp.
            key_problem = self._key_problem(record)
            timestamp_problem = None if key_problem else self._timestamp_problem(header, record, now)
            if key_problem or timestamp_problem:
                errors.append((index, key_problem or timestamp_problem))
                bad_timestamp |= timestamp_problem is not None
        if errors:
            raise _record_validation_error(errors, bad_timestamp)

    def _records_may_fail(self, header: rb.BatchHeader, now: int) -> bool:
        cfg = self.config
        return (cfg.compact or bool(header.attributes & rb.ATTR_LOG_APPEND_TIME)
                or (cfg.message_timestamp_type == "CreateTime"
                    and (cfg.message_timestamp_before_max_ms < LONG_MAX
                         or header.max_timestamp > now + cfg.message_timestamp_after_max_ms)))

    def _key_problem(self, record: rb.Record) -> str | None:
        if self.config.compact and record.key is None:
            return ("Compacted topic cannot accept message without key in topic partition "
                    f"{self.topic}-{self.partition}")
        return None

    def _timestamp_problem(self, header: rb.BatchHeader, record: rb.Record, now: int) -> str | None:
        cfg = self.config
        if cfg.message_timestamp_type == "CreateTime" and record.timestamp != rb.NO_TIMESTAMP:
            low = _java_long(now - cfg.message_timestamp_before_max_ms)
            high = _java_long(now + cfg.message_timestamp_after_max_ms)
            if not low <= record.timestamp <= high:
                return (f"Timestamp {record.timestamp} of message with offset {record.offset} is out "
                        f"of range. The timestamp should be within [{low}, {high}]")
        elif header.attributes & rb.ATTR_LOG_APPEND_TIME:
            key = 0 if record.key is None else len(record.key)
            value = 0 if record.value is None else len(record.value)
            return (f"Invalid timestamp type in message DefaultRecord(offset={record.offset}, "
                    f"timestamp={record.timestamp}, key={key} bytes, value={value} bytes). "
                    "Producer should not set timestamp type to LogAppendTime.")
        return None

    @storage_operation("append")
    def append_as_leader(self, data: bytes, leader_epoch: int, *, client: bool = True,
                         now_ms: int | None = None) -> AppendInfo:
        """Validate, assign offsets and append one produce payload (one or more batches).

        ``client=False`` is a coordinator's append (transactional offset commits): epoch
        checks only. Idempotent duplicates are not appended: the original batch's offsets
        are returned.
        """
        origin = AppendOrigin.CLIENT if client else AppendOrigin.COORDINATOR
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        buf = bytearray(data)
        headers: list[tuple[int, rb.BatchHeader]] = []
        pos = 0
        while pos < len(buf):
            if client:
                header = self.validate_client_batch(buf, pos, len(buf), now_ms)
            else:
                header = rb.check_batch(buf, pos, len(buf))
            headers.append((pos, header))
            pos += header.size
        if not headers:
            raise KafkaError(ErrorCode.invalid_record, "empty record set")
        # Idempotence: a retried batch is answered with its original offsets.
        if len(headers) == 1 and headers[0][1].producer_id != rb.NO_PRODUCER_ID:
            dup = self.producer_state.check(headers[0][1], origin)
            if dup is not None:
                return AppendInfo(dup.first_offset, dup.last_offset, -1, self.log_start_offset,
                                  0, duplicate=True)
        else:
            for _, header in headers:
                self.producer_state.check(header, origin)
        log_append_time = now_ms if self.config.message_timestamp_type == "LogAppendTime" else -1
        offset = self.log_end_offset
        first_offset = offset
        max_ts, offset_of_max = -1, offset
        for pos, header in headers:
            rb.set_base_offset(buf, pos, offset)
            rb.set_partition_leader_epoch(buf, pos, leader_epoch)
            if log_append_time >= 0:
                rb.set_log_append_time(buf, pos, header.size, log_append_time)
                header.max_timestamp = log_append_time
            header.base_offset = offset
            header.partition_leader_epoch = leader_epoch
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max = header.max_timestamp, offset
            offset = header.next_offset
        self._write(buf, first_offset, offset, max_ts, offset_of_max, now_ms)
        count = 0
        for _, header in headers:
            self.producer_state.update(header)
            count += header.record_count
        return AppendInfo(first_offset, offset - 1, log_append_time, self.log_start_offset, count)

    @storage_operation("append")
    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      commit: bool, leader_epoch: int, now_ms: int | None = None,
                      transaction_version: int = 0) -> AppendInfo:
        """A transaction coordinator's COMMIT/ABORT marker (WriteTxnMarkers).

        Raises INVALID_PRODUCER_EPOCH for an older producer epoch (under transaction version
        2, one not newer than the producer's) and
        TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch. An ABORT that ends a
        transaction on this partition gets an aborted-transaction index entry; a marker for
        a producer with no open transaction here is still appended (it takes an offset).
        """
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch, transaction_version)
        control_type = rb.CONTROL_COMMIT if commit else rb.CONTROL_ABORT
        batch = rb.build_control_batch(control_type, producer_id, producer_epoch,
                                       coordinator_epoch, now_ms)
        offset = self.log_end_offset
        rb.set_base_offset(batch, 0, offset)
        rb.set_partition_leader_epoch(batch, 0, leader_epoch)
        lso_before = self.last_stable_offset
        self._write(batch, offset, offset + 1, now_ms, offset, now_ms)
        header = rb.parse_header(batch)
        completed = self.producer_state.update(header, control_type, coordinator_epoch)
        if completed is not None:
            if completed.is_aborted:
                self._index_aborted(completed, self.active_segment, lso_before)
            self.producer_state.on_completed(completed, self._high_watermark)
        return AppendInfo(offset, offset, -1, self.log_start_offset, 1)

    @storage_operation("append")
    def append_as_follower(self, data: bytes) -> None:
        """Append batches that already carry offsets (replication, or the cleaner's rewrite)."""
        buf = memoryview(data)
        max_ts, offset_of_max, first = -1, -1, -1
        last = self.log_end_offset
        headers = []
        for pos, header in rb.iter_batches(buf):
            if first < 0:
                first = header.base_offset
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max = header.max_timestamp, header.base_offset
            last = header.next_offset
            headers.append((pos, header))
        if first < 0:
            return
        self._write(data, first, last, max_ts, offset_of_max, int(time.time() * 1000))
        for pos, header in headers:
            if header.partition_leader_epoch > self.leader_epochs.latest_epoch:
                self.leader_epochs.assign(header.partition_leader_epoch, header.base_offset)
            if header.is_control and header.producer_id != rb.NO_PRODUCER_ID:
                control_type, coordinator_epoch = _read_marker(bytes(buf[pos : pos + header.size]))
                completed = self.producer_state.update(header, control_type, coordinator_epoch)
                if completed is not None:
                    if completed.is_aborted:
                        self._index_aborted(completed, self.active_segment, self.last_stable_offset)
                    self.producer_state.on_completed(completed, self._high_watermark)
            else:
                self.producer_state.update(header)

    def _write(self, data, first_offset: int, next_offset: int, max_ts: int, offset_of_max: int,
               now_ms: int) -> None:
        self.leader_epochs.save_if_unsaved()
        self._maybe_roll(len(data), now_ms, max_ts)
        self.active_segment.append(data, first_offset, next_offset, max_ts, offset_of_max)
        if not self.unflushed_messages and self.flush_watch is not None:
            self.flush_watch.add(self)
        self.unflushed_messages += next_offset - first_offset

    def _maybe_roll(self, incoming: int, now_ms: int, max_ts: int) -> None:
        seg = self.active_segment
        if seg.size == 0:
            return
        if (seg.size + incoming > self.config.segment_bytes
                or seg.time_waited_for_roll(now_ms, max_ts) >= self.config.segment_ms):
            self.roll()

    @storage_operation("segment roll")
    def roll(self) -> Segment:
        """Start a new active segment at the log end offset; snapshot producer state there."""
        new_base = self.log_end_offset
        if self.active_segment.size == 0:
            return self.active_segment
        self.producer_state.take_snapshot(new_base)
        seg = Segment(self.dir, new_base, self.config.index_interval_bytes)
        self.segments.append(seg)
        self.base_offsets.append(new_base)
        log.info("segment_rolled", topic=self.topic, partition=self.partition, base_offset=new_base)
        return seg

    @storage_operation("flush")
    def flush(self, fsync: bool = True) -> int:
        """fsync every dirty segment (or, without ``fsync``, leave that to a sync of the file
        system that the caller does next); the recovery point moves to the log end offset."""
        end = self.log_end_offset
        for seg in self.segments:
            if seg.dirty:
                seg.flush(fsync)
        self.recovery_point = end
        self.unflushed_messages = 0
        self.last_flush_ms = int(time.time() * 1000)
        return end

    def needs_flush(self, now_ms: int) -> bool:
        return (self.unflushed_messages >= self.config.flush_interval_messages
                or (self.unflushed_messages > 0
                    and now_ms - self.last_flush_ms >= self.config.flush_interval_ms))

    # --- reading ------------------------------------------------------------------------------

    @storage_operation("read")
    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool = True) -> bytes:
        """Batches from ``offset`` up to ``max_offset`` (exclusive); raises OFFSET_OUT_OF_RANGE."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise KafkaError(ErrorCode.offset_out_of_range,
                             f"offset {offset} outside [{self.log_start_offset}, {self.log_end_offset}]")
        if offset >= max_offset:
            return b""
        i = self._segment_for(offset)
        out = []
        remaining = max_bytes
        while i < len(self.segments) and remaining > 0:
            seg = self.segments[i]
            if seg.base_offset >= max_offset:
                break
            chunk = seg.read(offset, remaining, max_offset, min_one=min_one and not out)
            if chunk:
                out.append(chunk)
                remaining -= len(chunk)
                # Continue into the next segment only if this one was read to its end.
                last = rb.parse_header(chunk, _last_batch_pos(chunk))
                offset = last.next_offset
                if offset < seg.next_offset:
                    break
            i += 1
        return b"".join(out)

    def batches(self, start_offset: int = 0, end_offset: int | None = None):
        """Yield (segment, position, header) for every batch overlapping [start, end)."""
        end_offset = self.log_end_offset if end_offset is None else end_offset
        for seg in self.segments[self._segment_for(start_offset):]:
            for pos, header in seg.scan(seg.position_for(start_offset)):
                if header.last_offset < start_offset:
                    continue
                if header.base_offset >= end_offset:
                    return
                yield seg, pos, header

    def offset_for_timestamp(self, timestamp: int, max_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``."""
        for seg in self.segments:
            if seg.max_timestamp < timestamp or seg.base_offset >= max_offset:
                continue
            for pos, header in seg.scan(seg.first_position_for_timestamp(timestamp)):
                if header.base_offset >= max_offset:
                    return None
                if header.max_timestamp < timestamp or header.is_control:
                    continue
                _, records = rb.decode_records(seg.read_batch(pos, header))
                for rec in records:
                    ts = header.max_timestamp if header.attributes & rb.ATTR_LOG_APPEND_TIME else rec.timestamp
                    if ts >= timestamp and rec.offset >= self.log_start_offset:
                        return rec.offset, ts
        return None

    def offset_of_max_timestamp(self, max_offset: int) -> tuple[int, int] | None:
        best_ts, best = -1, None
        for seg in self.segments:
            if seg.max_timestamp > best_ts and seg.offset_of_max_timestamp < max_offset:
                best_ts, best = seg.max_timestamp, seg
        if best is None:
            return None
        found = best.find_batch(best.offset_of_max_timestamp)
        if found is None:
            return None
        pos, header = found
        if header.attributes & rb.ATTR_LOG_APPEND_TIME or header.is_control:
            return header.base_offset, header.max_timestamp
        _, records = rb.decode_records(best.read_batch(pos, header))
        for rec in records:
            if rec.timestamp == header.max_timestamp:
                return rec.offset, rec.timestamp
        return header.base_offset, header.max_timestamp

    # --- truncation, retention, deletion --------------------------------------------------------

    @storage_operation("truncation")
    def truncate_to(self, offset: int) -> None:
        """Remove everything at or above ``offset`` (a batch boundary)."""
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
            self.base_offsets.pop()
        self.active_segment.truncate_to(offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self.aborted_txns.truncate_from(self.log_end_offset)
        for seg in self.segments[-2:]:
            rewrite_index(seg.path(".txnindex"),
                          [e for e in read_index(seg.path(".txnindex")) if e.last_offset < self.log_end_offset])
        self.producer_state.truncate_and_reload()
        self._rebuild_producer_state()

    @storage_operation("truncation")
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at ``offset`` (a follower below the leader's log start)."""
        for seg in self.segments:
            seg.delete()
        self.segments, self.base_offsets = [Segment(self.dir, offset, self.config.index_interval_bytes)], [offset]
        self.log_start_offset = self.recovery_point = offset
        self.high_watermark = offset
        self.leader_epochs.truncate_from_end(-1)
        self.aborted_txns.truncate_from(0)
        self.producer_state.truncate_and_reload()
        self._rebuild_producer_state()

    @storage_operation("deletion")
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: advance the log start offset; whole segments below it are removed."""
        if offset > self.high_watermark:
            raise KafkaError(ErrorCode.offset_out_of_range,
                             f"offset {offset} is above the high watermark {self.high_watermark}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
        self._delete_segments_below_start()
        return self.log_start_offset

    @storage_operation("deletion")
    def maybe_increment_log_start_offset(self, offset: int) -> None:
        """A follower follows its leader's log start offset (DeleteRecords, retention)."""
        offset = min(offset, self.log_end_offset)
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._delete_segments_below_start()

    def _delete_segments_below_start(self) -> None:
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self._delete_oldest_segment("log_start_offset")

    def _delete_oldest_segment(self, reason: str) -> None:
        seg = self.segments.pop(0)
        self.base_offsets.pop(0)
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.aborted_txns.drop_before(self.segments[0].base_offset)
        log.info("segment_deleted", topic=self.topic, partition=self.partition,
                 base_offset=seg.base_offset, reason=reason)
        seg.delete()

    @storage_operation("retention")
    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete segments past ``retention.ms`` / ``retention.bytes``; returns how many."""
        if not self.config.delete:
            return 0
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        deleted = 0
        if self.config.retention_ms >= 0:
            while len(self.segments) > 1 and self.segments[0].next_offset <= self.high_watermark:
                seg = self.segments[0]
                newest = seg.max_timestamp if seg.max_timestamp >= 0 else seg.created_ms
                if now_ms - newest <= self.config.retention_ms:
                    break
                self._delete_oldest_segment("retention.ms")
                deleted += 1
        if self.config.retention_bytes >= 0:
            size = self.size_in_bytes
            while (len(self.segments) > 1 and size - self.segments[0].size >= self.config.retention_bytes
                   and self.segments[0].next_offset <= self.high_watermark):
                size -= self.segments[0].size
                self._delete_oldest_segment("retention.bytes")
                deleted += 1
        return deleted

    def replace_segments(self, old: list[Segment], new: list[Segment]) -> None:
        """Swap cleaned segments in for the ones they were made from (same offset range)."""
        first = self.segments.index(old[0])
        self.segments[first : first + len(old)] = new
        self.base_offsets = [s.base_offset for s in self.segments]

    def close(self, clean: bool = True, fsync: bool = True) -> None:
        if clean:
            self.flush(fsync)
            self.producer_state.take_snapshot(self.log_end_offset)
        for seg in self.segments:
            seg.close()


def _read_marker(batch: bytes) -> tuple[int | None, int]:
    """(control type, coordinator epoch) of a control batch, or (None, -1) if unreadable."""
    try:
        _, records = rb.decode_records(batch)
        key, value = records[0].key or b"", records[0].value or b""
        control_type = struct.unpack_from(">h", key, 2)[0]
        coordinator_epoch = struct.unpack_from(">i", value, 2)[0] if len(value) >= 6 else -1
        return control_type, coordinator_epoch
    except (rb.CorruptRecord, IndexError, struct.error):
        return None, -1


def _last_batch_pos(chunk: bytes) -> int:
    last = 0
    for pos, _ in rb.iter_batches(chunk):
        last = pos
    return last
