"""A broker that is down stays a broker (KRaft's registrations): with one node of three killed
and not restarted, a fresh cluster creates RF-3 topics, serves a first consumer group and a
first transactional producer, and reads back every acknowledged record; DescribeCluster lists
the down broker as fenced (and so does Kafka's ``kafka-cluster list-endpoints``);
UnregisterBroker (``kafka-cluster unregister``) removes a registration for good.

The same module runs against Apache Kafka 4.3.1 (three KRaft nodes; ``slow``), by the same
steps, so the two answer alike. Each target is a fresh cluster: ``__consumer_offsets`` and
``__transaction_state`` do not exist yet when the first test kills a node.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import describe, quorum_leader, wait_for
from tests.support.parity import TARGETS, three_nodes
from tests.support.raw import RawClient

KAFKA_RUN = Path(__file__).resolve().parents[2] / "compat" / "kafka" / "kafka-run.sh"
VICTIM = 3
SURVIVORS = (1, 2)
DESCRIBE_CLUSTER, UNREGISTER_BROKER, LIST_CONFIG_RESOURCES = 60, 64, 74
BROKER, BROKER_LOGGER = 4, 8  # config resource types


@pytest.fixture(scope="module", params=TARGETS)
def target(request, tmp_path_factory):
    yield from three_nodes(request.param, tmp_path_factory, "fenced")


def _bootstrap(target) -> str:
    return ",".join(target.nodes[n].address for n in SURVIVORS)


def _call(target, api_key: int, version: int, body: dict):
    node = next(n for _, n in sorted(target.nodes.items()) if n.alive)
    with RawClient(node.address, timeout=10) as c:
        return c.call(api_key, version, body)


def _cluster_brokers(target) -> dict[int, bool]:
    """node id -> is_fenced, from DescribeCluster v2 with fenced brokers included."""
    resp = _call(target, DESCRIBE_CLUSTER, 2, {"include_cluster_authorized_operations": False,
                                                "endpoint_type": 1, "include_fenced_brokers": True})
    assert resp.error_code == 0, resp.error_message
    return {b.broker_id: b.is_fenced for b in resp.brokers}


def _kill_victim_and_wait_fenced(target) -> None:
    target.nodes[VICTIM].kill9()
    wait_for(lambda: _cluster_brokers(target).get(VICTIM) is True, 60, f"broker {VICTIM} fenced")


def _metadata_broker_ids(target) -> set[int]:
    md = AdminClient({"bootstrap.servers": _bootstrap(target)}).list_topics(timeout=10)
    return set(md.brokers)


def _kafka_cluster(target, *args: str) -> str:
    """Kafka 4.3.1's ``kafka-cluster`` tool against the survivors; its stdout."""
    res = subprocess.run([str(KAFKA_RUN), "kafka-cluster", *args, "--bootstrap-server", _bootstrap(target)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def _create(target, topic: str, partitions: int, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": _bootstrap(target)})
    admin.create_topics([NewTopic(topic, partitions, rf)])[topic].result(30)


def test_with_one_broker_down_the_cluster_still_counts_three(target):
    _kill_victim_and_wait_fenced(target)
    assert _cluster_brokers(target) == {1: False, 2: False, 3: True}
    wait_for(lambda: _metadata_broker_ids(target) == set(SURVIVORS), 30, "Metadata without the fenced broker")
    # DescribeCluster without include_fenced_brokers lists the unfenced ones only.
    resp = _call(target, DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
    assert sorted(b.broker_id for b in resp.brokers) == list(SURVIVORS)
    # The controller a client is sent to is one the answer lists, even when the killed broker
    # was the controller (an admin client told of a dead one waits on it until it times out).
    assert resp.controller_id in SURVIVORS
    # Its configs are still listed (kafka-configs --describe --entity-type brokers --all).
    resources = _call(target, LIST_CONFIG_RESOURCES, 1, {"resource_types": [BROKER_LOGGER, BROKER]})
    assert [(r.resource_name, r.resource_type) for r in resources.config_resources] == \
        [("1", BROKER_LOGGER), ("2", BROKER_LOGGER), ("3", BROKER_LOGGER), ("1", BROKER), ("2", BROKER), ("3", BROKER)]

    topic = f"rf3-down-{uuid.uuid4().hex[:6]}"
    _create(target, topic, 6, 3)
    parts = wait_for(lambda: (d := describe(_bootstrap(target), topic)) and len(d) == 6 and d, 30, "the topic")
    for leader, replicas, isr in parts.values():
        assert sorted(replicas) == [1, 2, 3] and replicas[-1] == VICTIM  # the fenced broker holds the last replica...
        assert leader in SURVIVORS  # ...but leads nothing
        assert VICTIM not in isr

    # A factor the unfenced brokers can hold stays on them: every partition starts fully in
    # sync, so acks=all writes meet min.insync.replicas=2 (KRaft's placer).
    rf2 = f"rf2-down-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": _bootstrap(target)})
    admin.create_topics([NewTopic(rf2, 12, 2, config={"min.insync.replicas": "2"})])[rf2].result(30)
    rf2_parts = wait_for(lambda: (d := describe(_bootstrap(target), rf2)) and len(d) == 12 and d, 30, "the RF-2 topic")
    assert all(sorted(replicas) == [1, 2] for _, replicas, _ in rf2_parts.values()), rf2_parts
    strict = Producer({"bootstrap.servers": _bootstrap(target), "acks": "all", "enable.idempotence": True})
    errors = []
    for p in range(12):
        strict.produce(rf2, value=b"p%d" % p, partition=p, on_delivery=lambda err, msg: err and errors.append(err))
    assert strict.flush(60) == 0 and errors == []

    # Every acknowledged record is read back, by a first consumer group that commits.
    acked = []
    p = Producer({"bootstrap.servers": _bootstrap(target), "acks": "all", "enable.idempotence": True})
    for i in range(300):
        p.produce(topic, value=b"v%05d" % i,
                  on_delivery=lambda err, msg: err is None and acked.append(msg.value()))
    assert p.flush(60) == 0
    assert len(acked) == 300

    group = f"first-group-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": _bootstrap(target), "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000})
    try:
        c.subscribe([topic])
        seen = []
        for _ in range(600):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                seen.append(m.value())
            if len(seen) >= len(acked):
                break
        assert sorted(seen) == sorted(acked)
        c.commit(asynchronous=False)
        committed = c.committed([TopicPartition(topic, i) for i in range(6)], timeout=30)
        assert sum(max(tp.offset, 0) for tp in committed) == len(acked)  # unread partitions: none committed
    finally:
        c.close()

    # A first transactional producer initializes and commits.
    tp = Producer({"bootstrap.servers": _bootstrap(target), "transactional.id": f"first-txn-{uuid.uuid4().hex[:6]}"})
    tp.init_transactions(60)
    tp.begin_transaction()
    for i in range(10):
        tp.produce(topic, value=b"t%02d" % i, partition=i % 6)
    tp.commit_transaction(60)

    # Kafka 4's strict min ISR: records accepted with acks=1 while the ISR is below
    # min.insync.replicas are not visible until enough replicas hold them.
    strict_topic = f"strict-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(strict_topic, 1, 3, config={"min.insync.replicas": "3"})])[strict_topic].result(30)
    wait_for(lambda: (d := describe(_bootstrap(target), strict_topic)) and d[0][0] in SURVIVORS, 30, "its leader")
    loose = Producer({"bootstrap.servers": _bootstrap(target), "acks": 1})
    loose_acked = []
    for i in range(5):
        loose.produce(strict_topic, value=b"s%d" % i, partition=0,
                      on_delivery=lambda err, msg: err is None and loose_acked.append(msg.offset()))
    assert loose.flush(30) == 0 and loose_acked == [0, 1, 2, 3, 4]
    assert _read_for(target, strict_topic, 3.0) == ([], 0)

    # The broker comes back: it is unfenced and catches up into every ISR.
    target.nodes[VICTIM].start()
    wait_for(lambda: _cluster_brokers(target) == {1: False, 2: False, 3: False}, 90, "the broker unfenced")
    for name in (topic, strict_topic):
        wait_for(lambda name=name: all(sorted(isr) == [1, 2, 3] for _, _, isr in describe(_bootstrap(target),
                                                                                          name).values()),
                 90, f"the returned broker in every ISR of {name}")
    wait_for(lambda: _read_for(target, strict_topic, 1.0) == ([0, 1, 2, 3, 4], 5), 30, "the records visible")


def _read_for(target, topic: str, seconds: float) -> tuple[list[int], int]:
    """(offsets a read_uncommitted consumer of partition 0 gets in ``seconds``, its high watermark)."""
    import time

    c = Consumer({"bootstrap.servers": _bootstrap(target), "group.id": f"read-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.offset())
        return got, c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def test_with_the_controller_down_other_clients_create_commit_and_transact(target):
    """The same first steps with kafka-python and aiokafka, the killed broker the metadata
    quorum's leader this time: a first group and transactional producer of each work. (Both
    clients pick their metadata broker from the last answer's list and give up on the first
    refused connection, on Kafka too: they start once the dead broker is fenced.)"""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic as KpNewTopic

    victim = quorum_leader(target.nodes[1].address)
    assert victim in target.nodes
    bootstrap = ",".join(n.address for i, n in target.nodes.items() if i != victim)
    target.nodes[victim].kill9()
    wait_for(lambda: _cluster_brokers(target).get(victim) is True, 60, f"broker {victim} fenced")

    topic = f"others-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([KpNewTopic(topic, 3, 3)])
    finally:
        admin.close()
    kp = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:6]}")
    kp.init_transactions()
    kp.begin_transaction()
    for i in range(10):
        kp.send(topic, b"kp%d" % i)
    kp.commit_transaction()
    kp.close()

    async def aio() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"aio-{uuid.uuid4().hex[:6]}")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(10):
                    await producer.send(topic, b"aio%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"aio-{uuid.uuid4().hex[:6]}",
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    isolation_level="read_committed")
        await consumer.start()
        got: list[bytes] = []
        try:
            for _ in range(60):
                batches = await consumer.getmany(timeout_ms=1000)
                got += [m.value for msgs in batches.values() for m in msgs]
                if len(got) >= 20:
                    break
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    assert sorted(asyncio.run(aio())) == sorted([b"kp%d" % i for i in range(10)] + [b"aio%d" % i for i in range(10)])
    group = f"kp-{uuid.uuid4().hex[:6]}"
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, isolation_level="read_committed", consumer_timeout_ms=30000)
    try:
        seen = []
        for m in consumer:
            seen.append(m.value)
            if len(seen) == 20:
                break
        assert len(seen) == 20
        consumer.commit()
    finally:
        consumer.close()

    target.nodes[victim].start()
    wait_for(lambda: _cluster_brokers(target) == {1: False, 2: False, 3: False}, 90, "the broker unfenced")


def test_unregister_broker_removes_a_registration(target):
    unknown = _call(target, UNREGISTER_BROKER, 0, {"broker_id": 99})
    assert unknown.error_code == 102, unknown  # BROKER_ID_NOT_REGISTERED

    _kill_victim_and_wait_fenced(target)
    listed = _kafka_cluster(target, "list-endpoints", "--include-fenced-brokers")
    assert re.search(rf"^{VICTIM}\s+\S+\s+\d+\s+\S+\s+fenced\s+broker", listed, re.M), listed
    assert re.search(rf"^{VICTIM}\s", _kafka_cluster(target, "list-endpoints"), re.M) is None
    assert f"Broker {VICTIM} is no longer registered." in _kafka_cluster(target, "unregister", "--id", str(VICTIM))
    wait_for(lambda: VICTIM not in _cluster_brokers(target), 30, "the registration gone")
    # Two brokers are registered now: a replication factor of 3 cannot be met.
    with pytest.raises(KafkaException) as err:
        _create(target, f"rf3-unregistered-{uuid.uuid4().hex[:6]}", 1, 3)
    assert err.value.args[0].name() == "INVALID_REPLICATION_FACTOR"

    target.nodes[VICTIM].start()  # registers again, as a new broker would
    wait_for(lambda: _cluster_brokers(target) == {1: False, 2: False, 3: False}, 90, "the broker registered again")
    _create(target, f"rf3-back-{uuid.uuid4().hex[:6]}", 1, 3)
