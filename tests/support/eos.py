"""Support for the exactly-once acceptance tests (tests/integration/test_eos_*.py).

Used by test_eos_incidents.py. (The other EOS modules, test_eos_acc_*.py, written in
parallel, use tests/support/eos_accept.py.)

Target selection
    ``KBROKER_EOS_TARGET=kafka`` runs the tests against a real Apache Kafka 4.3.1
    (single-node KRaft, ``compat/kafka/kraft.py``); anything else (the default) runs them
    against our broker.

    ``eos_broker`` (module scope)
        ours: the shared ``broker`` fixture, or, if the test module defines
        ``EOS_BROKER_CONFIG``, a broker process of its own with those overrides;
        Kafka: a KRaft broker for the module with ``KAFKA_BASE_CONFIG`` plus the module's
        ``EOS_BROKER_CONFIG``.
    ``eos_configured(overrides)`` (function scope, a factory)
        ours: ``own_broker(**overrides)``, a fresh broker process;
        Kafka: a KRaft broker with ``overrides`` as extra configuration, kept for the
        module and reused by the next test asking for the same overrides (at most one
        such broker runs beside the module's ``eos_broker``).
    A test that kills -9 and restarts its broker takes ``eos_accept.restartable_broker``.

    Every target object has ``.bootstrap``, ``.log_dir`` (the data directory: segment
    files can be read on either target), ``.pid`` (for SIGSTOP/SIGCONT) and ``.output()``
    (the broker's log text).
"""

from __future__ import annotations

import contextlib
import datetime
import glob
import os
import signal
import struct
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from protocol import records as rb
from protocol.errors import ErrorCode
from tests.support.raw import RawClient, TxnDescription, describe_transaction  # noqa: F401

REPO = Path(__file__).resolve().parents[2]

TARGET = os.environ.get("KBROKER_EOS_TARGET", "ours").strip().lower() or "ours"
ON_KAFKA = TARGET == "kafka"

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
CONTROL_ABORT, CONTROL_COMMIT = rb.CONTROL_ABORT, rb.CONTROL_COMMIT

# The coordinator's timed-out-transaction scan interval the EOS modules run with.
ABORT_SCAN_MS = 1000
KAFKA_BASE_CONFIG = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": str(ABORT_SCAN_MS)}

# Coordinator errors that only mean "not ready here yet": always retried (bounded).
COORDINATOR_NOT_READY = {
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(predicate: Callable[[], object], timeout: float, what: str = "condition",
               interval: float = 0.1) -> object:
    """Poll ``predicate`` until it returns something truthy (returned); AssertionError after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


# =========================================================================== targets
class KafkaTarget:
    """A running KRaft Apache Kafka with the attributes the tests use."""

    def __init__(self, kb, overrides: dict[str, str]) -> None:
        self.kb = kb
        self.overrides = dict(overrides)

    @property
    def bootstrap(self) -> str:
        return self.kb.bootstrap

    @property
    def log_dir(self) -> str:
        return str(self.kb.workdir / "data")

    @property
    def pid(self) -> int:
        return self.kb.pid

    def output(self) -> str:
        try:
            return self.kb.log_file.read_text(errors="replace")
        except OSError:
            return ""


class KafkaPool:
    """KRaft brokers by configuration: the module's ``eos_broker`` plus at most one other."""

    def __init__(self) -> None:
        self.running: dict[frozenset, tuple[KafkaTarget, contextlib.ExitStack]] = {}
        self.base: frozenset | None = None

    def get(self, overrides: dict[str, str], *, base: bool = False) -> KafkaTarget:
        key = frozenset(overrides.items())
        if base:
            self.base = key
        if key in self.running:
            return self.running[key][0]
        for other in [k for k in self.running if k != self.base]:
            self.running.pop(other)[1].close()
        from compat.kafka.kraft import kraft_broker

        stack = contextlib.ExitStack()
        kb = stack.enter_context(kraft_broker(extra_config=dict(overrides), heap_opts="-Xmx768m -Xms256m"))
        target = KafkaTarget(kb, overrides)
        self.running[key] = (target, stack)
        return target

    def close(self) -> None:
        while self.running:
            self.running.popitem()[1][1].close()


@pytest.fixture(scope="module")
def kafka_pool():
    if not ON_KAFKA:
        yield None
        return
    pool = KafkaPool()
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="module")
def eos_broker(request, kafka_pool, tmp_path_factory):
    """The broker under test for a module (see the module docstring)."""
    module_config = dict(getattr(request.module, "EOS_BROKER_CONFIG", {}) or {})
    if ON_KAFKA:
        yield kafka_pool.get({**KAFKA_BASE_CONFIG, **module_config}, base=True)
        return
    if not module_config:
        yield request.getfixturevalue("broker")
        return
    from tests.support.broker_process import BrokerProcess

    proc = BrokerProcess(str(tmp_path_factory.mktemp("eos-broker") / "data"), module_config)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def eos_configured(request, kafka_pool):
    """Factory: a broker with these config overrides (fresh for ours, pooled for Kafka)."""

    def make(overrides: dict[str, str] | None = None, **kw: str):
        cfg = {**(overrides or {}), **kw}
        if ON_KAFKA:
            return kafka_pool.get(cfg)
        return request.getfixturevalue("own_broker")(**cfg)

    return make


@contextlib.contextmanager
def paused(target):
    """SIGSTOP the broker process (one a fixture here started) and SIGCONT it on exit."""
    pid = target.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


# =========================================================================== raw protocol
def raw(target_or_bootstrap, timeout: float = 15.0) -> RawClient:
    """A RawClient (context manager) to a target or a "host:port" bootstrap."""
    bs = getattr(target_or_bootstrap, "bootstrap", target_or_bootstrap)
    return RawClient(bs, timeout=timeout)


def _retrying(call: Callable[[], object], error_of: Callable[[object], Iterable], retry: Iterable,
              deadline_s: float) -> object:
    """Repeat ``call`` while any of its errors is "coordinator not ready" or in ``retry``."""
    again = COORDINATOR_NOT_READY | set(retry or ())
    deadline = time.monotonic() + deadline_s
    while True:
        resp = call()
        if not set(error_of(resp)) & again or time.monotonic() >= deadline:
            return resp
        time.sleep(0.05)


def find_coordinator(c: RawClient, key: str, key_type: int = 1, deadline_s: float = 30.0):
    """FindCoordinator v4 (retried while not available); the coordinator entry."""
    return _retrying(lambda: c.call(10, 4, {"key_type": key_type, "coordinator_keys": [key]}).coordinators[0],
                     lambda r: [r.error_code], (), deadline_s)


def init_producer_id(c: RawClient, txn_id: str | None, timeout_ms: int = 60000, *, version: int = 4,
                     producer_id: int = -1, producer_epoch: int = -1, retry: Iterable = (),
                     deadline_s: float = 30.0):
    """InitProducerId; the response (error_code, producer_id, producer_epoch)."""
    fields = {"transactional_id": txn_id, "transaction_timeout": timeout_ms,
              "producer_id": producer_id, "producer_epoch": producer_epoch}
    if txn_id is not None:  # as clients do; on Kafka this also creates __transaction_state
        find_coordinator(c, txn_id, deadline_s=deadline_s)
    return _retrying(lambda: c.call(22, version, fields), lambda r: [r.error_code], retry, deadline_s)


def add_partitions(c: RawClient, txn_id: str, pid: int, epoch: int, topics: dict[str, list[int]], *,
                   version: int = 3, retry: Iterable = (), deadline_s: float = 30.0) -> dict:
    """AddPartitionsToTxn (v0-3 layout); {(topic, partition): error code}."""
    fields = {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
              "v3_and_below_producer_epoch": epoch,
              "v3_and_below_topics": [{"name": t, "partitions": list(ps)} for t, ps in topics.items()]}

    def call():
        resp = c.call(24, version, fields)
        return {(t.name, int(r.partition_index)): r.partition_error_code
                for t in resp.results_by_topic_v3_and_below for r in t.results_by_partition}

    return _retrying(call, lambda r: r.values(), retry, deadline_s)


def end_txn(c: RawClient, txn_id: str, pid: int, epoch: int, commit: bool, *, version: int = 3,
            retry: Iterable = (), deadline_s: float = 30.0) -> ErrorCode:
    """EndTxn (v3 by default: transactions V1, as our broker and librdkafka speak it)."""
    fields = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "committed": commit}
    return _retrying(lambda: c.call(26, version, fields).error_code, lambda e: [e], retry, deadline_s)


def batch(values: list[bytes], pid: int = -1, epoch: int = -1, seq: int = -1, *,
          transactional: bool = False, timestamp: int | None = None, key: bytes | None = b"k") -> bytes:
    """One RecordBatch v2 of ``values`` (CreateTime ``timestamp``, default now)."""
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    return bytes(rb.build_batch([(key, v) for v in values], timestamp=ts, producer_id=pid,
                                producer_epoch=epoch, base_sequence=seq, transactional=transactional))


def produce(c: RawClient, topic: str, records: bytes, txn_id: str | None = None, *, partition: int = 0,
            version: int = 9, acks: int = -1):
    """Produce one batch; the partition response (error_code, base_offset, ...)."""
    from protocol.api import request_class
    from protocol.codec import build

    body = build(request_class(0, version), {
        "transactional_id": txn_id, "acks": acks, "timeout": datetime.timedelta(seconds=10),
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return c.request(0, version, body).responses[0].partition_responses[0]


def list_offset(c: RawClient, topic: str, partition: int = 0, isolation: int = READ_UNCOMMITTED,
                timestamp: int = -1) -> int:
    """ListOffsets v7 (LATEST by default): the LSO for read_committed, else the high watermark."""
    resp = c.call(2, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                        "timestamp": timestamp}]}]})
    p = resp.topics[0].partitions[0]
    assert p.error_code == ErrorCode.none, f"ListOffsets {topic}-{partition}: {p.error_code!r}"
    return int(p.offset)


def lso_hw(bs: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(last stable offset, high watermark) of one partition."""
    with raw(bs) as c:
        return list_offset(c, topic, partition, READ_COMMITTED), list_offset(c, topic, partition, READ_UNCOMMITTED)


# =========================================================================== clients
@dataclass(frozen=True)
class Msg:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def values_of(msgs) -> list:
    return [m.value for m in msgs]


def cf_producer(bs: str, txn_id: str | None = None, **conf):
    """A confluent-kafka Producer, transactional when ``txn_id`` is given."""
    from confluent_kafka import Producer

    cfg = {"bootstrap.servers": bs, "linger.ms": 5, **({"transactional.id": txn_id} if txn_id else {})}
    cfg.update(conf)
    return Producer(cfg)


def drain(bs: str, topic: str, partitions: int | Iterable[int] = 1, *, isolation: str = "read_committed",
          timeout: float = 30.0, grace: float = 0.3) -> list[Msg]:
    """Every record a consumer at ``isolation`` sees, read from offset 0 with confluent-kafka.

    Reads until each partition's position reaches its end offset for that isolation level (the
    LSO for read_committed, else the high watermark) as ListOffsets answers when the read
    starts, then ``grace`` seconds more.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    parts = list(range(partitions)) if isinstance(partitions, int) else list(partitions)
    level = READ_COMMITTED if isolation == "read_committed" else READ_UNCOMMITTED
    with raw(bs) as c:
        ends = {p: list_offset(c, topic, p, level) for p in parts}
    cons = Consumer({"bootstrap.servers": bs, "group.id": unique("eos-drain"), "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "isolation.level": isolation, "fetch.wait.max.ms": 50})
    cons.assign([TopicPartition(topic, p, 0) for p in parts if ends[p] > 0])
    out: list[Msg] = []

    def take(timeout_s: float) -> None:
        for m in cons.consume(10000, timeout_s):
            if m.error():
                raise KafkaException(m.error())
            out.append(Msg(m.partition(), m.offset(), m.key(), m.value()))

    try:
        deadline = time.monotonic() + timeout
        live = [p for p in parts if ends[p] > 0]
        while live and time.monotonic() < deadline:
            take(0.2)
            pos = {tp.partition: tp.offset for tp in cons.position([TopicPartition(topic, p) for p in live])}
            live = [p for p in live if pos[p] < ends[p]]
        assert not live, f"{topic}: partitions {live} did not reach their end offsets {ends} in {timeout}s"
        grace_end = time.monotonic() + grace
        while time.monotonic() < grace_end:
            take(0.1)
    finally:
        cons.close()
    return sorted(out, key=lambda m: (m.partition, m.offset))


# =========================================================================== segment files
@dataclass(frozen=True)
class StoredBatch:
    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    control: int | None  # None for data, else CONTROL_ABORT / CONTROL_COMMIT
    coordinator_epoch: int | None
    values: tuple


def data_batches(log_dir: str, topic: str, partition: int = 0) -> list[StoredBatch]:
    """Every batch in the partition's segment files (same on-disk format on both targets)."""
    out = []
    for path in sorted(glob.glob(os.path.join(log_dir, f"{topic}-{partition}", "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        for pos, h in rb.iter_batches(data):
            _, recs = rb.decode_records(data, pos)
            control = coord_epoch = None
            if h.is_control:
                control = struct.unpack_from(">hh", recs[0].key)[1]
                coord_epoch = struct.unpack_from(">hi", recs[0].value)[1]
            out.append(StoredBatch(h.base_offset, h.last_offset, h.producer_id, h.producer_epoch,
                                   h.base_sequence, h.is_transactional, control, coord_epoch,
                                   () if h.is_control else tuple(r.value for r in recs)))
    return out
