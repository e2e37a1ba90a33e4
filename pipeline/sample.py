"""Sample order events for the demo, the tests and the benchmark, and a read_committed reader.

Owns a deterministic generator (valid events over the shipped product table, a chosen number of
malformed ones each breaking exactly one rule, with the reason the job must give) and loading them
into a topic with a transactional producer (plus one aborted transaction whose events must never
be counted). Known limit: the generator keeps event-time disorder (``jitter_ms``) well below the
job's default watermark; events later than the watermark would be dropped by Spark, by design.
"""

from __future__ import annotations

import csv
import json
import random
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from pipeline.config import PRODUCTS_CSV

BASE_TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@dataclass
class Sample:
    """Generated input: records in produce order, the malformed ones and their expected reason."""

    records: list[tuple[bytes | None, bytes]] = field(default_factory=list)
    valid: list[dict] = field(default_factory=list)
    malformed: dict[bytes, str] = field(default_factory=dict)  # raw value -> reason
    last_ts: int = BASE_TS


def _malformed(rnd: random.Random, event: dict) -> tuple[bytes, str]:
    """One event broken in one way, with the reason the job must report."""
    kind = rnd.randrange(9)
    e = dict(event)
    if kind == 0:
        return f"not json {e['event_id']} {{".encode(), "not_json"
    if kind == 1:
        return json.dumps([e["event_id"], e["qty"]]).encode(), "not_json"
    if kind == 2:
        del e["user_id"]
        return json.dumps(e).encode(), "missing:user_id"
    if kind == 3:
        e["qty"] = "many"
        return json.dumps(e).encode(), "invalid:qty"
    if kind == 4:
        e["qty"] = 0
        return json.dumps(e).encode(), "invalid:qty"
    if kind == 5:
        e["price_cents"] = -5
        return json.dumps(e).encode(), "invalid:price_cents"
    if kind == 6:
        e["ts"] = "yesterday"
        return json.dumps(e).encode(), "invalid:ts"
    if kind == 7:
        e["sku"] = "SKU-999"
        return json.dumps(e).encode(), "unknown_sku"
    del e["event_id"]
    return json.dumps(e).encode(), "missing:event_id"


def skus(path: str = str(PRODUCTS_CSV)) -> list[str]:
    with open(path, newline="") as f:
        return [row["sku"] for row in csv.DictReader(f)]


def generate(n_valid: int, n_malformed: int, seed: int = 42, step_ms: int = 100,
             jitter_ms: int = 20_000, users: int = 500) -> Sample:
    """``n_valid`` good events ``step_ms`` apart (± jitter) and ``n_malformed`` bad ones among them."""
    rnd = random.Random(seed)
    catalogue = skus()
    total = n_valid + n_malformed
    bad_at = set(rnd.sample(range(total), n_malformed))
    sample = Sample()
    for i in range(total):
        ts = BASE_TS + i * step_ms + rnd.randint(-jitter_ms, jitter_ms)
        event = {"event_id": f"e-{seed}-{i}", "ts": ts, "user_id": f"u-{rnd.randrange(users)}",
                 "sku": rnd.choice(catalogue), "qty": rnd.randint(1, 5), "price_cents": rnd.randint(99, 9999)}
        key = event["user_id"].encode()
        if i in bad_at:
            value, reason = _malformed(rnd, event)
            # the raw text identifies the record: make it unique
            while value in sample.malformed:
                value += b" "
            sample.malformed[value] = reason
        else:
            value = json.dumps(event).encode()
            sample.valid.append(event)
        sample.records.append((key, value))
        sample.last_ts = max(sample.last_ts, ts)
    return sample


def end_of_input(last_ts: int, window_ms: int, watermark_ms: int) -> bytes:
    """The control event that moves the watermark past every window of the sample."""
    return json.dumps({"type": "end_of_input", "ts": last_ts + watermark_ms + 2 * window_ms}).encode()


def load(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]], per_txn: int = 2000,
         aborted: int = 50) -> None:
    """Produce ``records`` in transactions of ``per_txn``; one extra transaction of ``aborted``
    valid-looking events is aborted halfway through (read_committed readers must skip it)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"loader-{uuid.uuid4().hex[:8]}",
                         "linger.ms": 20, "partitioner": "murmur2_random"})
    producer.init_transactions(30)
    for start in range(0, len(records), per_txn):
        if aborted and start >= len(records) // 2:
            producer.begin_transaction()
            for i in range(aborted):
                event = {"event_id": f"aborted-{i}", "ts": BASE_TS, "user_id": "u-0", "sku": "SKU-000",
                         "qty": 1000, "price_cents": 100}
                producer.produce(topic, json.dumps(event).encode(), b"u-0")
            producer.flush(30)
            producer.abort_transaction(30)
            aborted = 0
        producer.begin_transaction()
        for key, value in records[start:start + per_txn]:
            producer.produce(topic, value, key)
            producer.poll(0)
        producer.commit_transaction(60)


def read_committed(bootstrap: str, topic: str, timeout: float = 30.0) -> list:
    """Every committed record of ``topic`` (all partitions, from the start, up to their end)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        meta = consumer.list_topics(topic, timeout=10)
        parts = sorted(meta.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        pending, out = set(parts), []
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                elif err is not None:
                    raise KafkaException(err)
                else:
                    out.append(msg)
        if pending:
            raise TimeoutError(f"{topic}: partitions {sorted(pending)} not read to their end in {timeout}s")
        return out
    finally:
        consumer.close()
