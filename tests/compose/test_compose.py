"""Acceptance 6: the three-node cluster of docker-compose.yml, driven from the host.

``compose/stack.sh up`` builds the image (making the base image and starting dockerd first if
needed) and starts etcd and three brokers under a project of this test's own, on free
published ports; the clients reach the brokers only through those EXTERNAL listeners. A
transactional produce (one committed and one aborted transaction) is read back exactly by a
read_committed consumer; then one broker container is killed and the same producer commits
again, an acks=all producer writes, and a consumer reads everything exactly once from the two
brokers left. ``docker-compose down -v`` removes containers, network and volumes at the end.

Skipped, with the reason, where docker cannot be had (not root, no apt-get, dockerd does not
start); a failing build or start-up is a failure.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker_process import REPO
from tests.support.cluster import describe, wait_for
from tools.devcluster import free_port

# Cold (packages, dockerd, debootstrap, the build) it takes about two minutes; leave room.
pytestmark = [pytest.mark.compose, pytest.mark.timeout(900)]

STACK = str(REPO / "compose" / "stack.sh")
PARTITIONS = 3
COMMITTED, ABORTED, AFTER_KILL, PLAIN = 300, 50, 200, 200


class Stack:
    """One compose project on free published ports (``secrets``: the secure profile's
    directory, and the stack is started with ``up --secure``)."""

    def __init__(self, secrets: Path | None = None) -> None:
        self.project = f"kbroker-test-{uuid.uuid4().hex[:6]}"
        self.ports = {n: free_port() for n in (1, 2, 3)}
        self.secrets = secrets
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

    def kill(self, service: str) -> None:
        subprocess.run(["docker", "kill", self.container(service)], check=True, capture_output=True,
                       timeout=60)


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


def test_compose_cluster_transactions_survive_a_killed_broker(stack):
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

