"""EOS acceptance 1: what read_committed and read_uncommitted consumers see.

A committed transaction is visible to read_committed consumers, an aborted one never is,
and an open transaction holds read_committed consumers at the last stable offset (LSO):
ListOffsets(LATEST, read_committed) and the client's end offsets / watermarks answer the
LSO, records a second producer commits *after* the open transaction began stay invisible
until it ends, while read_uncommitted consumers see everything. Once the open transaction
commits, read_committed sees its records in offset order and the LSO reaches the high
watermark.

Run with each client's own transactional producer and read_committed consumer
(confluent-kafka, kafka-python, aiokafka); the "truth" of what is on the partition comes
from a confluent consumer at each isolation level (tests/support/eos_accept.py ``drain``).
Target: ``KBROKER_EOS_TARGET=kafka`` for a real Apache Kafka, else our broker.
"""

from __future__ import annotations

import asyncio
import time

from tests.support import eos_accept
from tests.support.eos_accept import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    cf_producer,
    create_topic,
    drain,
    list_offset,
    raw,
    values_of,
    wait_until,
)

eos_broker = eos_accept.eos_broker  # the module's broker fixture

N = 5


def vals(tag: str, n: int = N) -> list[bytes]:
    return [f"{tag}{i}".encode() for i in range(n)]


def lso_and_hw(bs: str, topic: str) -> tuple[int, int]:
    with raw(bs) as c:
        return list_offset(c, topic, 0, READ_COMMITTED), list_offset(c, topic, 0, READ_UNCOMMITTED)


def wait_stable(bs: str, topic: str, timeout: float = 20.0) -> int:
    """Wait until no transaction is open or unmarked on the partition (LSO == HW)."""
    def check():
        lso, hw = lso_and_hw(bs, topic)
        return hw if lso == hw else None
    return wait_until(check, timeout, f"LSO to reach the high watermark on {topic}")


def check_open_transaction_state(bs: str, topic: str) -> int:
    """Committed c*, aborted a*, open o*, then b* committed by another producer: check
    both isolation levels while o* is open; returns the LSO (offset of o0)."""
    ru = drain(bs, topic, isolation="read_uncommitted")
    assert values_of(ru) == vals("c") + vals("a") + vals("o") + vals("b", 3)
    o_start = next(m.offset for m in ru if m.value == b"o0")
    lso, hw = lso_and_hw(bs, topic)
    assert lso == o_start, "ListOffsets(read_committed) must answer the open transaction's first offset"
    assert hw > max(m.offset for m in ru)
    rc = drain(bs, topic, isolation="read_committed")
    assert values_of(rc) == vals("c"), "read_committed must stop at the LSO and skip the aborted records"
    return lso


def test_visibility_confluent(eos_broker, topic_name):
    from confluent_kafka import Consumer, TopicPartition

    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    p = cf_producer(bs, f"{topic_name}-a")
    p.init_transactions(30)
    p.begin_transaction()
    for v in vals("c"):
        p.produce(topic_name, v, partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    for v in vals("a"):
        p.produce(topic_name, v, partition=0)
    assert p.flush(30) == 0
    p.abort_transaction(30)
    p.begin_transaction()
    for v in vals("o"):
        p.produce(topic_name, v, partition=0)
    assert p.flush(30) == 0

    q = cf_producer(bs, f"{topic_name}-b")
    q.init_transactions(30)
    q.begin_transaction()
    for v in vals("b", 3):
        q.produce(topic_name, v, partition=0)
    q.commit_transaction(30)

    lso = check_open_transaction_state(bs, topic_name)
    # The clients' own view of the end: watermarks/end offsets follow the isolation level.
    for isolation, expected in (("read_committed", lso), ("read_uncommitted", lso_and_hw(bs, topic_name)[1])):
        c = Consumer({"bootstrap.servers": bs, "group.id": f"{topic_name}-w", "isolation.level": isolation})
        try:
            assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10, cached=False)[1] == expected, \
                isolation
        finally:
            c.close()
    # A read_committed consumer that keeps polling stays held at the LSO.
    c = Consumer({"bootstrap.servers": bs, "group.id": f"{topic_name}-h", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic_name, 0, 0)])
    got = []
    end = time.monotonic() + 3
    while time.monotonic() < end:
        got += [m.value() for m in c.consume(100, 0.2) if m.error() is None]
    assert got == vals("c")
    assert c.position([TopicPartition(topic_name, 0)])[0].offset <= lso

    p.commit_transaction(30)
    # The held consumer moves on to the open transaction's records, then b*, in offset order.
    end = time.monotonic() + 20
    while len(got) < 2 * N + 3 and time.monotonic() < end:
        got += [m.value() for m in c.consume(100, 0.2) if m.error() is None]
    c.close()
    assert got == vals("c") + vals("o") + vals("b", 3)
    hw = wait_stable(bs, topic_name)
    assert lso_and_hw(bs, topic_name) == (hw, hw)
    assert values_of(drain(bs, topic_name, isolation="read_committed")) == vals("c") + vals("o") + vals("b", 3)


def test_visibility_kafka_python(eos_broker, topic_name):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)

    def producer(txid):
        p = KafkaProducer(bootstrap_servers=bs, transactional_id=txid, linger_ms=5)
        p.init_transactions()
        return p

    p = producer(f"{topic_name}-a")
    p.begin_transaction()
    for v in vals("c"):
        p.send(topic_name, v, partition=0)
    p.commit_transaction()
    p.begin_transaction()
    for v in vals("a"):
        p.send(topic_name, v, partition=0)
    p.flush()
    p.abort_transaction()
    p.begin_transaction()
    for v in vals("o"):
        p.send(topic_name, v, partition=0)
    p.flush()
    q = producer(f"{topic_name}-b")
    q.begin_transaction()
    for v in vals("b", 3):
        q.send(topic_name, v, partition=0)
    q.commit_transaction()
    q.close()

    lso = check_open_transaction_state(bs, topic_name)
    tp = TopicPartition(topic_name, 0)
    c = KafkaConsumer(bootstrap_servers=bs, isolation_level="read_committed", enable_auto_commit=False,
                      fetch_max_wait_ms=50)
    c.assign([tp])
    c.seek(tp, 0)
    assert c.end_offsets([tp])[tp] == lso
    got = []
    end = time.monotonic() + 3
    while time.monotonic() < end:
        got += [r.value for recs in c.poll(200).values() for r in recs]
    assert got == vals("c")
    assert c.position(tp) <= lso

    p.commit_transaction()
    p.close()
    end = time.monotonic() + 20
    while len(got) < 2 * N + 3 and time.monotonic() < end:
        got += [r.value for recs in c.poll(200).values() for r in recs]
    assert got == vals("c") + vals("o") + vals("b", 3)
    hw = wait_stable(bs, topic_name)
    assert c.end_offsets([tp])[tp] == hw
    c.close()


async def test_visibility_aiokafka(eos_broker, topic_name):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)

    async def producer(txid):
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=txid, linger_ms=5)
        await p.start()
        return p

    p = await producer(f"{topic_name}-a")
    try:
        async with p.transaction():
            for v in vals("c"):
                await p.send(topic_name, v, partition=0)
        await p.begin_transaction()
        for v in vals("a"):
            await p.send(topic_name, v, partition=0)
        await p.flush()
        await p.abort_transaction()
        await p.begin_transaction()
        futures = [await p.send(topic_name, v, partition=0) for v in vals("o")]
        await asyncio.gather(*futures)
        q = await producer(f"{topic_name}-b")
        try:
            async with q.transaction():
                for v in vals("b", 3):
                    await q.send(topic_name, v, partition=0)
        finally:
            await q.stop()

        lso = await asyncio.to_thread(check_open_transaction_state, bs, topic_name)
        tp = TopicPartition(topic_name, 0)
        c = AIOKafkaConsumer(bootstrap_servers=bs, isolation_level="read_committed", enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=50)
        await c.start()
        try:
            c.assign([tp])
            c.seek(tp, 0)
            assert (await c.end_offsets([tp]))[tp] == lso
            got = []
            end = time.monotonic() + 3
            while time.monotonic() < end:
                got += [r.value for recs in (await c.getmany(timeout_ms=200)).values() for r in recs]
            assert got == vals("c")
            assert await c.position(tp) <= lso

            await p.commit_transaction()
            end = time.monotonic() + 20
            while len(got) < 2 * N + 3 and time.monotonic() < end:
                got += [r.value for recs in (await c.getmany(timeout_ms=200)).values() for r in recs]
            assert got == vals("c") + vals("o") + vals("b", 3)
            hw = await asyncio.to_thread(wait_stable, bs, topic_name)
            assert (await c.end_offsets([tp]))[tp] == hw
        finally:
            await c.stop()
    finally:
        await p.stop()
