"""Acceptance 6: stock clients on the three-node cluster, RF 3 topics, consumer groups, and
Apache Kafka's own ``kafka-topics --describe`` showing three replicas and the ISR."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.integration.test_kafka_tools import describe as kafka_topics_describe
from tests.integration.test_kafka_tools import kafka_libs, topics  # noqa: F401  (fixture)
from tests.support.cluster import wait_isr_complete

N = 3000


def _values(tag: str) -> list[bytes]:
    return [b"%s-%05d" % (tag.encode(), i) for i in range(N)]


def test_confluent_kafka_group_over_rf3(cluster):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"ck-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(15)
    wait_isr_complete(cluster, topic)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for v in _values("ck"):
        p.produce(topic, value=v)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}",
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, per_partition = [], {}
    deadline = time.monotonic() + 60
    while len(got) < N and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            assert m.error() is None, m.error()
            got.append(m.value())
            per_partition[m.partition()] = m.offset() + 1
    c.commit(asynchronous=False)
    committed = c.committed(c.assignment(), timeout=10)
    c.close()
    assert sorted(got) == sorted(_values("ck"))
    # A partition the sticky partitioner left empty has no committed offset (negative).
    assert {tp.partition: tp.offset for tp in committed if tp.offset >= 0} == per_partition


def test_kafka_python_group_over_rf3(cluster):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"kp-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    admin.create_topics([NewTopic(topic, 3, 3)])
    admin.close()
    wait_isr_complete(cluster, topic)
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for v in _values("kp"):
        p.send(topic, v)
    p.flush(30)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=f"g-{topic}",
                      auto_offset_reset="earliest", consumer_timeout_ms=20000)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) >= N:
            break
    c.commit()
    c.close()
    assert sorted(got) == sorted(_values("kp"))


def test_aiokafka_group_over_rf3(cluster):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = f"ak-{uuid.uuid4().hex[:6]}"

    async def create():
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 3, 3)])
        finally:
            await admin.close()

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=True)
        await p.start()
        try:
            for v in _values("ak"):
                await p.send(topic, v)
            await p.flush()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=f"g-{topic}",
                             auto_offset_reset="earliest")
        await c.start()
        got = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < N and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=500)
                for msgs in batch.values():
                    got.extend(m.value for m in msgs)
            await c.commit()
        finally:
            await c.stop()
        return got

    asyncio.run(create())
    wait_isr_complete(cluster, topic)
    got = asyncio.run(run())
    assert sorted(got) == sorted(_values("ak"))


@pytest.mark.kafka_tools
def test_kafka_topics_describe_shows_three_replicas_and_isr(cluster, kafka_libs):  # noqa: F811
    topic = f"kt-{uuid.uuid4().hex[:6]}"
    res = topics(cluster.bootstrap, "--create", "--topic", topic, "--partitions", "3",
                 "--replication-factor", "3")
    assert res.stdout.strip() == f"Created topic {topic}.", res.stdout + res.stderr
    wait_isr_complete(cluster, topic)
    head, parts = kafka_topics_describe(cluster.bootstrap, topic)
    assert head["rf"] == "3" and head["count"] == "3"
    for part in parts:
        replicas = sorted(int(r) for r in part["replicas"].split(","))
        isr = sorted(int(r) for r in part["isr"].split(","))
        assert replicas == [1, 2, 3] and isr == [1, 2, 3], part
        assert int(part["leader"]) in replicas


def test_transactions_span_brokers_and_read_committed_sees_only_commits(cluster):
    """Partitions led by three brokers, the coordinator on one of them: the leaders verify
    with the coordinator over the network (KIP-890), markers reach every leader."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"txn-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(15)
    wait_isr_complete(cluster, topic)
    committed = []
    for n in range(3):
        p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"{topic}-{n}"})
        p.init_transactions(30)
        for k in range(4):
            p.begin_transaction()
            values = [b"%d-%d-%d" % (n, k, i) for i in range(60)]
            for i, v in enumerate(values):
                p.produce(topic, value=v, partition=i % 3)
            if k % 2:
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
                committed.extend(values)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < len(committed) and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            assert m.error() is None, m.error()
            got.append(m.value())
    for m in c.consume(1000, 1.0):  # nothing aborted may follow
        got.append(m.value())
    c.close()
    assert sorted(got) == sorted(committed)


def test_a_new_leader_filters_aborted_transactions_it_replicated(healthy):
    """Followers rebuild the aborted-transaction index and producer state from replicated
    batches: after the leader dies, read_committed on the new leader still hides aborts."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.support.cluster import describe, wait_for

    cluster = healthy
    topic = f"txn-failover-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(15)
    wait_isr_complete(cluster, topic)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"{topic}-p"})
    p.init_transactions(30)
    committed = []
    for k in range(6):
        p.begin_transaction()
        values = [b"%d-%d" % (k, i) for i in range(50)]
        for v in values:
            p.produce(topic, value=v, partition=0)
        if k % 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            committed.extend(values)
    leader = describe(cluster.bootstrap, topic)[0][0]
    cluster.node(leader).kill9()
    wait_for(lambda: describe(cluster.bootstrap, topic)[0][0] not in (leader, -1), 30, "a new leader")
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < len(committed) and time.monotonic() < deadline:
        got.extend(m.value() for m in c.consume(1000, 0.5) if m.error() is None)
    got.extend(m.value() for m in c.consume(1000, 1.0) if m.error() is None)
    c.close()
    assert got == committed
