"""The etcd-backed controller: producer-id blocks, etcd outages, registration, assignment."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.clients import consume_all, create_topic
from tests.support.cluster import describe, quorum_leader, wait_for, wait_isr_complete
from tests.support.raw import RawClient
from tools.devcluster import REPO, free_port


def _init_producer_id(cluster, order: list[int]) -> int:
    """One idempotent InitProducerId (v4), on the first broker of ``order`` that answers."""
    last = None
    for _ in range(200):
        for node_id in order:
            node = cluster.node(node_id)
            if not node.alive:
                continue
            try:
                with RawClient(node.address, timeout=5) as c:
                    resp = c.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                          "producer_id": -1, "producer_epoch": -1})
            except OSError as exc:
                last = exc
                continue
            if resp.error_code == 0:
                return resp.producer_id
            last = resp.error_code
        time.sleep(0.05)
    raise AssertionError(f"no broker handed out a producer id (last: {last!r})")


def _controller(cluster) -> int:
    return wait_for(lambda: (c := _quorum_leader(cluster)) >= 0 and c, 30, "a controller") or 0


def _quorum_leader(cluster) -> int:
    for node in cluster.nodes.values():
        if node.alive:
            return quorum_leader(node.address)
    return -1


@pytest.mark.parametrize("calls", [pytest.param((1500, 300), id="short"),
                                   pytest.param((5000, 1000), id="full", marks=pytest.mark.slow)])
def test_producer_ids_are_never_handed_out_twice(healthy, calls):
    """Acceptance 4: ids from every broker, while the controller is killed twice and every
    broker restarted once, then after a full-cluster restart: all distinct."""
    cluster = healthy
    first, second = calls
    ids = []
    step = first // 6
    disruptions = {
        step: lambda: cluster.node(_controller(cluster)).kill9(),
        2 * step: lambda: _restart_dead(cluster),
        3 * step: lambda: cluster.node(_controller(cluster)).kill9(),
        4 * step: lambda: _restart_dead(cluster),
        5 * step: lambda: _restart_each(cluster),
    }
    for i in range(first):
        if i in disruptions:
            disruptions[i]()
        ids.append(_init_producer_id(cluster, [1 + (i + k) % 3 for k in range(3)]))
    cluster.restart_brokers()
    for i in range(second):
        ids.append(_init_producer_id(cluster, [1 + (i + k) % 3 for k in range(3)]))
    assert len(ids) == first + second
    assert len(set(ids)) == len(ids), "a producer id was handed out twice"


def _restart_dead(cluster) -> None:
    for node in cluster.nodes.values():
        if not node.alive:
            node.start()


def _restart_each(cluster) -> None:
    for node in cluster.nodes.values():
        node.stop()
        node.start()


def test_etcd_outage_keeps_produce_and_fetch_going_without_leadership_changes(healthy):
    """Acceptance 5: etcd stopped for 20 s; clients carry on, no leader moves; after etcd
    returns, a killed leader still fails over."""
    cluster = healthy
    topic = f"etcd-outage-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=3, replication_factor=3)
    before = wait_isr_complete(cluster, topic)
    cluster.stop_etcd()
    acked = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5})
    started = time.monotonic()
    i = 0
    while time.monotonic() - started < 20:
        p.produce(topic, value=b"during-%06d" % i,
                  on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None)
        p.poll(0.002)
        i += 1
    assert p.flush(30) == 0
    assert len(acked) == i, f"{i - len(acked)} records failed while etcd was down"
    during = describe(cluster.bootstrap, topic)
    assert {k: v[0] for k, v in during.items()} == {k: v[0] for k, v in before.items()}
    records = consume_all(cluster.bootstrap, topic, 3, len(acked), timeout=60)
    assert sorted(m.value() for m in records) == sorted(acked)
    assert "etcd_unreachable" in cluster.node(1).output()

    cluster.start_etcd()
    wait_for(lambda: "etcd_reachable_again" in cluster.node(1).output(), 30, "broker 1 to reconnect")
    after_return = describe(cluster.bootstrap, topic)
    assert {k: v[0] for k, v in after_return.items()} == {k: v[0] for k, v in before.items()}
    victim = before[0][0]
    cluster.node(victim).kill9()
    wait_for(lambda: describe(cluster.bootstrap, topic)[0][0] not in (victim, -1), 30,
             "failover after etcd returned")


def test_replication_factor_above_live_brokers_is_invalid(cluster):
    a = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fs = a.create_topics([NewTopic(f"rf4-{uuid.uuid4().hex[:6]}", 1, 4)], operation_timeout=10)
    err = list(fs.values())[0].exception(15)
    assert err is not None and err.args[0].name() == "INVALID_REPLICATION_FACTOR"


def test_replicas_and_leaders_are_spread(cluster):
    topic = f"spread-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=6, replication_factor=3)
    parts = wait_isr_complete(cluster, topic)
    leaders = [leader for leader, _, _ in parts.values()]
    assert sorted(set(leaders)) == [1, 2, 3]
    assert all(leaders.count(n) == 2 for n in (1, 2, 3))
    assert all(sorted(replicas) == [1, 2, 3] for _, replicas, _ in parts.values())


def test_a_second_broker_with_a_live_node_id_refuses_to_start(cluster, tmp_path):
    props = {**cluster.broker_properties(), "node.id": "1", "log.dirs": str(tmp_path / "dup"),
             "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}", "broker.session.timeout.ms": "2000"}
    cmd = [sys.executable, "-m", "broker"]
    for k, v in props.items():
        cmd += ["--override", f"{k}={v}"]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "node.id 1 is already registered by a live broker" in out.stderr, out.stderr[-2000:]
    assert cluster.node(1).alive
