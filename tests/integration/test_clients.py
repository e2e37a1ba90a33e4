"""Client compatibility: confluent-kafka (librdkafka), kafka-python and aiokafka, every codec.

Each case creates a 6-partition topic through the client's own admin API, produces a
deterministic workload (tests/support/workload.py: keys incl. empty and null, values of
varied sizes incl. empty and null, several headers incl. null values, explicit
non-monotonic timestamps) with the codec under test, consumes everything back by manual
assignment from offset 0 (the group APIs are not used), and checks per partition, in order
and byte-exact, with contiguous offsets; then it reads the broker's segment files and
asserts that every stored batch carries the codec the client asked for (attributes & 7),
except where the client itself sent a batch uncompressed because the codec could not shrink
it (all three clients do this; workload.verify_stored_codec checks that claim).

The full 3 x 5 matrix with 20,000 records each runs by default (about 25 s on 2 cores).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.clients import produce_when_room
from tests.support.workload import (
    CODECS,
    Got,
    Rec,
    make_records,
    verify,
    verify_stored_codec,
)

PARTITIONS = 6
FULL_COUNT = 20_000
CONSUME_TIMEOUT = 90.0


# --------------------------------------------------------------------------- confluent-kafka
def _ck_create(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    # Keep the client referenced until the future resolves: a collected AdminClient
    # fails its pending futures with _DESTROY.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=10)
    fs[topic].result(timeout=15)


def _ck_produce(bootstrap: str, topic: str, records: tuple[Rec, ...], codec: str) -> None:
    from confluent_kafka import Producer

    errors = []
    delivered = 0

    def on_delivery(err, msg):
        nonlocal delivered
        if err is not None:
            errors.append(err)
        else:
            delivered += 1

    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20})
    for r in records:
        produce_when_room(p, topic, value=r.value, key=r.key, partition=r.partition,
                          timestamp=r.timestamp, headers=list(r.headers) or None, on_delivery=on_delivery)
        p.poll(0)
    left = p.flush(60)
    assert left == 0, f"{left} messages still queued after flush"
    assert not errors, f"{len(errors)} delivery errors, first: {errors[0]}"
    assert delivered == len(records)


def _ck_consume(bootstrap: str, topic: str, expected: int) -> list[Got]:
    from confluent_kafka import (
        TIMESTAMP_CREATE_TIME,
        Consumer,
        KafkaException,
        TopicPartition,
    )

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}",
                  "enable.auto.commit": False, "auto.offset.reset": "error"})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: list[Got] = []
    deadline = time.monotonic() + CONSUME_TIMEOUT
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for m in c.consume(5000, 0.5):
                if m.error():
                    raise KafkaException(m.error())
                ts_type, ts = m.timestamp()
                assert ts_type == TIMESTAMP_CREATE_TIME
                out.append(Got(m.partition(), m.offset(), m.key(), m.value(),
                               tuple(m.headers() or ()), ts))
        # Anything beyond the expected count would be a duplicate: linger briefly for it.
        for m in c.consume(1000, 0.3):
            if not m.error():
                out.append(Got(m.partition(), m.offset(), m.key(), m.value(),
                               tuple(m.headers() or ()), m.timestamp()[1]))
    finally:
        c.close()
    return out


# --------------------------------------------------------------------------- kafka-python
def _kp_create(bootstrap: str, topic: str) -> None:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics({topic: {"num_partitions": PARTITIONS, "replication_factor": 1}},
                            wait_for_metadata=True)
    finally:
        admin.close()


def _kp_produce(bootstrap: str, topic: str, records: tuple[Rec, ...], codec: str) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap,
                      compression_type=None if codec == "none" else codec, linger_ms=20)
    try:
        futures = [p.send(topic, value=r.value, key=r.key, headers=list(r.headers),
                          partition=r.partition, timestamp_ms=r.timestamp) for r in records]
        p.flush(timeout=60)
        failed = [f.exception for f in futures if not f.succeeded()]
        assert not failed, f"{len(failed)} sends failed, first: {failed[0]!r}"
    finally:
        p.close(timeout=10)


def _kp_consume(bootstrap: str, topic: str, expected: int) -> list[Got]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="none")
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    c.assign(tps)
    for tp in tps:
        c.seek(tp, 0)
    out: list[Got] = []
    deadline = time.monotonic() + CONSUME_TIMEOUT

    def drain(timeout_ms: int) -> None:
        for tp, msgs in c.poll(timeout_ms=timeout_ms, max_records=5000).items():
            for m in msgs:
                assert m.timestamp_type == 0, "CreateTime expected"
                out.append(Got(tp.partition, m.offset, m.key, m.value,
                               tuple((k, v) for k, v in m.headers), m.timestamp))

    try:
        while len(out) < expected and time.monotonic() < deadline:
            drain(500)
        drain(300)
    finally:
        c.close()
    return out


# --------------------------------------------------------------------------- aiokafka
async def _ak_create(bootstrap: str, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        resp = await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        errs = [t for t in resp.topic_errors if t[1] != 0]
        assert not errs, f"CreateTopics errors: {errs}"
    finally:
        await admin.close()


async def _ak_produce(bootstrap: str, topic: str, records: tuple[Rec, ...], codec: str) -> None:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap,
                         compression_type=None if codec == "none" else codec, linger_ms=20)
    await p.start()
    try:
        futures = [await p.send(topic, value=r.value, key=r.key, partition=r.partition,
                                timestamp_ms=r.timestamp, headers=list(r.headers))
                   for r in records]
        results = await asyncio.gather(*futures, return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        assert not failed, f"{len(failed)} sends failed, first: {failed[0]!r}"
    finally:
        await p.stop()


async def _ak_consume(bootstrap: str, topic: str, expected: int) -> list[Got]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="none")
    await c.start()
    out: list[Got] = []

    async def drain(timeout_ms: int) -> None:
        batches = await c.getmany(timeout_ms=timeout_ms, max_records=5000)
        for tp, msgs in batches.items():
            for m in msgs:
                assert m.timestamp_type == 0, "CreateTime expected"
                out.append(Got(tp.partition, m.offset, m.key, m.value,
                               tuple((k, v) for k, v in m.headers), m.timestamp))

    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        for tp in tps:
            c.seek(tp, 0)
        deadline = time.monotonic() + CONSUME_TIMEOUT
        while len(out) < expected and time.monotonic() < deadline:
            await drain(500)
        await drain(300)
    finally:
        await c.stop()
    return out


# --------------------------------------------------------------------------- the matrix
def _roundtrip(client: str, codec: str, n: int, broker, topic: str) -> None:
    # kafka-python 3.0 refuses None header values ("All headers items must be (str, bytes)").
    records = make_records(n, PARTITIONS, null_header_values=client != "kafka-python")
    b = broker.bootstrap
    t0 = time.monotonic()
    if client == "confluent-kafka":
        _ck_create(b, topic)
        _ck_produce(b, topic, records, codec)
        t1 = time.monotonic()
        got = _ck_consume(b, topic, n)
    elif client == "kafka-python":
        _kp_create(b, topic)
        _kp_produce(b, topic, records, codec)
        t1 = time.monotonic()
        got = _kp_consume(b, topic, n)
    else:
        asyncio.run(_ak_create(b, topic))
        asyncio.run(_ak_produce(b, topic, records, codec))
        t1 = time.monotonic()
        got = asyncio.run(_ak_consume(b, topic, n))
    t2 = time.monotonic()
    assert broker.is_alive(), broker.output()[-4000:]
    verify(records, got, PARTITIONS)
    batches, fallback = verify_stored_codec(broker.log_dir, topic, PARTITIONS, codec, records)
    print(f"{client}/{codec}: {n} records, produce {t1 - t0:.1f}s, consume {t2 - t1:.1f}s, "
          f"{batches} batches on disk ({fallback} sent uncompressed by the client's fallback)")


CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_roundtrip(client, codec, broker, topic_name):
    _roundtrip(client, codec, FULL_COUNT, broker, topic_name)
