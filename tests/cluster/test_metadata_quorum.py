"""Three nodes, each a broker and an etcd member beside it (the default layout): the cluster
survives the loss of any one node as three combined KRaft nodes do, and a lost quorum of the
metadata store as the data plane can.

- A whole machine lost (its broker and the member leading etcd's Raft, kill -9, left down):
  acks=all resumes on every partition of an RF-3 / min.insync 2 topic, an RF-3 topic is
  created, a new consumer group reads and commits, a new transactional producer initializes and
  commits, each within 60 s, and every acknowledged record is read back.
- Two members of three down: produce and fetch go on (no leader moves), a metadata change
  answers REQUEST_TIMED_OUT with a line that says why; when a majority is back everything
  resumes by itself, without a broker restart, and nothing acknowledged is lost.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.clients import consume_all, create_topic
from tests.support.cluster import describe, restore, start_cluster, wait_for, wait_isr_complete

PARTITIONS = 6
WITHIN_S = 60.0  # the acceptance bound; each wait below fails past it


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("quorum")))
    assert len(c.etcd_members) == 3, "one etcd member per node by default"
    yield c
    c.stop()


def _acked_on_every_partition(bootstrap: str, topic: str, tag: str, timeout: float) -> tuple[dict, float]:
    """One idempotent acks=all record per partition, retried by the client until acknowledged;
    (partition -> offset, seconds until the last acknowledgement)."""
    acked: dict[int, int] = {}
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": int(timeout * 1000), "linger.ms": 0})
    started = time.monotonic()

    def done(err, msg):
        if err is None:
            acked[msg.partition()] = msg.offset()
    for partition in range(PARTITIONS):
        p.produce(topic, value=f"{tag}-{partition}".encode(), partition=partition, on_delivery=done)
    p.flush(timeout + 5)
    return acked, time.monotonic() - started


def _timed(what: str, fn, timeout: float = WITHIN_S):
    started = time.monotonic()
    result = wait_for(fn, timeout, what, interval=0.2)
    elapsed = time.monotonic() - started
    print(f"{what}: {elapsed:.1f}s")
    return result, elapsed


def _create(bootstrap: str, name: str) -> bool:
    client = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    futures = client.create_topics([NewTopic(name, 3, 3)], operation_timeout=10, request_timeout=15)
    try:
        futures[name].result(20)
    except KafkaException as exc:
        if exc.args[0].code() != 36:  # TOPIC_ALREADY_EXISTS: a retry of one that went through
            raise
    return True


def _group_reads_and_commits(bootstrap: str, topic: str, expected: int) -> bool:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"after-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 6000})
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 20
        while got < expected and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got += 1
        if got < expected:
            return False
        c.commit(asynchronous=False)
        committed = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return sum(tp.offset for tp in committed if tp.offset >= 0) == expected
    finally:
        c.close()


def _transaction_commits(bootstrap: str, topic: str) -> bool:
    txn_id = f"after-{uuid.uuid4().hex[:6]}"
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": 30000})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(topic, value=txn_id.encode(), partition=0)
    p.commit_transaction(20)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": txn_id, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None and msg.value() == txn_id.encode():
                return True
        return False
    finally:
        c.close()


def test_losing_the_machine_of_the_etcd_leader(cluster):
    restore(cluster)
    topic = f"machine-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=PARTITIONS, replication_factor=3,
                 config={"min.insync.replicas": "2"})
    wait_isr_complete(cluster, topic)
    before, _ = _acked_on_every_partition(cluster.bootstrap, topic, "before", 30)
    assert len(before) == PARTITIONS
    victim = wait_for(cluster.etcd_leader, 30, "an etcd leader")
    pids = {i: n.proc.pid for i, n in cluster.nodes.items()}
    cluster.node(victim).kill9()
    cluster.etcd_members[victim].kill9()
    try:
        survivors = ",".join(n.address for i, n in cluster.nodes.items() if i != victim)
        after, took = _acked_on_every_partition(survivors, topic, "after", WITHIN_S)
        print(f"acks=all on all {PARTITIONS} partitions: {took:.1f}s")
        assert sorted(after) == list(range(PARTITIONS)), f"acknowledged on {sorted(after)} only"
        _timed("an RF-3 topic created", lambda: _create(survivors, f"new-{topic}"))
        _timed("a new consumer group read and committed",
               lambda: _group_reads_and_commits(survivors, topic, 2 * PARTITIONS))
        _timed("a new transactional producer committed", lambda: _transaction_commits(survivors, topic))
        assert all(cluster.node(i).proc.pid == pid for i, pid in pids.items() if i != victim)
        got = consume_all(survivors, topic, PARTITIONS, 2 * PARTITIONS + 1, timeout=30)
        values = {m.value() for m in got}
        assert {f"before-{p}".encode() for p in before} | {f"after-{p}".encode() for p in after} <= values
    finally:
        restore(cluster)
    wait_isr_complete(cluster, topic, timeout=90)


@pytest.mark.parametrize("outage_s", [pytest.param(20, id="20s"), pytest.param(60, id="60s", marks=pytest.mark.slow)])
def test_a_lost_quorum_stops_metadata_changes_only_and_everything_resumes(cluster, outage_s):
    """Two members of three down for ``outage_s`` (60 s in `make test-all`), then back."""
    restore(cluster)
    topic = f"quorum-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=3, replication_factor=3)
    leaders = {p: v[0] for p, v in wait_isr_complete(cluster, topic).items()}
    pids = {i: n.proc.pid for i, n in cluster.nodes.items()}
    down = [2, 3]
    for i in down:
        cluster.etcd_members[i].kill9()
    acked, errors = [], []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5})
    started = time.monotonic()
    try:
        n = 0
        while time.monotonic() - started < outage_s:
            p.produce(topic, value=b"during-%06d" % n,
                      on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else errors.append(err))
            p.poll(0.005)
            n += 1
        assert p.flush(30) == 0
        # A metadata change waits, then answers with a line that says why.
        client = AdminClient({"bootstrap.servers": cluster.bootstrap})
        refused = client.create_topics([NewTopic(f"during-{topic}", 1, 3)], operation_timeout=30,
                                       request_timeout=40)
        with pytest.raises(KafkaException) as info:
            refused[f"during-{topic}"].result(45)
        error = info.value.args[0]
        print(f"during the lost quorum, CreateTopics answered {error.name()}: {error.str()}")
        assert error.code() == 7 and "metadata store unreachable" in error.str()  # REQUEST_TIMED_OUT
        assert {p_: v[0] for p_, v in describe(cluster.bootstrap, topic).items()} == leaders
    finally:
        cluster.start_etcd()
    assert errors == [] and len(acked) == n, f"{len(errors)} records failed while the quorum was lost"
    _timed("a topic created once a majority was back", lambda: _create(cluster.bootstrap, f"after-{topic}"))
    assert {i: n.proc.pid for i, n in cluster.nodes.items()} == pids, "no broker restarted"
    assert set(cluster.registered_brokers()) == set(cluster.nodes)
    records = consume_all(cluster.bootstrap, topic, 3, len(acked), timeout=60)
    assert sorted(m.value() for m in records) == sorted(acked)
