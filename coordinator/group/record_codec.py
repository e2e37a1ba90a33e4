"""The byte codec of ``__consumer_offsets`` records: Kafka's generated-message encodings.

Owns :class:`RecordWriter` and :class:`RecordReader`, shared by the classic group records
(:mod:`.metadata`), the KIP-848 consumer-group records (:mod:`.consumer_records`) and the
share-group records (:mod:`coordinator.share.records`). Keys use the classic encoding (int16
string lengths); values of flexible versions use compact lengths and tagged fields.
"""

from __future__ import annotations

import struct
import uuid

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """Bytes in ``__consumer_offsets`` that do not follow the schema they claim."""


class RecordWriter:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def i8(self, v: int) -> RecordWriter:
        self.out += _I8.pack(v)
        return self

    def i16(self, v: int) -> RecordWriter:
        self.out += _I16.pack(v)
        return self

    def i32(self, v: int) -> RecordWriter:
        self.out += _I32.pack(v)
        return self

    def i64(self, v: int) -> RecordWriter:
        self.out += _I64.pack(v)
        return self

    def uvarint(self, v: int) -> RecordWriter:
        while v >= 0x80:
            self.out.append((v & 0x7F) | 0x80)
            v >>= 7
        self.out.append(v)
        return self

    def string(self, v: str | None) -> RecordWriter:
        """A classic (int16 length) string; null is length -1."""
        if v is None:
            return self.i16(-1)
        b = v.encode("utf-8")
        if len(b) > 0x7FFF:
            raise ValueError("string longer than 32767 bytes")
        self.i16(len(b))
        self.out += b
        return self

    def compact_string(self, v: str | None) -> RecordWriter:
        if v is None:
            return self.uvarint(0)
        b = v.encode("utf-8")
        self.uvarint(len(b) + 1)
        self.out += b
        return self

    def bytes_(self, v: bytes | None) -> RecordWriter:
        """Classic (int32 length) bytes; null is length -1."""
        if v is None:
            return self.i32(-1)
        self.i32(len(v))
        self.out += v
        return self

    def uuid(self, v: uuid.UUID) -> RecordWriter:
        self.out += v.bytes
        return self

    def int32s(self, values) -> RecordWriter:
        """A compact array of int32, sorted."""
        values = sorted(values)
        self.uvarint(len(values) + 1)
        for v in values:
            self.i32(v)
        return self

    def no_tags(self) -> RecordWriter:
        return self.uvarint(0)


class RecordReader:
    """Reads the classic (int16/int32 lengths) or flexible (compact + tagged) encodings."""

    __slots__ = ("buf", "flexible", "pos")

    def __init__(self, buf: bytes, pos: int = 0, flexible: bool = False) -> None:
        self.buf = buf
        self.pos = pos
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordFormatError("record shorter than its schema")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return bytes(out)

    def i8(self) -> int:
        return _I8.unpack(self._take(1))[0]

    def i16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def i64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self._take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise RecordFormatError("varint too long")

    def nullable_string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.i16()
        if n < 0:
            return None
        return self._take(n).decode("utf-8")

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise RecordFormatError("null in a non-nullable string")
        return s

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._take(n).decode("utf-8")

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            return b""
        return self._take(n)

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def array_len(self) -> int:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        return max(n, 0)

    def int32s(self) -> frozenset[int]:
        return frozenset(self.i32() for _ in range(self.array_len()))

    def tags(self) -> dict[int, bytes]:
        """The tagged fields, by tag."""
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self._take(self.uvarint())
        return out

    def tagged_fields(self) -> None:
        """Skip the tagged fields of a flexible version."""
        if self.flexible:
            self.tags()
