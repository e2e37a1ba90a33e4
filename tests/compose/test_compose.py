"""Acceptance 6: the three-node cluster of docker-compose.yml, driven from the host.

``compose/stack.sh up`` builds the image (making the base image and starting dockerd first if
needed) and starts three nodes (an etcd member and a broker each) under a project of this
test's own, on free published ports; the clients reach the brokers only through those EXTERNAL
listeners. A transactional produce (one committed and one aborted transaction) is read back
exactly by a read_committed consumer; then one broker container is killed and the same producer
commits again, an acks=all producer writes, and a consumer reads everything exactly once from
the two brokers left. Then (the killed broker started again) a whole node is lost: broker1 and
etcd1 are killed together and left down, and within a bounded time an idempotent producer is
acknowledged on every partition, a topic is created, a new group reads and commits and a new
transactional producer commits, with nothing acknowledged lost. ``docker-compose down -v``
removes containers, network and volumes at the end.

Skipped, with the reason, where docker cannot be had (not root, no apt-get, dockerd does not
start); a failing build or start-up is a failure.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from coordinator.group.metadata import partition_for as group_partition
from coordinator.transaction.log import partition_for as transaction_partition
from tests.support.broker_process import REPO
from tests.support.cluster import describe, wait_for
from tools.devcluster import free_port

# Cold (packages, dockerd, debootstrap, the build) it takes about two minutes; leave room.
pytestmark = [pytest.mark.compose, pytest.mark.timeout(900)]

STACK = str(REPO / "compose" / "stack.sh")
PARTITIONS = 3
COMMITTED, ABORTED, AFTER_KILL, PLAIN = 300, 50, 200, 200
NODE_LOSS_BOUND_S = 60.0  # what losing a whole node may cost each client operation


class Stack:
    """One compose project on free published ports (``secrets``: the secure profile's
    directory, and the stack is started with ``up --secure``)."""

    def __init__(self, secrets: Path | None = None) -> None:
        self.project = f"kbroker-test-{uuid.uuid4().hex[:6]}"
        self.ports = {n: free_port() for n in (1, 2, 3)}
        self.secrets = secrets
        self.killed: list[str] = []  # containers killed by a test, for revive()
        self.env = {**os.environ, "COMPOSE_PROJECT_NAME": self.project,
                    **{f"KBROKER_PORT{n}": str(p) for n, p in self.ports.items()},
                    **({"KBROKER_SECRETS_DIR": str(secrets)} if secrets else {})}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    def run(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", STACK, *args], cwd=REPO, env=self.env, capture_output=True,
                              text=True, timeout=timeout)

    def container(self, service: str) -> str:
        out = subprocess.run(["docker-compose", "-f", "docker-compose.yml", "ps", "-q", service], cwd=REPO,
                             env=self.env, capture_output=True, text=True, timeout=60, check=True)
        return out.stdout.strip()

    def kill(self, *services: str) -> float:
        """SIGKILL to the services' containers, in one ``docker kill`` (a whole node at once);
        the monotonic time it was sent (after the slow ``docker-compose ps`` look-ups)."""
        ids = [self.container(s) for s in services]
        sent = time.monotonic()
        subprocess.run(["docker", "kill", *ids], check=True, capture_output=True, timeout=60)
        self.killed += ids
        return sent

    def revive(self) -> None:
        """Start the killed containers again (same volumes: the etcd member rejoins as itself)."""
        if self.killed:
            subprocess.run(["docker", "start", *self.killed], check=True, capture_output=True, timeout=120)
            self.killed = []

    def address(self, node: int) -> str:
        return f"127.0.0.1:{self.ports[node]}"


def started(s: Stack):
    engine = s.run("engine", timeout=600)
    if engine.returncode == 3:
        pytest.skip(f"docker is not available here: {engine.stderr.strip().splitlines()[-1]}")
    assert engine.returncode == 0, engine.stderr[-3000:]
    began = time.monotonic()
    try:
        up = s.run("up", *(["--secure"] if s.secrets else []), timeout=900)
        assert up.returncode == 0, (up.stdout[-3000:], up.stderr[-3000:])
        print(f"compose stack up in {time.monotonic() - began:.0f}s")
        yield s
    finally:
        down = s.run("down", timeout=300)
        assert down.returncode == 0, down.stderr[-3000:]
        assert s.secrets is None or not s.secrets.exists(), "down left the secrets behind"


@pytest.fixture(scope="module")
def stack():
    yield from started(Stack())


@pytest.fixture
def whole_stack(stack):
    """The module's stack with all three nodes up and every partition fully replicated (a
    test before may have killed a container)."""
    stack.revive()
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})

    def whole():
        md = admin.list_topics(timeout=10)
        return len(md.brokers) == 3 and all(p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas)
                                            for t in md.topics.values() for p in t.partitions.values())
    wait_for(whole, 120, "three brokers and every ISR complete", interval=0.5)
    return stack


@pytest.fixture
def secure_stack(tmp_path):
    yield from started(Stack(secrets=tmp_path / "secrets"))


def read_committed(client: str | dict, topic: str, timeout: float = 90.0) -> list[bytes]:
    """Every committed value of ``topic``, reading each partition from 0 up to its last
    stable offset as the brokers answer it when the read starts (``client``: a bootstrap
    string, or a client's settings)."""
    conf = {"bootstrap.servers": client} if isinstance(client, str) else client
    c = Consumer({**conf, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)}
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            positions = {tp.partition: tp.offset for tp in c.position(c.assignment())}
            if all(positions[p] >= end for p, end in ends.items()):
                return out
            for m in c.consume(1000, 0.5):
                if m.error():
                    raise KafkaException(m.error())
                out.append(m.value())
        raise AssertionError(f"read {len(out)} records, positions {positions}, ends {ends}")
    finally:
        c.close()


def transaction(producer: Producer, topic: str, values: list[bytes], commit: bool = True) -> None:
    producer.begin_transaction()
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=i % PARTITIONS)
    if commit:
        producer.commit_transaction(60)
    else:
        producer.abort_transaction(60)


def wait_full_isr(bootstrap: str, topic: str, size: int) -> dict:
    def complete():
        parts = describe(bootstrap, topic)
        return parts if parts and all(leader >= 0 and len(isr) == size for leader, _, isr in parts.values()) \
            else None
    return wait_for(complete, 90, f"{topic}: a leader and an ISR of {size} everywhere", interval=0.5)


def test_compose_cluster_transactions_survive_a_killed_broker(whole_stack):
    stack = whole_stack
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    # Through the EXTERNAL listener every broker is advertised at its published port.
    brokers = wait_for(lambda: {b.id: b.port for b in admin.list_topics(timeout=10).brokers.values()}
                       if len(admin.list_topics(timeout=10).brokers) == 3 else None, 60, "three brokers")
    assert brokers == stack.ports

    topic = f"compose-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(30)
    wait_full_isr(stack.bootstrap, topic, 3)

    producer = Producer({"bootstrap.servers": stack.bootstrap, "transactional.id": f"tx-{topic}",
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    committed = [b"committed-%05d" % i for i in range(COMMITTED)]
    transaction(producer, topic, committed)
    transaction(producer, topic, [b"aborted-%05d" % i for i in range(ABORTED)], commit=False)
    assert sorted(read_committed(stack.bootstrap, topic)) == sorted(committed)

    victim = describe(stack.bootstrap, topic)[0][0]  # partition 0's leader
    stack.kill(f"broker{victim}")
    survivors = ",".join(f"127.0.0.1:{p}" for n, p in stack.ports.items() if n != victim)
    wait_full_isr(survivors, topic, 2)

    after_kill = [b"after-kill-%05d" % i for i in range(AFTER_KILL)]
    transaction(producer, topic, after_kill)
    producer.flush(30)
    plain = [b"plain-%05d" % i for i in range(PLAIN)]
    p2 = Producer({"bootstrap.servers": survivors, "acks": "all", "enable.idempotence": True})
    for i, v in enumerate(plain):
        p2.produce(topic, value=v, partition=i % PARTITIONS)
    assert p2.flush(60) == 0

    got = read_committed(survivors, topic)
    assert len(got) == len(set(got)), "a record was read twice"
    assert sorted(got) == sorted(committed + after_kill + plain)


def led_by(admin: AdminClient, node: int, internal: str, partition_of, prefix: str) -> str:
    """An id (group or transactional) whose coordinator is ``node`` now: its partition of
    ``internal`` is led there, so losing ``node`` moves the coordinator too (any id when the
    internal topic does not exist yet)."""
    topic = admin.list_topics(timeout=10).topics.get(internal)
    for _ in range(1000):
        candidate = f"{prefix}-{uuid.uuid4().hex[:6]}"
        if topic is None or topic.partitions[partition_of(candidate, len(topic.partitions))].leader == node:
            return candidate
    raise AssertionError(f"no id of {internal} led by {node}")


def delivered(reports: dict):
    """A delivery callback keeping every report, (error, offset, time), by partition."""
    def report(err, msg):
        reports.setdefault(msg.partition(), []).append((err, msg.offset(), time.monotonic()))
    return report


def test_compose_cluster_survives_losing_a_whole_node(whole_stack):
    """broker1 and etcd1 (node 1: KRaft's combined layout) killed together and left down:
    within NODE_LOSS_BOUND_S of the kill, each measured from it and run side by side, (a) the
    idempotent acks=all producer of before the kill is acknowledged on every partition of its
    RF-3, min ISR 2 topic (partition 0 was led by broker1), (b) a new RF-3 topic is created and
    has leaders, (c) a new group, coordinated by broker1 before the kill, reads and commits, and
    (d) a new transactional producer, likewise, initializes, commits and is read back by a
    read_committed consumer. Everything acknowledged, before or after, is read back once."""
    stack = whole_stack
    survivors = ",".join(stack.address(n) for n in (2, 3))
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    topic = f"node-loss-{uuid.uuid4().hex[:6]}"
    # Broker 1 first in partition 0's replicas: it leads it when the node is lost.
    admin.create_topics([NewTopic(topic, PARTITIONS, replica_assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]],
                                  config={"min.insync.replicas": "2"})])[topic].result(30)
    wait_for(lambda: all(leader == r[0] and len(isr) == 3 for leader, r, isr in describe(stack.bootstrap, topic).values()),
             60, f"{topic}: the preferred leaders and an ISR of 3", interval=0.5)
    group = led_by(admin, 1, "__consumer_offsets", group_partition, "node-loss-group")
    txn_id = led_by(admin, 1, "__transaction_state", transaction_partition, "node-loss-tx")

    producer = Producer({"bootstrap.servers": stack.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": int(NODE_LOSS_BOUND_S * 1000)})
    before_reports: dict = {}
    before = [b"before-%04d" % i for i in range(30)]
    for i, v in enumerate(before):
        producer.produce(topic, value=v, partition=i % PARTITIONS, on_delivery=delivered(before_reports))
    assert producer.flush(30) == 0
    assert all(err is None for r in before_reports.values() for err, _, _ in r), before_reports
    before_ends = {p: max(o for _, o, _ in r) + 1 for p, r in before_reports.items()}

    killed_at = stack.kill("broker1", "etcd1")
    kill_s = time.monotonic() - killed_at
    deadline = killed_at + NODE_LOSS_BOUND_S

    def remaining() -> float:
        left = deadline - time.monotonic()
        assert left > 0, f"over {NODE_LOSS_BOUND_S:.0f}s since the node was lost"
        return left

    after = [b"after-%04d" % i for i in range(PARTITIONS * 3)]

    def acknowledged() -> dict:  # (a): one delivery report per partition, each without error
        reports: dict = {}
        for i, v in enumerate(after):
            producer.produce(topic, value=v, partition=i % PARTITIONS, on_delivery=delivered(reports))
        while producer.flush(min(1.0, remaining())) > 0:
            pass
        assert sorted(reports) == list(range(PARTITIONS)), reports
        assert all(err is None for r in reports.values() for err, _, _ in r), reports
        return {p: max(t for _, _, t in r) - killed_at for p, r in reports.items()}

    def created() -> float:  # (b): a new RF-3 topic, with a leader on each partition
        name = f"{topic}-new"
        while True:
            try:
                admin.create_topics([NewTopic(name, PARTITIONS, 3)], request_timeout=min(10, remaining()))[name] \
                    .result(remaining())
                break
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:  # an earlier try's, answer lost
                    break
                assert err.retriable() or err.code() in (KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT), err
                time.sleep(0.2)
        wait_for(lambda: (p := describe(survivors, name)) and len(p) == PARTITIONS
                 and all(len(r) == 3 and leader in (2, 3) for leader, r, _ in p.values()),
                 remaining(), f"{name}: RF 3 with live leaders", interval=0.2)
        return time.monotonic() - killed_at

    def group_committed() -> float:  # (c): a new group reads what was there and commits it
        c = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
        try:
            c.subscribe([topic])
            read: list[bytes] = []
            while True:
                for m in c.consume(100, min(0.5, remaining())):
                    if m.error():
                        raise KafkaException(m.error())
                    read.append(m.value())
                positions = {tp.partition: tp.offset for tp in c.position(c.assignment())}
                if len(positions) == PARTITIONS and all(positions[p] >= e for p, e in before_ends.items()):
                    break
            assert set(before) <= set(read)
            while True:
                try:
                    committed = c.commit(asynchronous=False)
                    break
                except KafkaException as exc:
                    assert exc.args[0].retriable(), exc
                    remaining()
                    time.sleep(0.2)
            assert all(tp.error is None for tp in committed), committed
            stored = {tp.partition: tp.offset for tp in c.committed(c.assignment(), timeout=remaining())}
            assert stored == positions, (stored, positions)
            return time.monotonic() - killed_at
        finally:
            c.close()

    transactional = [b"txn-%04d" % i for i in range(PARTITIONS * 3)]

    def transaction_read() -> float:  # (d): a new transactional producer commits; read_committed reads it
        tp = Producer({"bootstrap.servers": stack.bootstrap, "transactional.id": txn_id,
                       "transaction.timeout.ms": 60000})
        tp.init_transactions(remaining())
        transaction(tp, topic, transactional)  # commits (retrying inside librdkafka) or raises
        assert set(transactional) <= set(read_committed(stack.bootstrap, topic, timeout=remaining()))
        return time.monotonic() - killed_at

    with ThreadPoolExecutor(4) as pool:
        jobs = {k: pool.submit(f) for k, f in (("a", acknowledged), ("b", created), ("c", group_committed),
                                                  ("d", transaction_read))}
        took = {k: j.result() for k, j in jobs.items()}
    acks = took["a"]
    print(f"node 1 lost (docker kill broker1 etcd1: {kill_s:.1f}s); since the kill: "
          f"(a) acks=all acknowledged on every partition in {max(acks.values()):.1f}s "
          f"({', '.join(f'p{p} {t:.1f}s' for p, t in sorted(acks.items()))}; p0 was led by broker1), "
          f"(b) RF-3 topic created with leaders in {took['b']:.1f}s, "
          f"(c) new group ({group}) read and committed in {took['c']:.1f}s, "
          f"(d) new transactional producer ({txn_id}) committed and read back in {took['d']:.1f}s")
    for k, t in took.items():
        assert (max(t.values()) if isinstance(t, dict) else t) < NODE_LOSS_BOUND_S, (k, t)

    got = read_committed(survivors, topic)
    assert len(got) == len(set(got)), "a record was read twice"
    assert sorted(got) == sorted(before + after + transactional)


def test_the_secure_profile_admits_only_its_users_over_sasl_ssl(secure_stack):
    """``up --secure``: SASL_SSL on every listener with secrets made at start-up. The printed
    client settings work as they are (three brokers, RF 3 replication between brokers that log
    in to each other, a committed transaction read back); a wrong password and a plaintext
    client are refused, and the secrets are gone after ``down``."""
    settings = (secure_stack.secrets / "client.properties").read_text()
    conf = dict(line.split("=", 1) for line in settings.splitlines() if line)
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["bootstrap.servers"] == secure_stack.bootstrap
    admin = AdminClient(conf)
    brokers = wait_for(lambda: {b.id: b.port for b in admin.list_topics(timeout=10).brokers.values()}
                       if len(admin.list_topics(timeout=10).brokers) == 3 else None, 60, "three brokers")
    assert brokers == secure_stack.ports
    topic = f"secure-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(30)
    producer = Producer({**conf, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(60)
    values = [b"secure-%03d" % i for i in range(30)]
    transaction(producer, topic, values)
    assert sorted(read_committed(conf, topic)) == sorted(values)

    for refused in ({**conf, "sasl.password": "wrong"},
                    {"bootstrap.servers": secure_stack.bootstrap, "socket.timeout.ms": 3000}):
        with pytest.raises(KafkaException):
            AdminClient({**refused, "log_level": 0}).list_topics(timeout=5)

