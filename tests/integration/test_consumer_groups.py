"""Classic consumer groups with real clients against a real broker process.

confluent-kafka (librdkafka) consumers rebalance over a 6-partition topic when a member leaves
and when one is killed with SIGKILL (in a subprocess, taken over after its session timeout);
every record is consumed and no partition is ever owned by two consumers at once (checked on
the on_assign / on_revoke timeline, CLOCK_MONOTONIC being shared by all processes). Committed
offsets survive a broker restart (graceful and kill -9). kafka-python and aiokafka consumers
join and commit. The admin API lists, describes, alters and deletes groups. A raw-protocol test
pins the error codes of Kafka's classic coordinator. OffsetDelete (kafka-python's admin client and
raw requests) answers as Kafka 4.3.1 does, and deleted offsets stay deleted across a restart.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from kio.serial import entity_reader, entity_writer

from protocol.api import request_class, response_class
from protocol.codec import build
from tests.support.clients import admin, create_topic

REPO = Path(__file__).resolve().parents[2]
SESSION_MS = 6000

# --------------------------------------------------------------------------- helpers


def produce(bootstrap: str, topic: str, partitions: int, start: int, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        p.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert p.flush(30) == 0


def consumer_config(bootstrap: str, group: str, **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": 20000, "enable.auto.commit": True, "auto.commit.interval.ms": 500,
            **extra}


def wait_until(predicate, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Ownership:
    """Who owns which partition, from assign/revoke events stamped with CLOCK_MONOTONIC."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[float, str, str, tuple[int, ...]]] = []
        self.current: dict[str, set[int]] = {}
        self.consumed: set[tuple[int, int]] = set()

    def record(self, who: str, kind: str, partitions, t: float | None = None) -> None:
        with self.lock:
            self.events.append((time.monotonic() if t is None else t, who, kind, tuple(partitions)))
            owned = self.current.setdefault(who, set())
            if kind == "assign":
                owned.update(partitions)
            else:
                owned.difference_update(partitions)

    def owners(self) -> dict[int, list[str]]:
        with self.lock:
            out: dict[int, list[str]] = {}
            for who, parts in self.current.items():
                for p in parts:
                    out.setdefault(p, []).append(who)
            return out

    def assert_exclusive(self) -> None:
        """Replay the timeline: an assign of a partition someone still owns is a violation."""
        owner: dict[int, str] = {}
        with self.lock:
            timeline = sorted(self.events)
        for t, who, kind, parts in timeline:
            for p in parts:
                if kind == "assign":
                    assert owner.get(p) in (None, who), \
                        f"partition {p} assigned to {who} at {t:.3f} while {owner[p]} still owned it"
                    owner[p] = who
                elif owner.get(p) == who:
                    del owner[p]


class ConsumerThread(threading.Thread):
    def __init__(self, name: str, config: dict, topic: str, ownership: Ownership) -> None:
        super().__init__(name=name, daemon=True)
        self.config, self.topic, self.ownership = config, topic, ownership
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        c = Consumer(self.config)
        own = self.ownership
        c.subscribe([self.topic],
                    on_assign=lambda _c, ps: own.record(self.name, "assign", [p.partition for p in ps]),
                    on_revoke=lambda _c, ps: own.record(self.name, "revoke", [p.partition for p in ps]),
                    on_lost=lambda _c, ps: own.record(self.name, "revoke", [p.partition for p in ps]))
        try:
            while not self.stop_event.is_set():
                for m in c.consume(100, 0.2):
                    if m.error():
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            raise KafkaException(m.error())
                        continue
                    with own.lock:
                        own.consumed.add((m.partition(), m.offset()))
        except BaseException as exc:  # surfaced by stop()
            self.error = exc
        finally:
            c.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)
        assert not self.is_alive(), f"{self.name} did not stop"
        if self.error is not None:
            raise self.error


MEMBER_SCRIPT = r"""
import json, sys, time
from confluent_kafka import Consumer
config, topic = json.loads(sys.argv[1]), sys.argv[2]
def emit(**kw):
    kw["t"] = time.monotonic()
    print(json.dumps(kw), flush=True)
c = Consumer(config)
c.subscribe([topic], on_assign=lambda _c, ps: emit(ev="assign", p=[p.partition for p in ps]),
            on_revoke=lambda _c, ps: emit(ev="revoke", p=[p.partition for p in ps]))
emit(ev="started")
while True:
    for m in c.consume(100, 0.2):
        if not m.error():
            emit(ev="msg", p=m.partition(), o=m.offset())
"""


class SubprocessMember:
    """A consumer in its own process, reporting its assignments and records on stdout."""

    def __init__(self, name: str, config: dict, topic: str, ownership: Ownership) -> None:
        self.name, self.ownership = name, ownership
        self.proc = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPT, json.dumps(config), topic],
                                     cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev["ev"] in ("assign", "revoke"):
                self.ownership.record(self.name, ev["ev"], ev["p"], ev["t"])
            elif ev["ev"] == "msg":
                with self.ownership.lock:
                    self.ownership.consumed.add((ev["p"], ev["o"]))

    def kill9(self) -> float:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        killed_at = time.monotonic()
        self.reader.join(10)
        # Whatever it owned, it stopped owning when it died.
        self.ownership.record(self.name, "revoke", sorted(self.ownership.current.get(self.name, ())), killed_at)
        return killed_at

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def all_offsets(partitions: int, total: int) -> set[tuple[int, int]]:
    """(partition, offset) of records 0..total-1 produced round-robin with produce()."""
    return {(i % partitions, i // partitions) for i in range(total)}


# --------------------------------------------------------------------------- librdkafka groups


def test_group_of_three_rebalances_when_one_leaves_and_every_record_is_consumed(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 6)
    produce(broker.bootstrap, topic_name, 6, 0, 300)
    group = f"g-{topic_name}"
    own = Ownership()
    members = [ConsumerThread(f"c{i}", consumer_config(broker.bootstrap, group), topic_name, own) for i in range(3)]
    try:
        for m in members:
            m.start()
        wait_until(lambda: len(own.owners()) == 6 and all(own.current.get(m.name) for m in members),
                   30, "three members sharing six partitions")
        members[0].stop()
        survivors = {m.name for m in members[1:]}
        wait_until(lambda: len(own.owners()) == 6 and {w for ws in own.owners().values() for w in ws} == survivors,
                   30, "the two survivors owning all six partitions")
        produce(broker.bootstrap, topic_name, 6, 300, 300)
        expected = all_offsets(6, 600)
        wait_until(lambda: expected <= own.consumed, 30, "every record consumed")
    finally:
        for m in members:
            if m.is_alive():
                m.stop()
    own.assert_exclusive()
    assert all(len(ws) == 1 for ws in own.owners().values())


def test_killed_member_partitions_are_taken_over_after_its_session_timeout(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 6)
    produce(broker.bootstrap, topic_name, 6, 0, 300)
    group = f"g-{topic_name}"
    own = Ownership()
    victim = SubprocessMember("victim", consumer_config(broker.bootstrap, group), topic_name, own)
    members = []
    try:
        wait_until(lambda: own.current.get("victim"), 30, "the subprocess member to get partitions")
        members = [ConsumerThread(f"c{i}", consumer_config(broker.bootstrap, group), topic_name, own)
                   for i in range(2)]
        for m in members:
            m.start()
        wait_until(lambda: len(own.owners()) == 6 and all(own.current.get(n) for n in ("victim", "c0", "c1")),
                   30, "three members sharing six partitions")
        time.sleep(1)  # let the subprocess consume and commit a little
        victim_partitions = set(own.current["victim"])
        killed_at = victim.kill9()
        produce(broker.bootstrap, topic_name, 6, 300, 300)
        wait_until(lambda: len(own.owners()) == 6, 40, "the survivors taking over the victim's partitions")
        taken_over = max(t for t, who, kind, parts in own.events
                         if kind == "assign" and who != "victim" and victim_partitions & set(parts))
        # Nobody told the coordinator: only the expired session moves the partitions.
        assert taken_over - killed_at >= SESSION_MS / 1000 - 1.5, taken_over - killed_at
        expected = all_offsets(6, 600)
        wait_until(lambda: expected <= own.consumed, 30, "every record consumed")
    finally:
        victim.close()
        for m in members:
            if m.is_alive():
                m.stop()
    own.assert_exclusive()


def test_committed_offsets_survive_broker_restart(own_broker, topic_name):
    b = own_broker()
    create_topic(b.bootstrap, topic_name, 3)
    produce(b.bootstrap, topic_name, 3, 0, 30)
    group = f"g-{topic_name}"
    tps = [TopicPartition(topic_name, p) for p in range(3)]

    # A real member consumes everything and commits synchronously.
    c = Consumer(consumer_config(b.bootstrap, group, **{"enable.auto.commit": False}))
    c.subscribe([topic_name])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 30 and time.monotonic() < deadline:
        seen += sum(1 for m in c.consume(100, 0.5) if not m.error())
    assert seen == 30
    c.commit(asynchronous=False)
    c.close()

    def committed() -> dict[int, tuple[int, str | None]]:
        reader = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
        try:
            return {tp.partition: tp.offset for tp in reader.committed(tps, timeout=20)}
        finally:
            reader.close()

    assert committed() == {0: 10, 1: 10, 2: 10}
    b.restart(kill=False)
    assert committed() == {0: 10, 1: 10, 2: 10}

    simple = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
    simple.commit(offsets=[TopicPartition(topic_name, 1, 4, metadata="checkpoint")], asynchronous=False)
    simple.close()
    b.restart(kill=True)
    assert committed() == {0: 10, 1: 4, 2: 10}
    reader = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
    try:
        [tp] = reader.committed([TopicPartition(topic_name, 1)], timeout=20)
        assert tp.metadata == "checkpoint"
    finally:
        reader.close()
    assert "group_metadata_load_finished" in b.output()


# --------------------------------------------------------------------------- other clients


def test_kafka_python_consumer_joins_a_group_and_commits(broker, topic_name):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    create_topic(broker.bootstrap, topic_name, 2)
    produce(broker.bootstrap, topic_name, 2, 0, 20)
    group = f"g-{topic_name}"
    consumer = KafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
    try:
        got = 0
        deadline = time.monotonic() + 30
        while got < 20 and time.monotonic() < deadline:
            got += sum(len(v) for v in consumer.poll(timeout_ms=500).values())
        assert got == 20
        assert consumer.assignment() == {KTP(topic_name, 0), KTP(topic_name, 1)}
        consumer.commit()
        assert consumer.committed(KTP(topic_name, 0)) == 10
    finally:
        consumer.close()
    assert committed_offsets(broker.bootstrap, group, topic_name, 2) == {0: 10, 1: 10}


async def test_aiokafka_consumer_joins_a_group_and_commits(broker, topic_name):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    create_topic(broker.bootstrap, topic_name, 2)
    produce(broker.bootstrap, topic_name, 2, 0, 20)
    group = f"g-{topic_name}"
    consumer = AIOKafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
    await consumer.start()
    try:
        got = 0
        deadline = time.monotonic() + 30
        while got < 20 and time.monotonic() < deadline:
            got += sum(len(v) for v in (await consumer.getmany(timeout_ms=500)).values())
        assert got == 20
        await consumer.commit()
        assert await consumer.committed(ATP(topic_name, 1)) == 10
    finally:
        await consumer.stop()
    assert committed_offsets(broker.bootstrap, group, topic_name, 2) == {0: 10, 1: 10}


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in
                reader.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)}
    finally:
        reader.close()


def test_admin_lists_describes_alters_and_deletes_groups(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    produce(broker.bootstrap, topic_name, 2, 0, 10)
    group = f"g-{topic_name}"
    a = admin(broker.bootstrap)
    c = Consumer(consumer_config(broker.bootstrap, group, **{"enable.auto.commit": False,
                                                              "client.id": "admin-test-client"}))
    c.subscribe([topic_name])
    try:
        deadline = time.monotonic() + 30
        while len(c.assignment()) < 2:
            assert time.monotonic() < deadline, "no assignment"
            c.poll(0.2)
        c.commit(offsets=[TopicPartition(topic_name, 0, 3), TopicPartition(topic_name, 1, 4)], asynchronous=False)

        listed = a.list_consumer_groups(request_timeout=10).result()
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1 and mine[0].state == ConsumerGroupState.STABLE
        stable_only = a.list_consumer_groups(request_timeout=10, states={ConsumerGroupState.EMPTY}).result()
        assert group not in {g.group_id for g in stable_only.valid}

        desc = a.describe_consumer_groups([group], request_timeout=10)[group].result()
        assert desc.state == ConsumerGroupState.STABLE and desc.partition_assignor == "range"
        [m] = desc.members
        assert m.client_id == "admin-test-client" and m.host.endswith("127.0.0.1")
        assert sorted(tp.partition for tp in m.assignment.topic_partitions) == [0, 1]

        with pytest.raises(KafkaException) as exc:
            a.delete_consumer_groups([group], request_timeout=10)[group].result()
        assert exc.value.args[0].code() == KafkaError.NON_EMPTY_GROUP

        offsets = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result()
        assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 3), (1, 4)]
    finally:
        c.close()

    desc = a.describe_consumer_groups([group], request_timeout=10)[group].result()
    assert desc.state == ConsumerGroupState.EMPTY and not desc.members
    altered = a.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, 0, 7)])])[group].result()
    assert [(tp.partition, tp.offset, tp.error) for tp in altered.topic_partitions] == [(0, 7, None)]
    offsets = a.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])]
    )[group].result()
    assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 7), (1, 4)]

    assert a.delete_consumer_groups([group], request_timeout=10)[group].result() is None
    assert group not in {g.group_id for g in a.list_consumer_groups(request_timeout=10).result().valid}
    offsets = a.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, 0)])])[group].result()
    assert [tp.offset for tp in offsets.topic_partitions] == [-1001]  # OFFSET_INVALID
    with pytest.raises(KafkaException) as exc:
        a.delete_consumer_groups([group], request_timeout=10)[group].result()
    assert exc.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND


# --------------------------------------------------------------------------- Kafka's own tools

KAFKA_RUN = REPO / "compat" / "kafka" / "kafka-run.sh"
KAFKA_JARS = Path(os.environ.get("KAFKA_CACHE", Path.home() / ".cache/kbroker/kafka-4.3.1")) / ".complete"


def kafka_tool(*args: str, timeout: float = 90) -> str:
    res = subprocess.run([str(KAFKA_RUN), *args], capture_output=True, text=True, timeout=timeout,
                         stdin=subprocess.DEVNULL, check=False)
    assert res.returncode == 0, f"{args[0]} exited {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res.stdout


@pytest.mark.kafka_tools
@pytest.mark.skipif(shutil.which("java") is None or not KAFKA_JARS.exists(),
                    reason="needs Java and Kafka's jars (compat/kafka/fetch.sh)")
def test_kafka_tools_read_our_group_records_and_manage_the_group(own_broker, topic_name):
    """Kafka 4.3.1's formatters decode our __consumer_offsets records; kafka-consumer-groups works."""
    b = own_broker()
    create_topic(b.bootstrap, topic_name, 2)
    group = f"g-{topic_name}"
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "client.id": "fmt-client"})
    c.commit(offsets=[TopicPartition(topic_name, 0, 3, metadata="meta"), TopicPartition(topic_name, 1, 4)],
             asynchronous=False)
    c.close()
    records = kafka_tool("kafka-console-consumer", "--bootstrap-server", b.bootstrap, "--topic",
                         "__consumer_offsets", "--from-beginning", "--timeout-ms", "4000",
                         "--formatter", "org.apache.kafka.tools.consumer.OffsetsMessageFormatter")
    decoded = json.loads("[" + records.strip().replace("}{", "},{") + "]")
    mine = sorted((r["key"]["data"]["partition"], r["value"]["version"], r["value"]["data"]["offset"],
                   r["value"]["data"]["metadata"].rstrip("\x00"))  # librdkafka sends a trailing NUL
                  for r in decoded if r["key"]["data"]["group"] == group)
    assert mine == [(0, 3, 3, "meta"), (1, 3, 4, "")]
    described = kafka_tool("kafka-consumer-groups", "--bootstrap-server", b.bootstrap, "--describe",
                           "--group", group, "--state")
    assert group in described and "Empty" in described
    kafka_tool("kafka-consumer-groups", "--bootstrap-server", b.bootstrap, "--delete", "--group", group)
    assert group not in kafka_tool("kafka-consumer-groups", "--bootstrap-server", b.bootstrap, "--list")


# --------------------------------------------------------------------------- raw protocol


class Raw:
    """One connection speaking requests built from kio's schemas (no client library logic)."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self.correlation = 0
        self.pending: list[tuple[int, int, int]] = []

    def send(self, key: int, version: int, body: dict) -> None:
        cls = request_class(key, version)
        out = io.BytesIO()
        entity_writer(cls)(out, build(cls, body))
        self.correlation += 1
        header = struct.pack(">hhi", key, version, self.correlation) + struct.pack(">h", 4) + b"test"
        if cls.__flexible__:
            header += b"\x00"
        frame = header + out.getvalue()
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        self.pending.append((key, version, self.correlation))

    def receive(self):
        key, version, correlation = self.pending.pop(0)
        size = struct.unpack(">i", self._read(4))[0]
        frame = self._read(size)
        assert struct.unpack_from(">i", frame)[0] == correlation
        cls = response_class(key, version)
        pos = 5 if cls.__flexible__ else 4
        return entity_reader(cls)(frame, pos)[0]

    def call(self, key: int, version: int, body: dict):
        self.send(key, version, body)
        return self.receive()

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


def join_body(group: str, member_id: str = "", session_ms: int = SESSION_MS) -> dict:
    return {"group_id": group, "session_timeout": session_ms, "rebalance_timeout": 10000,
            "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"m"}]}


def test_raw_protocol_errors_follow_kafkas_coordinator(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    group = f"g-{topic_name}"
    a, b, side = Raw(broker.bootstrap), Raw(broker.bootstrap), Raw(broker.bootstrap)
    try:
        assert side.call(10, 2, {"key": group, "key_type": 0}).error_code == 0
        assert a.call(11, 5, join_body(group, session_ms=100)).error_code == 26  # INVALID_SESSION_TIMEOUT
        r = a.call(11, 5, join_body(group))
        assert r.error_code == 79 and r.member_id  # MEMBER_ID_REQUIRED
        member_a = r.member_id
        r = a.call(11, 5, join_body(group, member_a))
        assert (r.error_code, r.generation_id, r.leader, len(r.members)) == (0, 1, member_a, 1)
        s = a.call(14, 3, {"group_id": group, "generation_id": 1, "member_id": member_a,
                           "group_instance_id": None, "assignments": [{"member_id": member_a, "assignment": b"A"}]})
        assert (s.error_code, s.assignment) == (0, b"A")
        hb = {"group_id": group, "generation_id": 1, "member_id": member_a, "group_instance_id": None}
        assert side.call(12, 3, hb).error_code == 0
        assert side.call(12, 3, {**hb, "generation_id": 0}).error_code == 22  # ILLEGAL_GENERATION
        assert side.call(12, 3, {**hb, "member_id": "nobody"}).error_code == 25  # UNKNOWN_MEMBER_ID

        def commit(generation: int, member: str, topic: str = topic_name):
            r = side.call(8, 7, {"group_id": group, "generation_id_or_member_epoch": generation,
                                 "member_id": member, "group_instance_id": None,
                                 "topics": [{"name": topic, "partitions": [
                                     {"partition_index": 0, "committed_offset": 5,
                                      "committed_leader_epoch": -1, "committed_metadata": "x"}]}]})
            return r.topics[0].partitions[0].error_code

        assert commit(0, member_a) == 22
        assert commit(1, "nobody") == 25
        assert commit(-1, "") == 25  # simple commits only while the group has no members
        assert commit(1, member_a, "no-such-topic") == 3
        assert commit(1, member_a) == 0

        # A second member joins: its JoinGroup is parked, the coordinator keeps answering.
        b.send(11, 4, join_body(group))
        member_b = b.receive().member_id
        b.send(11, 4, join_body(group, member_b))
        time.sleep(0.3)
        assert side.call(12, 3, hb).error_code == 27  # REBALANCE_IN_PROGRESS
        described = side.call(15, 5, {"groups": [group], "include_authorized_operations": True}).groups[0]
        assert described.group_state == "PreparingRebalance" and len(described.members) == 2
        r = a.call(11, 5, join_body(group, member_a))
        rb = b.receive()
        assert r.generation_id == rb.generation_id == 2 and len(r.members) == 2 and not rb.members
        b.send(14, 3, {"group_id": group, "generation_id": 2, "member_id": member_b,
                       "group_instance_id": None, "assignments": []})
        s = a.call(14, 3, {"group_id": group, "generation_id": 2, "member_id": member_a, "group_instance_id": None,
                           "assignments": [{"member_id": member_a, "assignment": b"A2"},
                                           {"member_id": member_b, "assignment": b"B2"}]})
        assert s.assignment == b"A2" and b.receive().assignment == b"B2"

        assert side.call(42, 2, {"groups_names": [group]}).results[0].error_code == 68  # NON_EMPTY_GROUP
        listed = side.call(16, 4, {"states_filter": ["stable"]}).groups
        assert group in {g.group_id for g in listed}
        left = side.call(13, 3, {"group_id": group, "members": [
            {"member_id": member_a, "group_instance_id": None}, {"member_id": member_b, "group_instance_id": None},
            {"member_id": "ghost", "group_instance_id": None}]})
        assert [m.error_code for m in left.members] == [0, 0, 25]
        described = side.call(15, 5, {"groups": [group, "never-seen"], "include_authorized_operations": False})
        assert [(g.group_state, len(g.members)) for g in described.groups] == [("Empty", 0), ("Dead", 0)]

        fetched = side.call(9, 8, {"groups": [{"group_id": group, "topics": None},
                                              {"group_id": "never-seen", "topics": [
                                                  {"name": topic_name, "partition_indexes": [0]}]}],
                                   "require_stable": True})
        [g1, g2] = fetched.groups
        assert [(t.name, p.partition_index, p.committed_offset, p.metadata)
                for t in g1.topics for p in t.partitions] == [(topic_name, 0, 5, "x")]
        assert g2.topics[0].partitions[0].committed_offset == -1
        fetched = side.call(9, 1, {"group_id": group, "topics": [{"name": topic_name, "partition_indexes": [0]}]})
        assert fetched.topics[0].partitions[0].committed_offset == 5

        assert side.call(42, 2, {"groups_names": [group]}).results[0].error_code == 0
        assert side.call(42, 2, {"groups_names": [group]}).results[0].error_code == 69  # GROUP_ID_NOT_FOUND
        fetched = side.call(9, 7, {"group_id": group, "topics": [{"name": topic_name, "partition_indexes": [0]}],
                                   "require_stable": False})
        assert fetched.topics[0].partitions[0].committed_offset == -1
    finally:
        for conn in (a, b, side):
            conn.close()


# --------------------------------------------------------------------------- OffsetDelete


def simple_commit(bootstrap: str, group: str, offsets: list[tuple[str, int, int]]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=False)
    finally:
        c.close()


def offset_delete(raw: Raw, group: str, topics: dict[str, list[int]]):
    return raw.call(47, 0, {"group_id": group, "topics": [
        {"name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in topics.items()]})


def answered(response) -> list[tuple[str, int, int]]:
    return [(t.name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions]


def test_offset_delete_with_kafka_python_admin(broker, topic_name):
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupIdNotFoundError, NoError

    create_topic(broker.bootstrap, topic_name, 2)
    group = f"g-{topic_name}"
    simple_commit(broker.bootstrap, group, [(topic_name, 0, 3), (topic_name, 1, 4)])
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert client.delete_group_offsets(group, [KTP(topic_name, 0)]) == {KTP(topic_name, 0): NoError}
        with pytest.raises(GroupIdNotFoundError):
            client.delete_group_offsets(f"{group}-unknown", [KTP(topic_name, 0)])
    finally:
        client.close()
    assert committed_offsets(broker.bootstrap, group, topic_name, 2) == {0: -1001, 1: 4}


def test_offset_delete_errors_follow_kafka(broker, topic_name):
    """Pinned against Kafka 4.3.1: unknown partitions answered first and never reach the
    coordinator; a live member's subscribed topic is refused per partition; group errors
    replace the whole answer."""
    other = f"{topic_name}-other"
    create_topic(broker.bootstrap, topic_name, 2)
    create_topic(broker.bootstrap, other, 1)
    group = f"g-{topic_name}"
    member = Consumer(consumer_config(broker.bootstrap, group, **{"enable.auto.commit": False}))
    raw = Raw(broker.bootstrap)
    try:
        member.subscribe([topic_name])
        wait_until(lambda: member.poll(0.2) is None and member.assignment(), 30, "an assignment")
        member.commit(offsets=[TopicPartition(topic_name, 0, 1), TopicPartition(other, 0, 2)],
                      asynchronous=False)
        r = offset_delete(raw, group, {topic_name: [0, 1, 9], "no-such-topic": [0], other: [0]})
        assert r.error_code == 0
        assert answered(r) == [(topic_name, 9, 3), (topic_name, 0, 86), (topic_name, 1, 86),
                               ("no-such-topic", 0, 3), (other, 0, 0)]  # 86 GROUP_SUBSCRIBED_TO_TOPIC
        assert committed_offsets(broker.bootstrap, group, other, 1) == {0: -1001}
        r = offset_delete(raw, f"{group}-unknown", {other: [0]})
        assert (r.error_code, r.topics) == (69, ())  # GROUP_ID_NOT_FOUND
        r = offset_delete(raw, "", {other: [0]})
        assert (r.error_code, r.topics) == (24, ())  # INVALID_GROUP_ID
    finally:
        member.close()
        raw.close()
    # Empty now: the subscribed topic's offsets can go too, and the group stays (Empty).
    raw = Raw(broker.bootstrap)
    try:
        r = offset_delete(raw, group, {topic_name: [0, 1]})
        assert (r.error_code, answered(r)) == (0, [(topic_name, 0, 0), (topic_name, 1, 0)])
        assert committed_offsets(broker.bootstrap, group, topic_name, 2) == {0: -1001, 1: -1001}
        r = offset_delete(raw, group, {topic_name: [0]})
        assert (r.error_code, answered(r)) == (0, [(topic_name, 0, 0)])
    finally:
        raw.close()


def test_deleted_offsets_stay_deleted_after_a_restart(own_broker, topic_name):
    b = own_broker()
    create_topic(b.bootstrap, topic_name, 2)
    group = f"g-{topic_name}"
    simple_commit(b.bootstrap, group, [(topic_name, 0, 7), (topic_name, 1, 8)])
    raw = Raw(b.bootstrap)
    try:
        assert answered(offset_delete(raw, group, {topic_name: [1]})) == [(topic_name, 1, 0)]
    finally:
        raw.close()
    b.restart(kill=True)
    assert committed_offsets(b.bootstrap, group, topic_name, 2) == {0: 7, 1: -1001}
