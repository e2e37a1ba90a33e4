"""A small synchronous Kafka protocol client for the command-line tools.

Plain blocking sockets, one connection per broker, kio entities for the wire format (the
same request/response classes and header versions the broker uses, from
:mod:`protocol.api`). What it does:

- bootstrap: the first reachable address of ``--bootstrap-server`` (comma-separated);
- ApiVersions v0 on every new connection, and version negotiation for each request
  (the highest version both this client and the broker speak);
- Metadata: the brokers of the cluster and the leaders/replicas of topic partitions;
- FindCoordinator: the coordinator of a key (group or transactional id);
- ``send``: any request, given as a dict of kio field names (:func:`protocol.codec.build`).

Failures are :class:`KafkaClientError` subclasses whose ``str`` is one readable line:
:class:`ConnectError` (unreachable broker), :class:`UnsupportedApi` (the broker does not
speak a needed API/version) and :class:`ApiError` (an error code, named like Kafka's
``Errors`` enum, e.g. ``UNKNOWN_TOPIC_OR_PARTITION``, with the broker's message or Kafka's
description of the code).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import socket
import struct
import time
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i64

from protocol.api import (
    camel_name,
    request_class,
    request_header_version,
    response_class,
    response_header_version,
)
from protocol.codec import build
from protocol.errors import error_description

API_VERSIONS = 18
METADATA = 3
FIND_COORDINATOR = 10

GROUP_KEY, TRANSACTION_KEY = 0, 1

# Metadata versions this client reads: v1 has null = all topics and is_internal; v4 has
# allow_auto_topic_creation (always false here, like Kafka's admin client).
METADATA_VERSIONS = (1, 12)
# FindCoordinator: v1 brought key_type, v4 batched keys.
FIND_COORDINATOR_VERSIONS = (1, 6)

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
T = TypeVar("T")


# --------------------------------------------------------------------------- errors
class KafkaClientError(Exception):
    """A failure with a one-line, human-readable ``str``."""


class ConnectError(KafkaClientError):
    """A broker could not be reached (or closed the connection)."""


class UnsupportedApi(KafkaClientError):
    """The broker does not advertise the API or a version this client can use."""


class RetriableError(KafkaClientError):
    """Worth another try after refreshing metadata or backing off (see :func:`retry`)."""


def error_name(code: int) -> str:
    """``3`` -> ``UNKNOWN_TOPIC_OR_PARTITION`` (Kafka's ``Errors`` name)."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{code}"


def is_retriable(code: int) -> bool:
    try:
        return bool(ErrorCode(code).retriable)
    except ValueError:
        return False


class ApiError(KafkaClientError):
    """An error code in a response: ``NAME: message``."""

    def __init__(self, code: int, message: str | None = None) -> None:
        self.code = int(code)
        self.name = error_name(self.code)
        self.detail = message if message and message != self.name else error_description(self.code)
        super().__init__(f"{self.name}: {self.detail}" if self.detail else self.name)

    @property
    def retriable(self) -> bool:
        return is_retriable(self.code)


class RetriableApiError(ApiError, RetriableError):
    """An :class:`ApiError` that :func:`retry` retries until its deadline."""


def check(code: int, message: str | None = None, retriable: Iterable[int] = ()) -> None:
    """Raise for a non-zero error code: :class:`RetriableApiError` if it is in ``retriable``."""
    if code:
        raise (RetriableApiError if int(code) in set(retriable) else ApiError)(code, message)


def retry(fn: Callable[[], T], deadline: float, backoff: float = 0.1, max_backoff: float = 1.0) -> T:
    """Call ``fn`` until it does not raise :class:`RetriableError` or ``deadline`` (monotonic) passes.

    At the deadline the last retriable error is raised as it is (its message says what failed).
    """
    while True:
        try:
            return fn()
        except RetriableError:
            if time.monotonic() + backoff > deadline:
                raise
            time.sleep(backoff)
            backoff = min(backoff * 2, max_backoff)


# --------------------------------------------------------------------------- conversions
def to_ms(value: Any) -> int:
    """kio's timedelta / datetime fields back to Kafka's milliseconds (ints pass through)."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return (value - _EPOCH) // datetime.timedelta(milliseconds=1)
    return int(value)


def api_name(key: int) -> str:
    try:
        return camel_name(api_key_map[key])
    except KeyError:
        return f"API {key}"


# --------------------------------------------------------------------------- lenient readers
_ENTITY_META = ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")


def _nested_entity(tp: Any) -> tuple[type | None, bool]:
    """(entity class, is a tuple of it) for a field type, else (None, False)."""
    origin = typing.get_origin(tp)
    if origin is tuple:
        ent, _ = _nested_entity(typing.get_args(tp)[0])
        return ent, True
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is not type(None):
                return _nested_entity(arg)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp, False
    return None, False


@cache
def _raw_timestamps(cls: type) -> type:
    """``cls`` with every ``datetime_i64`` field read as a plain int64 (milliseconds).

    kio's native reader refuses negative timestamps ("Cannot parse negative timestamp"), but
    Kafka sends -1 for "none", e.g. DescribeTransactions' transaction_start_time_ms of a
    transactional id with no ongoing transaction. Classes without such fields are returned
    as they are.
    """
    fields, changed = [], False
    for f in dataclasses.fields(cls):
        tp, md = f.type, dict(f.metadata)
        if md.get("kafka_type") == "datetime_i64":
            tp, md["kafka_type"], changed = i64, "int64", True
        else:
            ent, is_tuple = _nested_entity(tp)
            if ent is not None:
                new = _raw_timestamps(ent)
                if new is not ent:
                    tp, changed = (tuple[new, ...] if is_tuple else new), True
        kw: dict[str, Any] = {"metadata": md}
        if f.default is not dataclasses.MISSING:
            kw["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            kw["default_factory"] = f.default_factory  # type: ignore[misc]
        fields.append((f.name, tp, dataclasses.field(**kw)))
    if not changed:
        return cls
    return dataclasses.make_dataclass(cls.__name__, fields, frozen=True, slots=True, kw_only=True,
                                      namespace={k: getattr(cls, k) for k in _ENTITY_META if hasattr(cls, k)})


@cache
def _response_reader(api_key: int, version: int):
    return entity_reader(_raw_timestamps(response_class(api_key, version)))


# --------------------------------------------------------------------------- connection
class Connection:
    """One blocking connection to one broker, with the API versions it advertised."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout: float,
                 node_id: int | None = None) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        self.client_id = client_id
        self.timeout = timeout
        self.correlation_id = 0
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ConnectError(f"cannot connect to {self.address}: {_os_reason(exc)}") from None
        self.sock.settimeout(timeout)
        self.versions: dict[int, tuple[int, int]] = {}
        try:
            resp = self.request(API_VERSIONS, 0, {})
        except ConnectError:
            self.close()
            raise
        if resp.error_code:
            self.close()
            raise ConnectError(f"{self.address} refused ApiVersions: {ApiError(resp.error_code)}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def describe(self) -> str:
        return f"broker {self.node_id} ({self.address})" if self.node_id is not None else self.address

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def version(self, api_key: int, lo: int, hi: int) -> int:
        """The highest version in [lo, hi] that the broker speaks; UnsupportedApi if none."""
        if api_key not in self.versions:
            raise UnsupportedApi(f"{self.describe()} does not support {api_name(api_key)} "
                                 f"(API key {api_key})")
        bmin, bmax = self.versions[api_key]
        v = min(hi, bmax)
        if v < max(lo, bmin):
            raise UnsupportedApi(f"{self.describe()} supports {api_name(api_key)} v{bmin}-{bmax}, "
                                 f"this tool needs v{lo}-{hi}")
        return v

    def request(self, api_key: int, version: int, fields: dict | Any) -> Any:
        """Send one request (dict of kio field names, or a kio entity) and return the response."""
        cls = request_class(api_key, version)
        body = fields if isinstance(fields, cls) else build(cls, fields)
        out = io.BytesIO()
        entity_writer(cls)(out, body)
        self.correlation_id += 1
        cid = self.client_id.encode()
        header = struct.pack(">hhih", api_key, version, self.correlation_id, len(cid)) + cid
        if request_header_version(api_key, version) >= 2:
            header += b"\x00"
        payload = header + out.getvalue()
        try:
            self.sock.sendall(struct.pack(">i", len(payload)) + payload)
            (size,) = struct.unpack(">i", self._recv_exact(4))
            frame = self._recv_exact(size)
        except TimeoutError:
            self.close()
            raise ConnectError(f"{self.describe()} did not answer {api_name(api_key)} "
                               f"within {self.timeout:g}s") from None
        except OSError as exc:
            self.close()
            raise ConnectError(f"lost the connection to {self.describe()}: {_os_reason(exc)}") from None
        (rcid,) = struct.unpack_from(">i", frame, 0)
        if rcid != self.correlation_id:
            self.close()
            raise ConnectError(f"{self.describe()} answered correlation id {rcid}, "
                               f"expected {self.correlation_id}")
        pos = 4 + (1 if response_header_version(api_key, version) >= 1 else 0)
        try:
            resp, _ = _response_reader(api_key, version)(frame, pos)
        except Exception as exc:  # kio raises various errors on malformed input
            raise KafkaClientError(f"cannot decode the {api_name(api_key)} v{version} response "
                                   f"of {self.describe()}: {exc}") from None
        return resp

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionResetError("connection closed by the broker")
            buf += chunk
        return bytes(buf)


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host ({exc.strerror or exc})"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return exc.strerror or str(exc) or type(exc).__name__


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` -> [(h1, 9092), (h2, 9093)]; ValueError with a clear message."""
    out = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"invalid bootstrap server {item!r}: expected host:port")
        out.append((host, int(port)))
    if not out:
        raise ValueError("no bootstrap server given: expected host:port[,host:port...]")
    return out


# --------------------------------------------------------------------------- metadata
@dataclass(slots=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0


@dataclass(slots=True)
class TopicInfo:
    name: str
    error_code: int
    is_internal: bool
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


@dataclass(slots=True)
class ClusterMetadata:
    brokers: dict[int, tuple[str, int]]
    controller_id: int
    topics: dict[str, TopicInfo]


# --------------------------------------------------------------------------- client
class KafkaClient:
    """Connections to the brokers of one cluster, found from the bootstrap servers."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "kbroker-tools",
                 request_timeout: float = 30.0) -> None:
        self.addresses = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.brokers: dict[int, tuple[str, int]] = {}
        self._conns: dict[int, Connection] = {}
        self._bootstrap: Connection | None = None

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for conn in list(self._conns.values()):
            conn.close()
        self._conns.clear()
        if self._bootstrap is not None:
            self._bootstrap.close()
            self._bootstrap = None

    # -- connections
    def bootstrap(self) -> Connection:
        """A connection to the first reachable bootstrap server."""
        if self._bootstrap is not None:
            return self._bootstrap
        reasons = []
        for host, port in self.addresses:
            try:
                self._bootstrap = Connection(host, port, client_id=self.client_id,
                                             timeout=self.request_timeout)
                return self._bootstrap
            except ConnectError as exc:
                reasons.append(str(exc))
        if len(reasons) == 1:
            raise ConnectError(reasons[0])
        raise ConnectError("cannot connect to any bootstrap server (" + "; ".join(reasons) + ")")

    def connection(self, node_id: int) -> Connection:
        """A connection to broker ``node_id`` (known from Metadata or FindCoordinator)."""
        conn = self._conns.get(node_id)
        if conn is not None:
            return conn
        if node_id not in self.brokers:
            self.metadata([])
        if node_id not in self.brokers:
            raise KafkaClientError(f"broker {node_id} is not in the cluster metadata "
                                   f"(brokers: {', '.join(map(str, sorted(self.brokers))) or 'none'})")
        host, port = self.brokers[node_id]
        conn = Connection(host, port, client_id=self.client_id, timeout=self.request_timeout,
                          node_id=node_id)
        self._conns[node_id] = conn
        return conn

    def drop(self, node_id: int) -> None:
        conn = self._conns.pop(node_id, None)
        if conn is not None:
            conn.close()

    def send(self, target: int | Connection, api_key: int, fields: dict, versions: tuple[int, int],
             check_version: Callable[[int], None] | None = None) -> tuple[Any, int]:
        """Send to a broker id (or connection) at the best common version; (response, version)."""
        conn = target if isinstance(target, Connection) else self.connection(target)
        version = conn.version(api_key, *versions)
        if check_version is not None:
            check_version(version)
        try:
            return conn.request(api_key, version, fields), version
        except ConnectError:
            if not isinstance(target, Connection):
                self.drop(target)
            elif conn is self._bootstrap:
                self._bootstrap = None
            raise

    # -- metadata
    def metadata(self, topics: list[str] | None) -> ClusterMetadata:
        """Metadata for ``topics`` (None: all topics; []: brokers only); records the brokers."""
        conn = self.bootstrap()
        resp, _ = self.send(conn, METADATA, {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }, METADATA_VERSIONS)
        brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        if brokers:
            self.brokers.update(brokers)
            if conn.node_id is None:
                for node, addr in brokers.items():
                    if addr == (conn.host, conn.port):
                        conn.node_id = node
        out: dict[str, TopicInfo] = {}
        for t in resp.topics:
            info = TopicInfo(t.name or "", int(t.error_code), bool(getattr(t, "is_internal", False)))
            for p in t.partitions:
                info.partitions[p.partition_index] = PartitionInfo(
                    p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes),
                    int(p.error_code))
            out[info.name] = info
        return ClusterMetadata(brokers, getattr(resp, "controller_id", -1), out)

    def leader(self, topic: str, partition: int) -> int:
        """The leader of a partition: ApiError if the topic/partition does not exist,
        RetriableApiError while it has no leader."""
        md = self.metadata([topic])
        info = md.topics.get(topic)
        if info is None:
            raise ApiError(ErrorCode.unknown_topic_or_partition)
        if info.error_code:
            check(info.error_code, retriable=(ErrorCode.leader_not_available,))
        p = info.partitions.get(partition)
        if p is None:
            raise ApiError(ErrorCode.unknown_topic_or_partition,
                           f"topic {topic} has no partition {partition} "
                           f"(it has {len(info.partitions)} partition{'s' if len(info.partitions) != 1 else ''})")
        if p.leader < 0 or p.error_code == ErrorCode.leader_not_available:
            raise RetriableApiError(ErrorCode.leader_not_available)
        return p.leader

    # -- coordinators
    def find_coordinators(self, keys: list[str], key_type: int) -> dict[str, int | ApiError]:
        """Coordinator broker id of each key (or its error); registers the coordinators' addresses.

        COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR come back as
        :class:`RetriableApiError` values.
        """
        conn = self.bootstrap()
        version = conn.version(FIND_COORDINATOR, *FIND_COORDINATOR_VERSIONS)
        results: list[tuple[str, int, int, str, int, str | None]] = []
        if version >= 4:
            resp = conn.request(FIND_COORDINATOR, version, {"key_type": key_type, "coordinator_keys": keys})
            results = [(c.key, int(c.error_code), c.node_id, c.host, c.port, c.error_message)
                       for c in resp.coordinators]
        else:
            for key in keys:
                resp = conn.request(FIND_COORDINATOR, version, {"key_type": key_type, "key": key})
                results.append((key, int(resp.error_code), resp.node_id, resp.host, resp.port,
                                resp.error_message))
        out: dict[str, int | ApiError] = {}
        retriable = (ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
                     ErrorCode.not_coordinator)
        for key, code, node, host, port, message in results:
            if code:
                cls = RetriableApiError if code in retriable else ApiError
                out[key] = cls(code, message)
            else:
                if self.brokers.get(node) != (host, port):
                    self.drop(node)
                self.brokers[node] = (host, port)
                out[key] = node
        return out
