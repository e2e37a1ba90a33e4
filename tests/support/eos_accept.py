"""Shared machinery of the exactly-once acceptance tests (tests/integration/test_eos_*.py).

Target selection: with ``KBROKER_EOS_TARGET=kafka`` the module fixture :func:`eos_broker`
starts a real Apache Kafka (compat/kafka/kraft.py, KRaft single node) so the same tests
can be validated against the reference; otherwise it is our broker (the session ``broker``
fixture, or a module broker process when the module declares ``EOS_BROKER_CONFIG``).
Tests that kill -9 and restart the broker use :func:`restartable_broker`: ours, or a Kafka
node of their own restarted over its data; those that need one of our fault points carry
:data:`needs_fault_points`.

Also here: a raw-protocol toolkit for the transactional APIs (every field name is checked
against the kio request class, since ``protocol.codec.build`` silently defaults unknown
ones; DescribeTransactions is decoded by hand because kio refuses its -1 start time), a
reader of ``__transaction_state`` and data-partition segment files, and client helpers
(confluent-kafka) to load input and to drain a topic at a given isolation level.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import io
import os
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from kio.serial import entity_writer

from protocol import records as rb
from protocol.api import request_class
from protocol.codec import build
from protocol.errors import ErrorCode
from tests.support.clients import produce_when_room
from tests.support.eos import KafkaTarget
from tests.support.raw import RawClient, TxnDescription, describe_transaction  # noqa: F401

TARGET = os.environ.get("KBROKER_EOS_TARGET", "").strip().lower()
IS_KAFKA = TARGET == "kafka"

needs_fault_points = pytest.mark.skipif(IS_KAFKA, reason="needs a test fault point (test.fault.points)")


def kafka_falls_short(reason: str):
    """A test Kafka 4.3.1 was seen to fail, by ``reason``: expected to fail there (not strict:
    a run where Kafka gets it right passes), run as any other test on ours."""
    return pytest.mark.xfail(IS_KAFKA, reason=f"Kafka 4.3.1 {reason}", strict=False)

# What every Apache Kafka started for these tests gets (our broker gets the same per module
# through EOS_BROKER_CONFIG where a test depends on it): a 1 s timed-out-transaction scan.
ABORT_SCAN_MS = 1000
KAFKA_BASE_CONFIG = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(ABORT_SCAN_MS),
}

# Kafka's TransactionLogValue status ids.
TXN_STATUS = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
              5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}
CONTROL_ABORT, CONTROL_COMMIT = 0, 1

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


# --------------------------------------------------------------------------- the target broker

@dataclass
class EosTarget:
    kind: str  # "kafka" or "ours"
    bootstrap: str
    log_dir: str | None
    log_text: Callable[[], str]

    @property
    def is_kafka(self) -> bool:
        return self.kind == "kafka"


_kafka_cache: dict[str, Any] = {"cfg": None, "kb": None}


def kafka_broker(config: dict[str, str]):
    """One real Kafka at a time, shared by consecutive modules that want the same config."""
    from compat.kafka.kraft import KafkaBroker

    cfg = {**KAFKA_BASE_CONFIG, **config}
    if _kafka_cache["cfg"] != cfg or _kafka_cache["kb"] is None or _kafka_cache["kb"].proc is None:
        if _kafka_cache["kb"] is not None:
            _kafka_cache["kb"].stop()
        _kafka_cache["kb"] = None
        kb = KafkaBroker(extra_config=cfg, heap_opts="-Xmx768m -Xms256m").start()  # has its own atexit stop
        _kafka_cache.update(cfg=cfg, kb=kb)
    return _kafka_cache["kb"]


def kafka_target(kb) -> EosTarget:
    def log_text() -> str:
        try:
            return kb.log_file.read_text(errors="replace")
        except OSError:
            return ""

    return EosTarget("kafka", kb.bootstrap, str(kb.workdir / "data"), log_text)


def ours_target(proc) -> EosTarget:
    return EosTarget("ours", proc.bootstrap, proc.log_dir, proc.output)


class RestartableKafka(KafkaTarget):
    """A Kafka 4.3.1 node of one test with what the restart tests use of a BrokerProcess:
    ``bootstrap``, ``log_dir``, ``overrides``, ``kill9()`` and ``start()`` over the same data."""

    def __init__(self, overrides: dict[str, str]) -> None:
        from compat.kafka.kraft import KafkaBroker

        super().__init__(KafkaBroker(extra_config={**KAFKA_BASE_CONFIG, **overrides},
                                     heap_opts="-Xmx768m -Xms256m").start(), overrides)

    def kill9(self) -> None:
        self.kb.kill9()

    def start(self) -> RestartableKafka:
        self.kb.restart()
        return self

    def stop(self) -> None:
        self.kb.stop()


@pytest.fixture
def restartable_broker(request):
    """Factory of a broker for one test, free to be killed -9 and restarted: ours
    (``own_broker``), or under ``KBROKER_EOS_TARGET=kafka`` a :class:`RestartableKafka`."""
    if not IS_KAFKA:
        yield request.getfixturevalue("own_broker")
        return
    made: list[RestartableKafka] = []

    def make(**overrides: str) -> RestartableKafka:
        made.append(RestartableKafka(overrides))
        return made[-1]

    yield make
    for kafka in made:
        kafka.stop()


@pytest.fixture(scope="module")
def eos_broker(request, tmp_path_factory):
    """The broker under test for one module (see the module docstring)."""
    config = dict(getattr(request.module, "EOS_BROKER_CONFIG", {}))
    if IS_KAFKA:
        yield kafka_target(kafka_broker(config))
        return
    if not config:
        yield ours_target(request.getfixturevalue("broker"))
        return
    from tests.support.broker_process import BrokerProcess

    name = request.module.__name__.rsplit(".", 1)[-1]
    proc = BrokerProcess(str(tmp_path_factory.mktemp(name) / "data"), config)
    proc.start()
    yield ours_target(proc)
    proc.stop()


@contextlib.contextmanager
def fresh_broker(own_broker, **config: str):
    """A broker that has never seen a transaction: ours via ``own_broker(**config)``; a
    newly started Kafka (stopped on exit) under the kafka target."""
    if IS_KAFKA:
        from compat.kafka.kraft import kraft_broker

        with kraft_broker(extra_config={**KAFKA_BASE_CONFIG, **config}, heap_opts="-Xmx512m -Xms256m") as kb:
            yield kafka_target(kb)
    else:
        yield ours_target(own_broker(**config))


# --------------------------------------------------------------------------- small utilities

def wait_until(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll ``pred`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def now_ms() -> int:
    return int(time.time() * 1000)


# --------------------------------------------------------------------------- raw protocol

RETRIABLE_COORDINATOR = {ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
                         ErrorCode.not_coordinator}


def _check_fields(api_key: int, version: int, fields: dict) -> None:
    names = {f.name for f in dataclasses.fields(request_class(api_key, version))}
    unknown = set(fields) - names
    assert not unknown, f"api {api_key} v{version} has no fields {sorted(unknown)} (has {sorted(names)})"


def call(c: RawClient, api_key: int, version: int, fields: dict) -> Any:
    """RawClient.call with every top-level field name checked against the request class."""
    _check_fields(api_key, version, fields)
    return c.call(api_key, version, fields)


def call_bytes(c: RawClient, api_key: int, version: int, fields: dict, flexible: bool) -> bytes:
    """Send a request; return the response body bytes (after the response header)."""
    _check_fields(api_key, version, fields)
    cls = request_class(api_key, version)
    out = io.BytesIO()
    entity_writer(cls)(out, build(cls, fields))
    c.correlation_id += 1
    c.send_frame(c.header(api_key, version, c.correlation_id) + out.getvalue())
    frame = c.recv_frame()
    if frame is None:
        raise ConnectionError("broker closed the connection")
    (cid,) = struct.unpack_from(">i", frame, 0)
    assert cid == c.correlation_id
    return frame[5:] if flexible else frame[4:]


def create_topic(bs: str, name: str, partitions: int = 1, config: dict | None = None,
                 timeout: float = 20.0) -> None:
    """Create a topic and wait until every partition has a leader answering ListOffsets."""
    from tests.support.clients import create_topic as create

    create(bs, name, partitions, config)
    with RawClient(bs) as c:
        def ready():
            r = call(c, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": name, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                               "timestamp": -1} for p in range(partitions)]}]})
            return all(p.error_code == ErrorCode.none for t in r.topics for p in t.partitions)
        wait_until(ready, timeout, f"leaders for {name}", interval=0.1)


def find_coordinator(c: RawClient, key: str, key_type: int = 1, timeout: float = 30.0):
    """FindCoordinator v3, retried while the internal topic is created or loaded."""
    def attempt():
        r = call(c, 10, 3, {"key": key, "key_type": key_type})
        return r if r.error_code == ErrorCode.none else None
    return wait_until(attempt, timeout, f"a coordinator for {key!r}", interval=0.2)


def init_producer_id(c: RawClient, transactional_id: str | None, timeout_ms: int = 60000,
                     producer_id: int = -1, producer_epoch: int = -1, version: int = 4,
                     retry: Iterable[int] = (), deadline: float = 30.0):
    """InitProducerId; coordinator-not-ready errors (and ``retry``) are retried until ``deadline``."""
    retry = RETRIABLE_COORDINATOR | set(retry)
    fields = {"transactional_id": transactional_id, "transaction_timeout": timeout_ms}
    if version >= 3:
        fields.update(producer_id=producer_id, producer_epoch=producer_epoch)
    if transactional_id is not None:
        find_coordinator(c, transactional_id)
    end = time.monotonic() + deadline
    while True:
        r = call(c, 22, version, fields)
        if r.error_code not in retry or time.monotonic() > end:
            return r
        time.sleep(0.1)


def add_partitions(c: RawClient, transactional_id: str, producer_id: int, producer_epoch: int,
                   topics: dict[str, list[int]], version: int = 3, retry: Iterable[int] = (),
                   deadline: float = 30.0) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn (client layout, v0-3); returns {(topic, partition): error_code}."""
    retry = RETRIABLE_COORDINATOR | set(retry)
    fields = {"v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": producer_id,
              "v3_and_below_producer_epoch": producer_epoch,
              "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    end = time.monotonic() + deadline
    while True:
        r = call(c, 24, version, fields)
        out = {(t.name, p.partition_index): p.partition_error_code
               for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}
        if not set(out.values()) & retry or time.monotonic() > end:
            return out
        time.sleep(0.1)


def end_txn(c: RawClient, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
            version: int = 3, retry: Iterable[int] = (), deadline: float = 30.0) -> int:
    retry = RETRIABLE_COORDINATOR | set(retry)
    fields = {"transactional_id": transactional_id, "producer_id": producer_id,
              "producer_epoch": producer_epoch, "committed": commit}
    end = time.monotonic() + deadline
    while True:
        r = call(c, 26, version, fields)
        if r.error_code not in retry or time.monotonic() > end:
            return r.error_code
        time.sleep(0.1)


def txn_state(c: RawClient, transactional_id: str) -> str | None:
    s = describe_transaction(c, transactional_id)
    return s.transaction_state if s.error_code == ErrorCode.none else None


def describe_producers(c: RawClient, topic: str, partition: int = 0) -> list:
    r = call(c, 61, 0, {"topics": [{"name": topic, "partition_indexes": [partition]}]})
    p = r.topics[0].partitions[0]
    assert p.error_code == ErrorCode.none, p
    return list(p.active_producers)


def batch(values: list[bytes], producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
          transactional: bool = False, timestamp: int | None = None) -> bytes:
    return bytes(rb.build_batch([(b"k", v) for v in values],
                                timestamp=now_ms() if timestamp is None else timestamp,
                                producer_id=producer_id, producer_epoch=producer_epoch,
                                base_sequence=base_sequence, transactional=transactional))


def produce(c: RawClient, topic: str, records: bytes, transactional_id: str | None = None,
            partition: int = 0, version: int = 9, acks: int = -1):
    """One-partition Produce; returns the partition response (error_code, base_offset, ...)."""
    r = call(c, 0, version, {"transactional_id": transactional_id, "acks": acks, "timeout": 10000,
                             "topic_data": [{"name": topic, "partition_data": [
                                 {"index": partition, "records": records}]}]})
    return r.responses[0].partition_responses[0]


def list_offset(c: RawClient, topic: str, partition: int, isolation: int, timestamp: int = -1) -> int:
    """ListOffsets v7: LATEST (-1) is the high watermark, or the LSO with read_committed."""
    r = call(c, 2, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                        "timestamp": timestamp}]}]})
    p = r.topics[0].partitions[0]
    assert p.error_code == ErrorCode.none, p
    return p.offset


def lso_hw(c: RawClient, topic: str, partition: int = 0) -> tuple[int, int]:
    return list_offset(c, topic, partition, READ_COMMITTED), list_offset(c, topic, partition, READ_UNCOMMITTED)


def fetch_batches(c: RawClient, topic: str, partition: int = 0, isolation: int = READ_UNCOMMITTED,
                  offset: int = 0) -> tuple[list[tuple[rb.BatchHeader, list[rb.Record]]], Any]:
    """Every batch from ``offset`` up to what the fetch exposes (HW, or LSO if read_committed),
    control batches included; also the last partition response (for last_stable_offset,
    aborted_transactions)."""
    out: list = []
    last = None
    for _ in range(10_000):
        r = call(c, 1, 11, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 8 << 20,
                            "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
                            "topics": [{"topic": topic, "partitions": [
                                {"partition": partition, "fetch_offset": offset, "log_start_offset": -1,
                                 "partition_max_bytes": 8 << 20, "current_leader_epoch": -1}]}],
                            "forgotten_topics_data": [], "rack_id": ""})
        p = r.responses[0].partitions[0]
        assert p.error_code == ErrorCode.none, p
        last = p
        data = bytes(p.records or b"")
        progressed = False
        for pos, h in rb.iter_batches(data):
            if pos + h.size > len(data):
                break
            if h.next_offset <= offset:
                continue
            out.append(rb.decode_records(data, pos))
            offset = h.next_offset
            progressed = True
        if not progressed:
            return out, last
    raise AssertionError("fetch did not finish")


def control_type(rec: rb.Record) -> int:
    return struct.unpack(">hh", rec.key)[1]


def markers(batches) -> list[tuple[int, int, int, int]]:
    """(offset, producer_id, producer_epoch, control type) of every control record."""
    return [(recs[0].offset, h.producer_id, h.producer_epoch, control_type(recs[0]))
            for h, recs in batches if h.is_control]


# --------------------------------------------------------------------------- segment files (our broker)

def read_log_dir_batches(log_dir: str, topic: str, partition: int) -> list[tuple[rb.BatchHeader, list[rb.Record]]]:
    """Every whole batch in the partition's .log segment files, in file order."""
    out = []
    for path in sorted(glob.glob(os.path.join(log_dir, f"{topic}-{partition}", "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        for pos, h in rb.iter_batches(data):
            if h.batch_length <= 0 or pos + h.size > len(data):
                break
            out.append(rb.decode_records(data, pos))
    return out


@dataclass
class TxnLogEntry:
    offset: int
    transactional_id: str
    producer_id: int | None = None
    producer_epoch: int | None = None
    timeout_ms: int | None = None
    status: int | None = None  # None for a tombstone
    partitions: list[tuple[str, int]] = dataclasses.field(default_factory=list)

    @property
    def state(self) -> str | None:
        return None if self.status is None else TXN_STATUS.get(self.status, f"?{self.status}")


def decode_txn_log_value(offset: int, txid: str, value: bytes | None) -> TxnLogEntry:
    """Kafka TransactionLogValue: int16 version, producer_id int64, producer_epoch int16,
    transaction_timeout_ms int32, transaction_status int8, then (v0) a nullable array of
    [topic string, partition ids int32 array] and two int64 timestamps; the flexible v1 has
    the same fields with compact arrays and strings (its tagged fields are not read)."""
    if value is None:
        return TxnLogEntry(offset, txid)
    version, pid, epoch, timeout, status = struct.unpack_from(">hqhib", value, 0)
    entry = TxnLogEntry(offset, txid, pid, epoch, timeout, status)
    if version == 0:
        pos = 17
        (n,) = struct.unpack_from(">i", value, pos)
        pos += 4
        for _ in range(max(n, 0)):
            (ln,) = struct.unpack_from(">h", value, pos)
            topic = value[pos + 2: pos + 2 + ln].decode()
            pos += 2 + ln
            (k,) = struct.unpack_from(">i", value, pos)
            pos += 4
            entry.partitions += [(topic, p) for p in struct.unpack_from(f">{k}i", value, pos)]
            pos += 4 * k
    elif version == 1:
        from protocol.codec import read_uvarint

        n, pos = read_uvarint(value, 17)  # compact nullable array: count + 1, 0 = null
        for _ in range(max(n - 1, 0)):
            ln, pos = read_uvarint(value, pos)
            topic = value[pos: pos + ln - 1].decode()
            pos += ln - 1
            k, pos = read_uvarint(value, pos)
            entry.partitions += [(topic, p) for p in struct.unpack_from(f">{k - 1}i", value, pos)]
            pos += 4 * (k - 1)
            tags, pos = read_uvarint(value, pos)
            for _ in range(tags):
                _, pos = read_uvarint(value, pos)
                size, pos = read_uvarint(value, pos)
                pos += size
    return entry


def read_txn_log(log_dir: str, transactional_id: str | None = None) -> list[TxnLogEntry]:
    """Every record of every ``__transaction_state`` partition in ``log_dir`` (key: int16
    version 0 + transactional id string), optionally of one transactional id."""
    out = []
    for d in sorted(glob.glob(os.path.join(log_dir, "__transaction_state-*"))):
        partition = int(d.rsplit("-", 1)[1])
        for h, recs in read_log_dir_batches(log_dir, "__transaction_state", partition):
            if h.is_control:
                continue
            for r in recs:
                (ln,) = struct.unpack_from(">h", r.key, 2)
                txid = r.key[4:4 + ln].decode()
                if transactional_id is None or txid == transactional_id:
                    out.append(decode_txn_log_value(r.offset, txid, r.value))
    return out


# --------------------------------------------------------------------------- clients

def load_input(bootstrap: str, topic: str, n: int, partitions: int, prefix: str = "in") -> list[bytes]:
    """``n`` distinct values produced (idempotently, not transactionally), round robin."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                  "batch.num.messages": 2000})
    values = [f"{prefix}-{i:06d}".encode() for i in range(n)]
    errors = []
    for i, v in enumerate(values):
        produce_when_room(p, topic, 0.1, value=v, key=b"%d" % i, partition=i % partitions,
                          on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(60) == 0
    assert not errors, errors[:3]
    return values


@dataclass(frozen=True)
class Msg:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def end_offsets(bootstrap: str, topic: str, partitions: int, isolation: int) -> dict[int, int]:
    with RawClient(bootstrap) as c:
        return {p: list_offset(c, topic, p, isolation) for p in range(partitions)}


def drain(bootstrap: str, topic: str, partitions: int = 1, isolation: str = "read_committed",
          timeout: float = 60.0, **conf) -> list[Msg]:
    """Everything a fresh confluent consumer at ``isolation`` can read now: it reads each
    partition from 0 until the partition's EOF at or past the end offset it had when
    called (the LSO for read_committed, the high watermark otherwise)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    ends = end_offsets(bootstrap, topic, partitions,
                       READ_COMMITTED if isolation == "read_committed" else READ_UNCOMMITTED)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"drain-{topic}", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True,
                  "fetch.wait.max.ms": 50, **conf})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[Msg] = []
    done = {p for p, e in ends.items() if e == 0}
    deadline = time.monotonic() + timeout
    try:
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"drain {topic} timed out: ends {ends}, done {done}, got {len(out)}"
            for m in c.consume(10000, 0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= ends[m.partition()]:
                            done.add(m.partition())
                        continue
                    raise KafkaException(err)
                out.append(Msg(m.partition(), m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return out


def values_of(msgs: Iterable[Msg]) -> list[bytes]:
    return [m.value for m in sorted(msgs, key=lambda m: (m.partition, m.offset))]


def wait_stable(bs: str, topic: str, partitions: int = 1, timeout: float = 20.0) -> dict[int, int]:
    """Wait until no transaction is open or unmarked on any partition (LSO == HW)."""
    def check():
        with RawClient(bs) as c:
            pairs = {p: lso_hw(c, topic, p) for p in range(partitions)}
        return {p: hw for p, (lso, hw) in pairs.items()} if all(a == b for a, b in pairs.values()) else None
    return wait_until(check, timeout, f"LSO to reach the high watermark on {topic}")


def cf_producer(bootstrap: str, transactional_id: str | None = None, **conf):
    from confluent_kafka import Producer

    base = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    if transactional_id is not None:
        base["transactional.id"] = transactional_id
    return Producer({**base, **conf})


@contextlib.contextmanager
def raw(bootstrap: str, timeout: float = 15.0):
    c = RawClient(bootstrap, timeout=timeout)
    try:
        yield c
    finally:
        c.close()
