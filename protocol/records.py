"""RecordBatch v2: the unit the broker stores, validates and serves.

Batches are treated as opaque bytes on the hot path: the 61-byte header is parsed with
``struct``, the CRC32C is checked over attributes..end, and the broker rewrites only the
base offset and partition leader epoch (both outside the CRC) and, for LogAppendTime
topics, the max timestamp (then the CRC is recomputed). Records are decoded and
decompressed only where the broker must look inside: compaction and the internal topics.

Layout (Kafka's DefaultRecordBatch)::

    baseOffset:int64 batchLength:int32 partitionLeaderEpoch:int32 magic:int8 crc:uint32
    attributes:int16 lastOffsetDelta:int32 baseTimestamp:int64 maxTimestamp:int64
    producerId:int64 producerEpoch:int16 baseSequence:int32 recordCount:int32 records...
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import crc32c

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21

COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD = range(5)
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class CorruptRecord(ValueError):
    """A batch whose bytes fail their CRC or size checks (CORRUPT_MESSAGE)."""


class InvalidRecord(ValueError):
    """A well-formed batch that Kafka refuses (INVALID_RECORD), e.g. magic < 2."""


@dataclass(slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def parse_header(buf, pos: int = 0) -> BatchHeader:
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def batch_crc(buf, pos: int, size: int) -> int:
    return crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])


def check_batch(buf, pos: int = 0, limit: int | None = None) -> BatchHeader:
    """Parse and verify the batch at ``pos``; raise CorruptRecord or InvalidRecord."""
    end = len(buf) if limit is None else limit
    if end - pos < LOG_OVERHEAD + 5:
        raise CorruptRecord("batch shorter than its header")
    (length,) = _I32.unpack_from(buf, pos + 8)
    magic = buf[pos + MAGIC_OFFSET]
    if magic != 2:
        raise InvalidRecord(f"record batch magic {magic} is not supported (only magic 2)")
    if length < HEADER_SIZE - LOG_OVERHEAD or pos + LOG_OVERHEAD + length > end:
        raise CorruptRecord(f"batch length {length} out of range")
    header = parse_header(buf, pos)
    if batch_crc(buf, pos, header.size) != header.crc:
        raise CorruptRecord("record batch CRC mismatch")
    if header.record_count < 0 or header.last_offset_delta < 0:
        raise CorruptRecord("negative record count or offset delta")
    return header


def iter_batches(buf, pos: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each complete batch, without CRC checks; stops at a torn tail."""
    end = len(buf) if end is None else end
    while pos + HEADER_SIZE <= end:
        (length,) = _I32.unpack_from(buf, pos + 8)
        size = length + LOG_OVERHEAD
        if length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
            return
        yield pos, parse_header(buf, pos)
        pos += size


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    _I64.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    _I32.pack_into(buf, pos + 12, epoch)


def set_log_append_time(buf: bytearray, pos: int, size: int, timestamp: int) -> None:
    """Stamp LogAppendTime: attributes bit 3, max timestamp, and a recomputed CRC."""
    (attributes,) = _I16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | ATTR_LOG_APPEND_TIME)
    _I64.pack_into(buf, pos + 35, timestamp)
    _U32.pack_into(buf, pos + CRC_OFFSET, batch_crc(buf, pos, size))


# --- records inside a batch ---------------------------------------------------------------

@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def _read_varint(buf, pos: int) -> tuple[int, int]:
    shift = raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecord("varint too long")
    return (raw >> 1) ^ -(raw & 1), pos


def _write_varint(out: bytearray, value: int) -> None:
    raw = (value << 1) ^ (value >> 63)
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _read_bytes(buf, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise CorruptRecord("record field past end of batch")
    return bytes(buf[pos : pos + n]), pos + n


def decompress(codec: int, data: bytes) -> bytes:
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return gzip.decompress(data)
    if codec == COMPRESSION_SNAPPY:
        return _snappy_decompress(data)
    if codec == COMPRESSION_LZ4:
        import lz4.frame

        return lz4.frame.decompress(data)
    if codec == COMPRESSION_ZSTD:
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    raise CorruptRecord(f"unknown compression codec {codec}")


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _snappy_decompress(data: bytes) -> bytes:
    """Raw snappy, or the xerial framing that the Java client writes (blocks of int32 length)."""
    import cramjam

    if data[:8] != _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = 16  # magic + version + compatible version
    while pos + 4 <= len(data):
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        out += bytes(cramjam.snappy.decompress_raw(data[pos : pos + n]))
        pos += n
    return bytes(out)


def compress(codec: int, data: bytes) -> bytes:
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return gzip.compress(data)
    if codec == COMPRESSION_SNAPPY:
        import cramjam

        return bytes(cramjam.snappy.compress_raw(data))
    if codec == COMPRESSION_LZ4:
        import lz4.frame

        # Independent blocks: Kafka's KafkaLZ4BlockInputStream does not follow linked blocks.
        return lz4.frame.compress(data, block_linked=False)
    if codec == COMPRESSION_ZSTD:
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(f"unknown compression codec {codec}")


def decode_records(buf, pos: int = 0) -> tuple[BatchHeader, list[Record]]:
    """Decode every record of the batch at ``pos`` (decompressing if needed)."""
    header = parse_header(buf, pos)
    body = bytes(buf[pos + HEADER_SIZE : pos + header.size])
    try:
        body = decompress(header.compression, body)
    except CorruptRecord:
        raise
    except Exception as exc:  # codec libraries raise their own error types
        raise CorruptRecord(f"cannot decompress batch: {exc}") from exc
    records = []
    p = 0
    try:
        for _ in range(header.record_count):
            length, p = _read_varint(body, p)
            end = p + length
            p += 1  # record attributes, unused
            ts_delta, p = _read_varint(body, p)
            off_delta, p = _read_varint(body, p)
            key, p = _read_bytes(body, p)
            value, p = _read_bytes(body, p)
            n_headers, p = _read_varint(body, p)
            headers = []
            for _ in range(n_headers):
                hkey, p = _read_bytes(body, p)
                hval, p = _read_bytes(body, p)
                headers.append(((hkey or b"").decode("utf-8", "replace"), hval))
            if p != end:
                raise CorruptRecord("record length does not match its fields")
            records.append(Record(header.base_offset + off_delta, header.base_timestamp + ts_delta,
                                  key, value, headers))
    except IndexError as exc:
        raise CorruptRecord("record past end of batch") from exc
    return header, records


def encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, key: bytes | None,
                  value: bytes | None, headers: list[tuple[str, bytes | None]] = ()) -> None:
    body = bytearray(b"\x00")
    _write_varint(body, timestamp_delta)
    _write_varint(body, offset_delta)
    for blob in (key, value):
        if blob is None:
            _write_varint(body, -1)
        else:
            _write_varint(body, len(blob))
            body += blob
    _write_varint(body, len(headers))
    for hkey, hval in headers:
        kb = hkey.encode()
        _write_varint(body, len(kb))
        body += kb
        if hval is None:
            _write_varint(body, -1)
        else:
            _write_varint(body, len(hval))
            body += hval
    _write_varint(out, len(body))
    out += body


def build_batch(records: list[tuple[bytes | None, bytes | None]] | list[Record], *, base_offset: int = 0,
                timestamp: int = 0, producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE,
                transactional: bool = False, control: bool = False, compression: int = 0,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytearray:
    """Encode a RecordBatch v2; ``records`` are (key, value) pairs or Record objects."""
    body = bytearray()
    max_ts = timestamp
    first_ts = None
    for i, rec in enumerate(records):
        if isinstance(rec, Record):
            if first_ts is None:
                first_ts = rec.timestamp
            max_ts = max(max_ts, rec.timestamp)
            encode_record(body, rec.offset - base_offset, rec.timestamp - first_ts,
                          rec.key, rec.value, rec.headers)
        else:
            encode_record(body, i, 0, rec[0], rec[1])
    base_ts = timestamp if first_ts is None else first_ts
    body = compress(compression, bytes(body))
    attributes = compression
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    if records and isinstance(records[0], Record):
        last_delta = records[-1].offset - base_offset
    else:
        last_delta = len(records) - 1
    buf = bytearray(_HEADER.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body),
                                 partition_leader_epoch, 2, 0, attributes, last_delta, base_ts,
                                 max_ts, producer_id, producer_epoch, base_sequence, len(records)))
    buf += body
    _U32.pack_into(buf, CRC_OFFSET, batch_crc(buf, 0, len(buf)))
    return buf


def control_record_key(control_type: int) -> bytes:
    """Key of a COMMIT/ABORT marker: version int16 0, type int16."""
    return struct.pack(">hh", 0, control_type)


def control_record_value(coordinator_epoch: int) -> bytes:
    """Value of a marker: version int16 0, coordinator epoch int32."""
    return struct.pack(">hi", 0, coordinator_epoch)


def build_control_batch(control_type: int, producer_id: int, producer_epoch: int,
                        coordinator_epoch: int, timestamp: int) -> bytearray:
    return build_batch([(control_record_key(control_type), control_record_value(coordinator_epoch))],
                       timestamp=timestamp, producer_id=producer_id, producer_epoch=producer_epoch,
                       transactional=True, control=True)


