"""Replication on three broker processes under etcd: acks=all survives the loss of a broker.

Real clients (confluent-kafka) over real sockets; brokers are killed with SIGKILL, paused with
SIGSTOP, or stopped, and return (sometimes with an empty data directory).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid

import pytest
from confluent_kafka import KafkaError, Producer

from tests.integration.test_franz_go_clients import run_scenario
from tests.integration.test_kafka_tools import kafka_libs  # noqa: F401  (fixture)
from tests.integration.test_metrics import scrape
from tests.support.clients import consume_all, create_topic, produce_when_room
from tests.support.cluster import describe, produce_values, wait_for, wait_isr_complete


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _produce(bootstrap: str, topic: str, n: int, *, during: dict | None = None, **config) -> tuple[list, list]:
    """Produce ``n`` records; ``during`` maps a record index to a callable run just before it.
    Returns (acknowledged [(partition, offset, value)], errors)."""
    acked, errors = [], []

    def on_delivery(err, msg):
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            errors.append(err)

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 60000, **config})
    for i in range(n):
        if during and i in during:
            p.flush(30)
            during[i]()
        produce_when_room(p, topic, value=b"r%07d" % i, on_delivery=on_delivery)
        p.poll(0)
    remaining = p.flush(90)
    assert remaining == 0, f"{remaining} records never delivered"
    return acked, errors


def _check_exactly_once_in_order(bootstrap: str, topic: str, partitions: int, acked: list) -> None:
    records = consume_all(bootstrap, topic, partitions, len(acked), timeout=90)
    got = [(m.partition(), m.offset(), m.value()) for m in records]
    assert len(got) == len(acked), f"consumed {len(got)} of {len(acked)} acknowledged records"
    assert sorted(got) == sorted(acked), "consumed records differ from the acknowledged ones"
    values = [v for _, _, v in got]
    assert len(set(values)) == len(values), "a record was consumed twice"
    for p in range(partitions):
        mine = [int(v[1:]) for part, _, v in sorted(got) if part == p]
        assert mine == sorted(mine), f"partition {p} is out of production order"


def _leader(cluster, topic: str, partition: int) -> int:
    return wait_for(lambda: describe(cluster.bootstrap, topic)[partition][0] >= 0
                    and describe(cluster.bootstrap, topic)[partition][0], 30, "a leader")


@pytest.mark.parametrize("records", [pytest.param(20_000, id="20k"),
                                     pytest.param(100_000, id="100k", marks=pytest.mark.slow)])
def test_leader_killed_mid_stream_loses_no_acknowledged_record(healthy, records):
    """Acceptance 1: idempotent acks=all producer, leader kill -9, consumer sees every acked
    record exactly once and in order; the killed broker returns empty and rejoins the ISR."""
    cluster = healthy
    topic = _topic("failover")
    create_topic(cluster.bootstrap, topic, partitions=3, replication_factor=3)
    wait_isr_complete(cluster, topic)
    victim = _leader(cluster, topic, 0)
    killed_at = {}

    def kill_leader():
        killed_at["t"] = time.monotonic()
        cluster.node(victim).kill9()

    acked, errors = _produce(cluster.bootstrap, topic, records, during={records // 3: kill_leader})
    assert not errors, errors[:3]
    assert len(acked) == records
    new_leader = describe(cluster.bootstrap, topic)[0][0]
    assert new_leader not in (victim, -1)
    _check_exactly_once_in_order(cluster.bootstrap, topic, 3, acked)

    node = cluster.node(victim)
    node.wipe()
    node.start()
    parts = wait_isr_complete(cluster, topic, timeout=90)
    assert all(victim in isr for _, _, isr in parts.values())


def test_min_insync_replicas_refuses_acks_all_but_not_acks_1(healthy):
    """Acceptance 2: with two of three brokers stopped, acks=all gets NOT_ENOUGH_REPLICAS,
    acks=1 still works, and nothing acknowledged with acks=all is lost when they return."""
    cluster = healthy
    topic = _topic("minisr")
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3,
                 config={"min.insync.replicas": "2"})
    wait_isr_complete(cluster, topic)
    acked_all, errors = _produce(cluster.bootstrap, topic, 2000)
    assert not errors and len(acked_all) == 2000
    leader = _leader(cluster, topic, 0)
    others = [n for n in cluster.nodes if n != leader]
    for n in others:
        cluster.node(n).stop()
    wait_for(lambda: describe(cluster.bootstrap, topic)[0][2] == [leader], 30, "the ISR to shrink to the leader")

    refused = []
    p = Producer({"bootstrap.servers": cluster.node(leader).address, "acks": "all",
                  "message.timeout.ms": 3000, "retries": 0})
    p.produce(topic, value=b"must-not-be-acked", on_delivery=lambda err, msg: refused.append(err))
    p.flush(20)
    assert refused and refused[0] is not None
    assert refused[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, refused[0]

    acked_one, errors = _produce(cluster.node(leader).address, topic, 500, acks="1", **{"enable.idempotence": False})
    assert not errors and len(acked_one) == 500

    for n in others:
        cluster.node(n).start()
    wait_isr_complete(cluster, topic, timeout=90)
    records = consume_all(cluster.bootstrap, topic, 1, 2500, timeout=60)
    got = {(m.partition(), m.offset(), m.value()) for m in records}
    assert set(acked_all) <= got
    assert set(acked_one) <= got
    assert b"must-not-be-acked" not in {v for _, _, v in got}


def test_paused_leader_is_replaced_and_truncated_when_it_returns(healthy):
    """Acceptance 3 (SIGSTOP variant): a leader frozen past its lease is replaced; writes
    acknowledged by the new leader survive; the old leader rejoins as a follower."""
    cluster = healthy
    topic = _topic("paused")
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    wait_isr_complete(cluster, topic)
    before, errors = _produce(cluster.bootstrap, topic, 1000)
    assert not errors
    old = _leader(cluster, topic, 0)
    old_epoch_leader = old
    cluster.node(old).pause()
    try:
        new = wait_for(lambda: (ld := describe(cluster.bootstrap, topic)[0][0]) not in (old, -1) and ld,
                       30, "a new leader while the old one is paused")
        after, errors = _produce(cluster.bootstrap, topic, 1000)
        assert not errors
    finally:
        cluster.node(old).resume()
    assert new != old_epoch_leader
    parts = wait_isr_complete(cluster, topic, timeout=60)
    assert old in parts[0][2]
    records = consume_all(cluster.bootstrap, topic, 1, 2000, timeout=60)
    got = {(m.partition(), m.offset(), m.value()) for m in records}
    assert set(before) | set(after) <= got
    assert len(records) == 2000


def test_preferred_leader_is_restored_when_it_returns(healthy):
    """auto.leader.rebalance.enable: leadership goes back to the first replica once it is in sync."""
    cluster = healthy
    topic = _topic("preferred")
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    leader, replicas, _ = wait_isr_complete(cluster, topic)[0]
    assert leader == replicas[0]
    cluster.node(leader).kill9()
    wait_for(lambda: describe(cluster.bootstrap, topic)[0][0] not in (leader, -1), 30, "failover")
    cluster.node(leader).start()
    wait_for(lambda: describe(cluster.bootstrap, topic)[0][0] == leader, 60,
             "the preferred replica to lead again")


def test_controlled_shutdown_moves_leadership_first(healthy):
    """SIGTERM: the broker hands its partitions to ISR peers before it exits."""
    cluster = healthy
    topic = _topic("controlled")
    create_topic(cluster.bootstrap, topic, partitions=3, replication_factor=3)
    wait_isr_complete(cluster, topic)
    victim = _leader(cluster, topic, 0)
    assert cluster.node(victim).stop() == 0
    parts = describe(cluster.bootstrap, topic)
    assert all(leader not in (victim, -1) for leader, _, _ in parts.values()), parts
    assert "controlled_shutdown_finished" in cluster.node(victim).output()


def test_a_leader_that_appended_nothing_in_its_epoch_rejoins_after_two_failovers(healthy):
    """A replica that became leader (its epoch recorded at its log end) and lost leadership
    before appending anything must drop that epoch when it comes back as a follower, or its
    fetches diverge forever and it never rejoins the ISR."""
    cluster = healthy
    topic = _topic("empty-epoch")
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    wait_isr_complete(cluster, topic)
    values = produce_values(cluster.bootstrap, topic, 10)
    first = _leader(cluster, topic, 0)
    cluster.node(first).kill9()
    second = wait_for(lambda: (ld := describe(cluster.bootstrap, topic)[0][0]) not in (first, -1) and ld,
                      30, "the second leader")
    cluster.node(second).kill9()
    wait_for(lambda: describe(cluster.bootstrap, topic)[0][0] not in (first, second, -1), 30, "the third leader")
    cluster.node(second).start()
    cluster.node(first).start()
    parts = wait_isr_complete(cluster, topic, timeout=60)
    assert sorted(parts[0][2]) == [1, 2, 3]
    assert [m.value() for m in consume_all(cluster.bootstrap, topic, 1, 10)] == values


def _cached_sessions(node) -> dict[str, float]:
    """The fetch sessions a broker holds, of followers and of consumers."""
    return {kind: float(n) for kind, n in
            re.findall(r'^kbroker_fetchsessioncache_sessions\{kind="(\w+)"\} (\S+)', scrape(node), re.M)}


def _consumer_sessions(cluster) -> float:
    return sum(_cached_sessions(node)["consumer"] for node in cluster.nodes.values())


def test_followers_fetch_in_sessions(healthy):
    """KIP-227 between brokers: each leader holds its followers' fetch sessions, and the records
    still arrive through incremental fetches after the first, full one."""
    cluster = healthy
    topic = _topic("sessions")
    create_topic(cluster.bootstrap, topic, partitions=6, replication_factor=3)
    wait_isr_complete(cluster, topic)
    values = produce_values(cluster.bootstrap, topic, 50, partition=0)
    wait_isr_complete(cluster, topic)

    def sessions(node) -> tuple[float, float]:
        text = scrape(node)
        count = re.search(r"^kafka_server_fetchsessioncache_numincrementalfetchsessions (\S+)", text, re.M)
        cached = re.search(r"^kafka_server_fetchsessioncache_numincrementalfetchpartitionscached (\S+)", text, re.M)
        return float(count.group(1)), float(cached.group(1))

    for node in cluster.nodes.values():  # two followers of its partitions each
        assert wait_for(lambda n=node: sessions(n)[0] >= 2 and sessions(n)[1] >= 2, 30, "follower sessions")
    records = consume_all(cluster.bootstrap, topic, 6, len(values), timeout=60)
    assert sorted(m.value() for m in records) == sorted(values)


@pytest.mark.kafka_tools
def test_the_java_client_consumes_in_sessions_of_its_own_beside_the_followers(healthy, kafka_libs):  # noqa: F811
    """Kafka's console consumer holds one session on each broker leading a partition it reads,
    beside the followers' sessions there, and closes them when it exits."""
    from tests.integration.test_kafka_tools import KAFKA_RUN

    cluster = healthy
    topic = _topic("java-sessions")
    create_topic(cluster.bootstrap, topic, partitions=3, replication_factor=3)
    parts = wait_isr_complete(cluster, topic)
    leaders = {leader for leader, _, _ in parts.values()}
    values = [b"j%02d" % i for i in range(30)]
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % 3)
    assert p.flush(30) == 0
    before = {n: _cached_sessions(node) for n, node in cluster.nodes.items()}
    consumer = subprocess.Popen([str(KAFKA_RUN), "kafka-console-consumer", "--bootstrap-server", cluster.bootstrap,
                                 "--topic", topic, "--from-beginning", "--timeout-ms", "8000"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        def added() -> dict[int, float]:
            return {n: _cached_sessions(node)["consumer"] - before[n]["consumer"]
                    for n, node in cluster.nodes.items()}
        wait_for(lambda: added() == {n: float(n in leaders) for n in cluster.nodes}, 60,
                 f"a Java consumer session on each of the leaders {sorted(leaders)}")
        out, err = consumer.communicate(timeout=90)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait(10)
    assert sorted(out.split()) == sorted(v.decode() for v in values), err[-2000:]
    for n, node in cluster.nodes.items():  # closed on exit (session epoch -1); the followers' kept
        assert _cached_sessions(node) == before[n], n


@pytest.mark.skipif(shutil.which("go") is None, reason="Go is needed to build franz-go's harness")
def test_franz_go_consumes_in_sessions_of_its_own_beside_the_followers(healthy):
    """franz-go (kgo) reading a three-partition RF-3 topic of its own holds consumer sessions on
    the cluster's brokers while it reads, beside the followers' sessions."""
    from compat.franz_go import runner

    cluster = healthy
    before = _consumer_sessions(cluster)
    row, seen = run_scenario(runner.build_scenarios(), cluster, "^produce_consume$", watch=_consumer_sessions,
                             nodes=3)
    assert row["outcome"] == "passed", row
    assert max(seen, default=0) > before, (before, seen)
