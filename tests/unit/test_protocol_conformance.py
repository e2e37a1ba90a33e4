"""Every API version the broker advertises must be one it can actually speak.

ApiVersions is generated from the ``protocol.api`` registry, so registering a handler with
``@register(key, min, max)`` advertises every version in that range. For each of them this
checks, against kio's schema of that exact version (which mirrors Kafka's JSON message
specs):

- kio knows the version (a version Kafka never defined, or one newer than kio's schemas,
  fails here, naming the API and version);
- a sample request written by kio is decoded by the broker's ``decode_request`` into the
  very same entity, header included;
- a sample response given as the plain dict a handler returns is encoded by the broker's
  ``encode_body`` into kio's bytes, and reads back as the sample;
- the request and response header versions the broker uses are the ones kio's schema names;
- the handler's docstring states the registered range.

Samples are built from kio's dataclass fields: distinct values for every scalar (so swapped
fields show), arrays of two entries, and two variants per message: every nullable field set
(tagged fields given non-default values, so they go on the wire), and every nullable field
null. Versions below ``refused_below`` are answered by a legacy answerer (Produce v0-2, which
kio has no schema for); that answerer is checked on its own.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import re
import struct
import sys
import types
import typing
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

import broker.handlers  # noqa: F401  (registers every handler)
from protocol.api import (
    REGISTRY,
    request_class,
    request_header_version,
    response_class,
    response_header_version,
)
from protocol.codec import decode_request, encode_body

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _served_versions() -> list[tuple[int, int]]:
    return [(spec.key, v) for spec in sorted(REGISTRY.values(), key=lambda s: s.key)
            for v in range(max(spec.min_version, spec.refused_below), spec.max_version + 1)]


def _case_id(case: tuple[int, int]) -> str:
    key, version = case
    return f"{REGISTRY[key].name}-v{version}"


SERVED = _served_versions()


def _classes(key: int, version: int) -> tuple[type, type]:
    """kio's request and response classes, or a failure naming what is missing."""
    name = REGISTRY[key].name
    try:
        return request_class(key, version), response_class(key, version)
    except Exception as exc:
        pytest.fail(f"{name} (key {key}) advertises v{version}, but kio has no schema for "
                    f"{name} v{version} ({type(exc).__name__}: {exc}); Kafka does not define it, "
                    f"or kio must be upgraded before this version is registered")


# --- sample entities ------------------------------------------------------------------------------

class _Sample:
    """Builds an instance of a kio entity class with a distinct value in every scalar field."""

    def __init__(self, nulls: bool) -> None:
        self.nulls = nulls
        self.counter = itertools.count(1)

    def entity(self, cls: type):
        kwargs = {}
        for f in dataclasses.fields(cls):
            if self.nulls and "tag" in f.metadata and self._has_default(f):
                continue  # tagged fields left at their default are not written
            kwargs[f.name] = self.value(f.type, f.metadata.get("kafka_type"))
        return cls(**kwargs)

    @staticmethod
    def _has_default(f: dataclasses.Field) -> bool:
        return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING

    def value(self, tp, kafka_type: str | None):
        inner, nullable = _unwrap_optional(tp)
        if nullable and self.nulls:
            return None
        if typing.get_origin(inner) is tuple:
            element = typing.get_args(inner)[0]
            return tuple(self.value(element, kafka_type) for _ in range(1 if self.nulls else 2))
        if dataclasses.is_dataclass(inner):
            return self.entity(inner)
        return self.scalar(kafka_type)

    def scalar(self, kafka_type: str | None):
        n = next(self.counter)
        match kafka_type:
            case "int8":
                return n % 100
            case "int16" | "int32" | "int64" | "uint16":
                return n
            case "bool":
                return True
            case "string":
                return f"s{n}"
            case "bytes" | "records":
                return b"b%d" % n
            case "float64":
                return n + 0.5
            case "uuid":
                return uuid.UUID(int=n)
            case "error_code":
                return ErrorCode(n % 50)
            case "timedelta_i32" | "timedelta_i64":
                return datetime.timedelta(milliseconds=n)
            case "datetime_i64":
                return _EPOCH + datetime.timedelta(milliseconds=1_700_000_000_000 + n)
        raise AssertionError(f"no sample for kafka_type {kafka_type!r}")


def _unwrap_optional(tp) -> tuple[object, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(tp))
    return tp, False


def _as_handler_dict(value):
    """The entity as a handler writes a response: dicts, lists, ints for times and errors."""
    if dataclasses.is_dataclass(value):
        return {f.name: _as_handler_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [_as_handler_dict(v) for v in value]
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int((value - _EPOCH).total_seconds() * 1000)
    if isinstance(value, ErrorCode):
        return int(value)
    return value


def _kio_bytes(cls: type, entity) -> bytes:
    import io

    out = io.BytesIO()
    entity_writer(cls)(out, entity)
    return out.getvalue()


def _header_version(cls: type) -> int:
    """kio names each message's header schema: ``kio.schema.request_header.v2.header``."""
    return int(cls.__header_schema__.__module__.split(".")[-2].removeprefix("v"))


# --- the checks ------------------------------------------------------------------------------------

@pytest.mark.parametrize("nulls", [False, True], ids=["set", "null"])
@pytest.mark.parametrize("case", SERVED, ids=_case_id)
def test_request_decodes_as_kio_wrote_it(case, nulls):
    key, version = case
    req_cls, _ = _classes(key, version)
    sample = _Sample(nulls).entity(req_cls)
    client_id = b"conformance"
    header = struct.pack(">hhih", key, version, 77, len(client_id)) + client_id
    if request_header_version(key, version) >= 2:
        header += b"\x00"
    decoded_header, body = decode_request(header + _kio_bytes(req_cls, sample))
    assert (decoded_header.api_key, decoded_header.api_version, decoded_header.correlation_id,
            decoded_header.client_id) == (key, version, 77, "conformance")
    assert body == sample, f"{_case_id(case)}: the broker decodes the request differently from kio"


@pytest.mark.parametrize("nulls", [False, True], ids=["set", "null"])
@pytest.mark.parametrize("case", SERVED, ids=_case_id)
def test_response_dict_encodes_as_kio(case, nulls):
    key, version = case
    _, resp_cls = _classes(key, version)
    sample = _Sample(nulls).entity(resp_cls)
    ours = encode_body(key, version, _as_handler_dict(sample))
    assert ours == _kio_bytes(resp_cls, sample), \
        f"{_case_id(case)}: the broker encodes the response differently from kio"
    decoded, size = entity_reader(resp_cls)(ours, 0)
    assert (decoded, size) == (sample, len(ours))


@pytest.mark.parametrize("case", SERVED, ids=_case_id)
def test_header_versions_match_kio(case):
    key, version = case
    req_cls, resp_cls = _classes(key, version)
    assert request_header_version(key, version) == _header_version(req_cls), _case_id(case)
    assert response_header_version(key, version) == _header_version(resp_cls), _case_id(case)


def test_refused_versions_have_a_legacy_answer():
    """Versions accepted on the wire only to be refused (Kafka 4's Produce v0-2) need the
    answerer that writes the refusal without a kio schema."""
    for spec in REGISTRY.values():
        if spec.refused_below > spec.min_version:
            assert spec.legacy is not None, f"{spec.name} refuses v{spec.min_version}-" \
                                            f"{spec.refused_below - 1} but has no legacy answerer"


@pytest.mark.parametrize("version", [0, 1, 2])
def test_legacy_produce_is_refused_with_unsupported_version(version):
    spec = REGISTRY[0]
    assert spec.refused_below == 3 and spec.min_version == 0
    records = b"\x00" * 30
    body = (struct.pack(">hii", 1, 1000, 1) + struct.pack(">h", 6) + b"orders"
            + struct.pack(">i", 1) + struct.pack(">ii", 4, len(records)) + records)
    frame = b"header" + body
    answer = spec.legacy(frame, len(b"header"), version)
    expected = struct.pack(">i", 1) + struct.pack(">h", 6) + b"orders" + struct.pack(">i", 1)
    expected += struct.pack(">ihq", 4, int(ErrorCode.unsupported_version), -1)
    if version >= 2:
        expected += struct.pack(">q", -1)  # log append time
    if version >= 1:
        expected += struct.pack(">i", 0)  # throttle time
    assert answer == expected


@pytest.mark.parametrize("key", sorted(REGISTRY), ids=lambda k: REGISTRY[k].name)
def test_handler_docstring_states_the_registered_range(key):
    spec = REGISTRY[key]
    doc = sys.modules[spec.handler.__module__].__doc__ or ""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    found = re.search(r"\bv(\d+)(?:-(\d+))?", first)
    assert found, f"{spec.handler.__module__}: the docstring must open with '{spec.name}: vMIN-MAX'"
    low, high = int(found[1]), int(found[2] or found[1])
    assert (low, high) == (spec.min_version, spec.max_version), \
        f"{spec.name}: docstring says v{low}-{high}, registered v{spec.min_version}-{spec.max_version}"
