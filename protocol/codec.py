"""Request decoding and response encoding.

Requests are decoded with kio's native readers (1-7 µs a request). Responses are written by
handlers as plain dicts in Kafka's field names; :func:`build` turns a dict into the kio
dataclass of the negotiated version, dropping fields that version lacks and filling the
schema defaults for those the handler left out, so one handler body serves every version.
The hot responses (Produce, Fetch, Metadata) have hand-written encoders in
:mod:`protocol.fast`, pinned byte-for-byte to this path by tests.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import types
import typing
import uuid
from functools import cache
from typing import Any

from kio.serial import entity_reader, entity_writer

from .api import request_class, request_header_version, response_class, response_header_version
from .errors import ErrorCode, InvalidRequest

_HEADER = struct.Struct(">hhi")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
ZERO_UUID = uuid.UUID(int=0)


@dataclasses.dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise InvalidRequest("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise InvalidRequest("varint too long")


def parse_header_prefix(frame: bytes) -> tuple[int, int, int]:
    """API key, version and correlation id: the part of the header every version shares."""
    if len(frame) < 8:
        raise InvalidRequest("frame shorter than a request header")
    return _HEADER.unpack_from(frame, 0)


def parse_header(frame: bytes, header_version: int) -> RequestHeader:
    api_key, api_version, correlation_id = parse_header_prefix(frame)
    pos = 8
    if len(frame) < pos + 2:
        raise InvalidRequest("truncated client id")
    (n,) = _I16.unpack_from(frame, pos)
    pos += 2
    client_id = None
    if n >= 0:
        if len(frame) < pos + n:
            raise InvalidRequest("truncated client id")
        client_id = frame[pos : pos + n].decode("utf-8", "replace")
        pos += n
    if header_version >= 2:
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = read_uvarint(frame, pos)
            size, pos = read_uvarint(frame, pos)
            pos += size
        if pos > len(frame):
            raise InvalidRequest("truncated tagged fields")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


@cache
def _reader(cls: type):
    return entity_reader(cls)


@cache
def _writer(cls: type):
    return entity_writer(cls)


def decode_request(frame: bytes) -> tuple[RequestHeader, Any]:
    """Decode a whole request frame (without its size prefix); raise InvalidRequest if unreadable."""
    api_key, api_version, _ = parse_header_prefix(frame)
    header = parse_header(frame, request_header_version(api_key, api_version))
    try:
        body, size = _reader(request_class(api_key, api_version))(frame, header.body_offset)
    except Exception as exc:  # kio raises a variety of errors on malformed input
        raise InvalidRequest(f"cannot decode {api_key} v{api_version}: {exc}") from exc
    return header, body


# --- building responses from dicts -------------------------------------------------------

@dataclasses.dataclass(slots=True)
class _FieldSpec:
    name: str
    kafka_type: str | None
    entity: type | None  # nested entity class (for entity or tuple-of-entity fields)
    is_tuple: bool
    default: Any


def _entity_of(tp: Any) -> tuple[type | None, bool]:
    origin = typing.get_origin(tp)
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        ent, _ = _entity_of(inner)
        return ent, True
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is not type(None):
                return _entity_of(arg)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp, False
    return None, False


@cache
def _fields(cls: type) -> tuple[_FieldSpec, ...]:
    specs = []
    for f in dataclasses.fields(cls):
        entity, is_tuple = _entity_of(f.type)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = dataclasses.MISSING
        specs.append(_FieldSpec(f.name, f.metadata.get("kafka_type"), entity, is_tuple, default))
    return tuple(specs)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _coerce(spec: _FieldSpec, value: Any) -> Any:
    if value is None:
        return None
    if spec.entity is not None:
        if spec.is_tuple:
            return tuple(v if dataclasses.is_dataclass(v) else build(spec.entity, v) for v in value)
        if dataclasses.is_dataclass(value):
            return value
        return build(spec.entity, value)
    if spec.is_tuple:
        return tuple(value)
    kt = spec.kafka_type
    if kt == "timedelta_i32" or kt == "timedelta_i64":
        return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)
    if kt == "error_code":
        return ErrorCode(value)
    if kt == "datetime_i64":
        if isinstance(value, datetime.datetime):
            return value
        return _EPOCH + datetime.timedelta(milliseconds=value)
    return value


_IMPLICIT = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "bool": False,
             "string": "", "bytes": b"", "float64": 0.0, "uuid": ZERO_UUID, "error_code": 0,
             "timedelta_i32": 0, "timedelta_i64": 0, "records": None, "datetime_i64": 0}


def build(cls: type, data: dict[str, Any]) -> Any:
    """Build kio entity ``cls`` from ``data``; unknown keys are ignored (other versions' fields)."""
    kwargs = {}
    for spec in _fields(cls):
        if spec.name in data:
            kwargs[spec.name] = _coerce(spec, data[spec.name])
        elif spec.default is dataclasses.MISSING:
            if spec.is_tuple:
                kwargs[spec.name] = ()
            else:
                kwargs[spec.name] = _coerce(spec, _IMPLICIT.get(spec.kafka_type or "", None))
    return cls(**kwargs)


def encode_body(api_key: int, api_version: int, body: Any) -> bytes:
    cls = response_class(api_key, api_version)
    entity = body if isinstance(body, cls) else build(cls, body)
    out = io.BytesIO()
    _writer(cls)(out, entity)
    return out.getvalue()


def response_header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    if response_header_version(api_key, api_version) >= 1:
        return _I32.pack(correlation_id) + b"\x00"
    return _I32.pack(correlation_id)


def frame_prefix(api_key: int, api_version: int, correlation_id: int, body_size: int) -> bytes:
    """Size prefix + response header, to be followed by a body of ``body_size`` bytes."""
    header = response_header(api_key, api_version, correlation_id)
    return _I32.pack(len(header) + body_size) + header


def frame_response(api_key: int, api_version: int, correlation_id: int, body: bytes) -> bytes:
    """Size prefix + response header + encoded body."""
    return frame_prefix(api_key, api_version, correlation_id, len(body)) + body
