"""EOS acceptance 2: consume-transform-produce with send_offsets_to_transaction.

An input topic (3 partitions, distinct values) is copied record by record to an output
topic (2 partitions) by a read_committed group consumer and a transactional producer that
commits the consumer's positions inside each transaction (KIP-447 group metadata where the
client supports it). Every 7th transaction is aborted and its input re-processed from the
positions it started at. Then:

- the output read with read_committed holds each input record exactly once;
- the aborted copies were really written (read_uncommitted sees more than the input), so
  it is the abort that hides them;
- the group's committed offsets equal the input's end offsets.

Each client (confluent-kafka, kafka-python, aiokafka) copies 20 000 records in
transactions of up to 500.
Target: ``KBROKER_EOS_TARGET=kafka`` for a real Apache Kafka, else our broker.
"""

from __future__ import annotations

import time
from collections import Counter

from tests.support import eos_accept
from tests.support.eos_accept import (
    READ_UNCOMMITTED,
    cf_producer,
    create_topic,
    drain,
    end_offsets,
    load_input,
    wait_until,
)

eos_broker = eos_accept.eos_broker  # the module's broker fixture

IN_PARTS, OUT_PARTS = 3, 2
ABORT_EVERY = 7
TXN_MAX = 500


def transform(partition: int, offset: int, value: bytes) -> bytes:
    return b"%d:%d:" % (partition, offset) + value


def setup(bs: str, topic: str, n: int) -> tuple[str, str, dict[int, int], set[bytes]]:
    src, dst = f"{topic}-in", f"{topic}-out"
    create_topic(bs, src, IN_PARTS)
    create_topic(bs, dst, OUT_PARTS)
    load_input(bs, src, n, IN_PARTS)
    ends = end_offsets(bs, src, IN_PARTS, READ_UNCOMMITTED)
    assert sum(ends.values()) == n
    # The expected output: every input record, transformed, exactly once.
    expected = {transform(m.partition, m.offset, m.value)
                for m in drain(bs, src, IN_PARTS, isolation="read_uncommitted")}
    assert len(expected) == n
    return src, dst, ends, expected


def verify(bs: str, dst: str, group: str, src: str, ends: dict[int, int], expected: set[bytes],
           aborted_records: int) -> None:
    out = drain(bs, dst, OUT_PARTS, isolation="read_committed", timeout=120)
    counts = Counter(m.value for m in out)
    dupes = [v for v, k in counts.items() if k > 1]
    assert not dupes, f"{len(dupes)} records duplicated in read_committed output, e.g. {dupes[:3]}"
    missing = expected - set(counts)
    assert not missing, f"{len(missing)} input records missing from the output, e.g. {sorted(missing)[:3]}"
    assert set(counts) == expected
    ru = drain(bs, dst, OUT_PARTS, isolation="read_uncommitted", timeout=120)
    assert aborted_records > 0
    assert len(ru) == len(expected) + aborted_records, "the aborted transactions' records must be in the log"
    assert committed_offsets(bs, group, src) == ends


def committed_offsets(bs: str, group: str, src: str, timeout: float = 20.0) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch), once they stop being pending."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        def fetch():
            got = c.committed([TopicPartition(src, p) for p in range(IN_PARTS)], timeout=10)
            return {tp.partition: tp.offset for tp in got}
        last = {}

        def stable():
            nonlocal last
            last = fetch()
            return last if all(o >= 0 for o in last.values()) else None
        try:
            wait_until(stable, timeout, "the group's committed offsets", interval=0.3)
        except AssertionError:
            pass
        return last
    finally:
        c.close()


def test_ctp_exactly_once_confluent(eos_broker, topic_name):
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    n = 20_000
    bs = eos_broker.bootstrap
    src, dst, ends, expected = setup(bs, topic_name, n)
    group = f"{topic_name}-g"
    consumer = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "fetch.wait.max.ms": 50})
    consumer.subscribe([src])
    producer = cf_producer(bs, f"{topic_name}-ctp", **{"linger.ms": 10})
    producer.init_transactions(30)
    positions: dict[int, int] = {}
    txns = aborted_records = 0
    deadline = time.monotonic() + 150
    try:
        while any(positions.get(p, 0) < ends[p] for p in range(IN_PARTS)):
            assert time.monotonic() < deadline, f"CTP did not finish: positions {positions}, ends {ends}"
            msgs = consumer.consume(TXN_MAX, 0.5)
            for m in msgs:
                if m.error() is not None and m.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(m.error())
            msgs = [m for m in msgs if m.error() is None]
            if not msgs:
                continue
            start = dict(positions)
            producer.begin_transaction()
            for m in msgs:
                assert m.offset() == positions.get(m.partition(), 0), "consumer skipped or repeated input"
                producer.produce(dst, transform(m.partition(), m.offset(), m.value()), key=m.key())
                positions[m.partition()] = m.offset() + 1
            txns += 1
            if txns % ABORT_EVERY == 0:
                assert producer.flush(30) == 0
                producer.abort_transaction(30)
                aborted_records += len(msgs)
                for p in {m.partition() for m in msgs}:
                    consumer.seek(TopicPartition(src, p, start.get(p, 0)))
                positions = start
                continue
            producer.send_offsets_to_transaction(
                [TopicPartition(src, p, o) for p, o in positions.items()],
                consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
    finally:
        consumer.close()
    assert txns >= ABORT_EVERY
    verify(bs, dst, group, src, ends, expected, aborted_records)


def test_ctp_exactly_once_kafka_python(eos_broker, topic_name):
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition

    n = 20_000
    bs = eos_broker.bootstrap
    src, dst, ends, expected = setup(bs, topic_name, n)
    group = f"{topic_name}-g"
    consumer = KafkaConsumer(src, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed",
                             fetch_max_wait_ms=50, max_poll_records=TXN_MAX)
    producer = KafkaProducer(bootstrap_servers=bs, transactional_id=f"{topic_name}-ctp", linger_ms=10)
    producer.init_transactions()
    positions: dict[int, int] = {}
    txns = aborted_records = 0
    deadline = time.monotonic() + 150
    try:
        while any(positions.get(p, 0) < ends[p] for p in range(IN_PARTS)):
            assert time.monotonic() < deadline, f"CTP did not finish: positions {positions}, ends {ends}"
            batch = consumer.poll(timeout_ms=500, max_records=TXN_MAX)
            msgs = [r for recs in batch.values() for r in recs]
            if not msgs:
                continue
            start = dict(positions)
            producer.begin_transaction()
            for m in msgs:
                assert m.offset == positions.get(m.partition, 0), "consumer skipped or repeated input"
                producer.send(dst, transform(m.partition, m.offset, m.value), key=m.key)
                positions[m.partition] = m.offset + 1
            txns += 1
            if txns % ABORT_EVERY == 0:
                producer.flush()
                producer.abort_transaction()
                aborted_records += len(msgs)
                for p in {m.partition for m in msgs}:
                    consumer.seek(TopicPartition(src, p), start.get(p, 0))
                positions = start
                continue
            producer.send_offsets_to_transaction(
                {TopicPartition(src, p): OffsetAndMetadata(o, "", -1) for p, o in positions.items()},
                consumer.group_metadata())
            producer.commit_transaction()
    finally:
        consumer.close()
        producer.close()
    assert txns >= ABORT_EVERY
    verify(bs, dst, group, src, ends, expected, aborted_records)


async def test_ctp_exactly_once_aiokafka(eos_broker, topic_name):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    n = 20_000
    bs = eos_broker.bootstrap
    src, dst, ends, expected = await asyncio.to_thread(setup, bs, topic_name, n)
    group = f"{topic_name}-g"
    consumer = AIOKafkaConsumer(src, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level="read_committed",
                                fetch_max_wait_ms=50, max_poll_records=TXN_MAX)
    producer = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=f"{topic_name}-ctp", linger_ms=10)
    await consumer.start()
    await producer.start()
    positions: dict[int, int] = {}
    txns = aborted_records = 0
    deadline = time.monotonic() + 150
    try:
        while any(positions.get(p, 0) < ends[p] for p in range(IN_PARTS)):
            assert time.monotonic() < deadline, f"CTP did not finish: positions {positions}, ends {ends}"
            batch = await consumer.getmany(timeout_ms=500, max_records=TXN_MAX)
            msgs = [r for recs in batch.values() for r in recs]
            if not msgs:
                continue
            start = dict(positions)
            await producer.begin_transaction()
            futures = []
            for m in msgs:
                assert m.offset == positions.get(m.partition, 0), "consumer skipped or repeated input"
                futures.append(await producer.send(dst, transform(m.partition, m.offset, m.value), key=m.key))
                positions[m.partition] = m.offset + 1
            await asyncio.gather(*futures)
            txns += 1
            if txns % ABORT_EVERY == 0:
                await producer.abort_transaction()
                aborted_records += len(msgs)
                for p in {m.partition for m in msgs}:
                    consumer.seek(TopicPartition(src, p), start.get(p, 0))
                positions = start
                continue
            await producer.send_offsets_to_transaction(
                {TopicPartition(src, p): o for p, o in positions.items()}, group)
            await producer.commit_transaction()
    finally:
        await consumer.stop()
        await producer.stop()
    assert txns >= ABORT_EVERY
    await asyncio.to_thread(verify, bs, dst, group, src, ends, expected, aborted_records)
