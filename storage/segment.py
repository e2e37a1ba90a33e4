"""One log segment: ``<base>.log`` plus its sparse ``.index`` and ``.timeindex``.

The offset index maps a batch's base offset to its file position (8-byte entries: int32
relative offset, int32 position), one entry every ``index.interval.bytes``; the time index
maps the largest timestamp seen so far to the base offset of the batch that raised it
(12-byte entries: int64 timestamp, int32 relative offset). Both are also kept in memory.

Differs from Kafka: the index files are neither preallocated nor memory-mapped; the entries live
in memory and reach their files when the segment is flushed or closed (new entries appended,
a changed last entry rewritten), so a segment holds one open file, its ``.log``, as a Kafka
segment does (Kafka closes an index's file once it is mapped): a broker with ten thousand
partitions needs ten thousand descriptors, not thirty. A crash can leave index files behind
their log; the log recovers every segment past its recovery point (which only moves after a
flush) by scanning, so a stale index file is never trusted. The entry's offset is the batch's
base offset (Kafka uses the last offset); the files are ours alone, so only their role matters.
"""

from __future__ import annotations

import bisect
import errno
import os
import struct
import time

from protocol import records as rb

_IDX = struct.Struct(">ii")
_TIDX = struct.Struct(">qi")
SCAN_CHUNK = 64 * 1024


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class Segment:
    __slots__ = ("dir", "base_offset", "fd", "size", "next_offset", "index_offsets",
                 "index_positions", "time_stamps", "time_offsets", "bytes_since_index",
                 "max_timestamp", "offset_of_max_timestamp", "created_ms", "index_written",
                 "time_written", "index_interval", "dirty")

    def __init__(self, directory: str, base_offset: int, index_interval: int = 4096) -> None:
        self.dir = directory
        self.base_offset = base_offset
        self.index_interval = index_interval
        self.fd = os.open(self.path(".log"), os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        for suffix in (".index", ".timeindex"):  # created with the segment, as Kafka's are
            os.close(os.open(self.path(suffix), os.O_WRONLY | os.O_CREAT, 0o644))
        # Entries already in the index files: the rest are written by the next flush / close.
        self.index_written = self.time_written = 0
        self.next_offset = base_offset
        self.index_offsets: list[int] = []
        self.index_positions: list[int] = []
        self.time_stamps: list[int] = []
        self.time_offsets: list[int] = []
        self.bytes_since_index = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.created_ms = int(time.time() * 1000)
        self.dirty = False

    def path(self, suffix: str) -> str:
        return os.path.join(self.dir, segment_name(self.base_offset, suffix))

    # --- writing ---------------------------------------------------------------------------

    def append(self, data, base_offset: int, next_offset: int, max_timestamp: int,
               offset_of_max_timestamp: int) -> None:
        position = self.size
        if self.size == 0:
            self.created_ms = int(time.time() * 1000)
        if self.bytes_since_index >= self.index_interval or not self.index_offsets:
            self._add_index_entry(base_offset, position)
        written = os.write(self.fd, data)
        if written != len(data):  # O_APPEND writes to regular files are whole unless the disk is full
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: short write to {self.path('.log')} "
                                        f"({written} of {len(data)} bytes)")
        self.size += written
        self.bytes_since_index += written
        self.next_offset = next_offset
        self.dirty = True
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = offset_of_max_timestamp
            self._add_time_entry(max_timestamp, base_offset)

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Kafka's LogSegment.timeWaitedForRoll: how far the incoming records' timestamp is
        past the segment's first batch's (its first time index entry), or, without one, how
        long ago the segment was created. Records stamped long ago (mirrored, replayed) roll
        the segment at once, so that time retention can delete them."""
        if self.time_stamps and self.time_stamps[0] >= 0:
            return message_timestamp - self.time_stamps[0]
        return now_ms - self.created_ms

    def _add_index_entry(self, offset: int, position: int) -> None:
        self.index_offsets.append(offset)
        self.index_positions.append(position)
        self.bytes_since_index = 0

    def _add_time_entry(self, timestamp: int, offset: int) -> None:
        if self.time_stamps and self.time_offsets[-1] == offset:
            self.time_stamps[-1] = timestamp
            self.time_written = min(self.time_written, len(self.time_stamps) - 1)  # rewrite it
            return
        self.time_stamps.append(timestamp)
        self.time_offsets.append(offset)

    def flush(self, fsync: bool = True) -> None:
        """Write the indexes' missing entries; with ``fsync``, make the segment durable too
        (without, the caller syncs the whole file system afterwards)."""
        if fsync:
            os.fsync(self.fd)
        self._write_indexes(fsync=fsync)
        self.dirty = False

    def _write_indexes(self, fsync: bool) -> None:
        """Bring both index files up to the entries in memory (and cut what they have beyond)."""
        base = self.base_offset
        self.index_written = self._write_index(".index", _IDX, self.index_written, [
            (o - base, p) for o, p in zip(self.index_offsets[self.index_written:],
                                           self.index_positions[self.index_written:], strict=True)],
            len(self.index_offsets), fsync)
        self.time_written = self._write_index(".timeindex", _TIDX, self.time_written, [
            (t, o - base) for t, o in zip(self.time_stamps[self.time_written:],
                                           self.time_offsets[self.time_written:], strict=True)],
            len(self.time_stamps), fsync)

    def _write_index(self, suffix: str, entry: struct.Struct, written: int, new: list[tuple],
                     total: int, fsync: bool) -> int:
        fd = os.open(self.path(suffix), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if new:
                os.pwrite(fd, b"".join(entry.pack(*e) for e in new), written * entry.size)
            os.ftruncate(fd, total * entry.size)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        return total

    # --- recovery --------------------------------------------------------------------------

    def recover(self, validate: bool = True) -> tuple[int, list[rb.BatchHeader]]:
        """Rebuild the indexes by scanning the file; cut at the first torn or corrupt batch.

        Returns (bytes truncated, headers of the valid batches).
        """
        self.index_written = self.time_written = 0  # rewritten whole at the next flush
        self.dirty = True
        self.index_offsets, self.index_positions = [], []
        self.time_stamps, self.time_offsets = [], []
        self.bytes_since_index = 0
        self.max_timestamp = self.offset_of_max_timestamp = -1
        self.next_offset = self.base_offset
        headers: list[rb.BatchHeader] = []
        valid_end = 0
        file_size = os.fstat(self.fd).st_size
        pos = 0
        while pos < file_size:
            chunk = os.pread(self.fd, max(SCAN_CHUNK, rb.HEADER_SIZE), pos)
            if len(chunk) < rb.HEADER_SIZE:
                break
            (length,) = struct.unpack_from(">i", chunk, 8)
            size = length + rb.LOG_OVERHEAD
            if length < rb.HEADER_SIZE - rb.LOG_OVERHEAD or pos + size > file_size:
                break
            if size > len(chunk):
                chunk = os.pread(self.fd, size, pos)
            try:
                header = rb.check_batch(chunk, 0, size) if validate else rb.parse_header(chunk)
            except (rb.CorruptRecord, rb.InvalidRecord):
                break
            if header.base_offset < self.next_offset and headers:
                break  # offsets must increase; anything else is garbage
            self._index_batch(header, pos)
            headers.append(header)
            pos += size
            valid_end = pos
        truncated = file_size - valid_end
        if truncated:
            os.ftruncate(self.fd, valid_end)
        self.size = valid_end
        return truncated, headers

    def _index_batch(self, header: rb.BatchHeader, position: int) -> None:
        if self.bytes_since_index >= self.index_interval or not self.index_offsets:
            self._add_index_entry(header.base_offset, position)
        self.bytes_since_index += header.size
        self.next_offset = header.next_offset
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.base_offset
            self._add_time_entry(header.max_timestamp, header.base_offset)

    def load_indexes(self) -> bool:
        """Load the index files of a segment closed cleanly; False if they look unusable."""
        raw, traw = _read_file(self.path(".index")), _read_file(self.path(".timeindex"))
        if len(raw) % 8 or len(traw) % 12 or (self.size and not raw):
            return False
        offsets, positions = [], []
        for rel, pos in _IDX.iter_unpack(raw):
            if pos > self.size or (positions and pos <= positions[-1]):
                return False
            offsets.append(self.base_offset + rel)
            positions.append(pos)
        self.index_offsets, self.index_positions = offsets, positions
        self.time_stamps, self.time_offsets = [], []
        for ts, rel in _TIDX.iter_unpack(traw):
            self.time_stamps.append(ts)
            self.time_offsets.append(self.base_offset + rel)
        if self.time_stamps:
            self.max_timestamp = self.time_stamps[-1]
            self.offset_of_max_timestamp = self.time_offsets[-1]
        # The last batch tells the next offset; bytes after it (a torn write) need recovery.
        last_pos, last = self._last_batch()
        if (last_pos + last.size if last else 0) != self.size:
            return False
        self.next_offset = last.next_offset if last else self.base_offset
        self.bytes_since_index = self.size - (positions[-1] if positions else 0)
        self.index_written, self.time_written = len(offsets), len(self.time_stamps)
        return True

    def _last_batch(self) -> tuple[int, rb.BatchHeader | None]:
        if not self.index_positions:
            return 0, None
        found: tuple[int, rb.BatchHeader | None] = (0, None)
        for found in self.scan(self.index_positions[-1]):  # noqa: B007 (the last one is kept)
            pass
        return found

    # --- reading ---------------------------------------------------------------------------

    def position_for(self, offset: int) -> int:
        """File position of the last indexed batch starting at or below ``offset``."""
        i = bisect.bisect_right(self.index_offsets, offset) - 1
        return self.index_positions[i] if i >= 0 else 0

    def scan(self, position: int, end: int | None = None):
        """Yield (position, header) of each batch from ``position``, reading in chunks."""
        end = self.size if end is None else end
        pos = position
        while pos + rb.HEADER_SIZE <= end:
            chunk = os.pread(self.fd, min(SCAN_CHUNK, end - pos), pos)
            consumed = 0
            for rel, header in rb.iter_batches(chunk):
                yield pos + rel, header
                consumed = rel + header.size
            if consumed == 0:  # a batch bigger than the chunk
                header = rb.parse_header(os.pread(self.fd, rb.HEADER_SIZE, pos))
                if header.size <= 0 or pos + header.size > end:
                    return
                yield pos, header
                consumed = header.size
            pos += consumed

    def read(self, start_offset: int, max_bytes: int, max_offset: int, min_one: bool = True) -> bytes:
        """Whole batches from the one containing ``start_offset``, below ``max_offset``.

        At most ``max_bytes`` unless the first batch alone is larger and ``min_one`` (KIP-74).
        """
        first_pos = end_pos = -1
        for pos, header in self.scan(self.position_for(start_offset)):
            if header.last_offset < start_offset:
                continue
            if header.base_offset >= max_offset:
                break
            if first_pos < 0:
                if header.size > max_bytes and not min_one:
                    return b""
                first_pos = pos
            elif pos + header.size - first_pos > max_bytes:
                break
            end_pos = pos + header.size
        if first_pos < 0:
            return b""
        return os.pread(self.fd, end_pos - first_pos, first_pos)

    def find_batch(self, offset: int) -> tuple[int, rb.BatchHeader] | None:
        for pos, header in self.scan(self.position_for(offset)):
            if header.last_offset >= offset:
                return pos, header
        return None

    def read_batch(self, position: int, header: rb.BatchHeader) -> bytes:
        return os.pread(self.fd, header.size, position)

    def first_position_for_timestamp(self, timestamp: int) -> int:
        i = bisect.bisect_left(self.time_stamps, timestamp) - 1
        if i < 0:
            return 0
        return self.position_for(self.time_offsets[i])

    # --- truncation and removal ---------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or above ``offset`` (which must be a batch boundary)."""
        for pos, header in self.scan(self.position_for(offset)):
            if header.base_offset >= offset:
                os.ftruncate(self.fd, pos)
                break
        self.recover(validate=False)

    def close(self) -> None:
        """Close the log file; the index files get what they lack first (a flush fsyncs them)."""
        if self.fd < 0:
            return
        try:
            self._write_indexes(fsync=False)
        except OSError:
            pass  # the log recovers a segment whose index files are unusable
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.fd = -1

    def delete(self) -> None:
        self.fd, fd = -1, self.fd  # deleted: its index files need nothing more
        try:
            os.close(fd)
        except OSError:
            pass
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            try:
                os.unlink(self.path(suffix))
            except FileNotFoundError:
                pass
