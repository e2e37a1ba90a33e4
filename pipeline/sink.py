"""The exactly-once sink: each micro-batch written with Kafka transactions, replays made no-ops.

Owns the write path of both outputs (aggregates, dead letters). For a micro-batch ``b`` of run
``r`` (the Spark query id kept in the checkpoint, or a backfill's id), rows are routed to output
partition ``p`` by a deterministic hash and the Spark task of partition ``p``:

1. opens a transactional producer (confluent-kafka) with ``transactional.id = <app>-<r>-<sink>-<p>``;
   ``init_transactions`` fences any earlier producer of that id (a zombie attempt) and aborts its
   open transaction;
2. reads, read_committed, the last progress record of ``(r, sink, p)`` from its partition of the
   compacted progress topic (up to the high watermark, see ``last_committed_batch``); if it already holds a batch id >= ``b`` the batch was committed
   before a crash and is skipped (replayed batch = no-op);
3. begins a transaction, produces the rows to partition ``p`` of the output topic and the progress
   record ``{"batch": b}`` to the progress topic, and commits: both or neither become visible.

The driver fences every ``(r, sink, p)`` id once when it starts, so that no zombie transaction of
a partition that happens to be empty in the replayed batch keeps the last stable offset back.

Known limits (see pipeline/README.md): exactly-once holds for consumers in read_committed only;
it relies on Spark recomputing the same rows for a replayed batch id (true for the Kafka source
with its offsets in the checkpoint and for the state store); a progress topic that loses records
(retention instead of compaction, deletion) breaks the replay check.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

TAIL = 64  # progress records read back before widening the scan

# Client-side errors of a broker going away or a leader/coordinator moving (cluster failover):
# librdkafka recovers from them by itself (new metadata, new connection), so the call is retried.
TRANSIENT = frozenset({
    KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT, KafkaError._WAIT_COORD, KafkaError._UNKNOWN_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError.REQUEST_TIMED_OUT,
})


def transient(err: KafkaError) -> bool:
    """An error that a retry after a failover can clear (never a fatal one: fenced, etc.)."""
    return not err.fatal() and (err.code() in TRANSIENT or err.retriable())


def retrying(call, timeout: float):
    """``call(remaining_seconds)`` until it returns, retrying transient Kafka errors for ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call(max(1.0, deadline - time.monotonic()))
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if err is None or not transient(err) or time.monotonic() >= deadline:
                raise
        time.sleep(0.2)


@dataclass(frozen=True)
class SinkSpec:
    """Where one output goes and how its transactions are named."""

    name: str
    bootstrap: str
    app_name: str
    topic: str
    partitions: int
    progress_topic: str
    progress_base: int
    transaction_timeout_ms: int = 30000

    def transactional_id(self, run_id: str, partition: int) -> str:
        return f"{self.app_name}-{run_id}-{self.name}-{partition}"

    def progress_key(self, run_id: str, partition: int) -> bytes:
        return f"{run_id}/{self.name}/{partition}".encode()


def _producer(spec: SinkSpec, run_id: str, partition: int) -> Producer:
    return Producer({
        "bootstrap.servers": spec.bootstrap,
        "transactional.id": spec.transactional_id(run_id, partition),
        "transaction.timeout.ms": spec.transaction_timeout_ms,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
    })


def fence(spec: SinkSpec, run_id: str, timeout: float = 60.0) -> None:
    """Fence every partition's transactional id of this run (aborts zombies' open transactions)."""
    for partition in range(spec.partitions):
        producer = _producer(spec, run_id, partition)
        retrying(producer.init_transactions, timeout)


_CONSUMERS: dict[tuple[str, str], Consumer] = {}


def _new_consumer(bootstrap: str, isolation: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"progress-check-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True,
        "fetch.wait.max.ms": 10, "log_level": 3,
    })


def _watermarks_client(bootstrap: str) -> Consumer:
    """One read_uncommitted consumer per worker process for watermark queries (it never fetches)."""
    key = (bootstrap, "read_uncommitted")
    if key not in _CONSUMERS:
        _CONSUMERS[key] = _new_consumer(bootstrap, "read_uncommitted")
    return _CONSUMERS[key]


def _watermarks(bootstrap: str, tp: TopicPartition, timeout: float) -> tuple[int, int]:
    """(low, high) of ``tp``, retried across a failover. A client that failed is replaced: with
    no assignment it does not refresh the metadata that still names the dead leader."""
    def query(left: float) -> tuple[int, int]:
        try:
            return _watermarks_client(bootstrap).get_watermark_offsets(tp, timeout=min(left, 5.0), cached=False)
        except KafkaException:
            _CONSUMERS.pop((bootstrap, "read_uncommitted")).close()
            raise
    return retrying(query, timeout)


def close_consumers() -> None:
    """Close the cached watermark clients (tests; worker processes just exit)."""
    while _CONSUMERS:
        _CONSUMERS.popitem()[1].close()


def last_committed_batch(spec: SinkSpec, run_id: str, partition: int, timeout: float = 30.0) -> int | None:
    """The batch id of the last committed progress record of (run, sink, partition), read_committed.

    The scan goes up to the high watermark (asked read_uncommitted), not to the last stable offset:
    an open transaction of another writer on the partition would otherwise hide our own last
    commit behind it. Reading read_committed past it waits until that transaction ends.
    """
    key = spec.progress_key(run_id, partition)
    tp = TopicPartition(spec.progress_topic, spec.progress_base + partition)
    low, high = _watermarks(spec.bootstrap, tp, timeout)
    if high <= low:
        return None
    # a fresh reader per check: no event of an earlier assignment can be taken for this one's end
    consumer = _new_consumer(spec.bootstrap, "read_committed")
    try:
        start = max(low, high - TAIL)
        while True:
            found = _scan_for_key(consumer, tp, start, high, key, timeout)
            if found is not None or start <= low:
                return found
            start = max(low, start - 16 * TAIL)
    finally:
        consumer.close()


def _scan_for_key(consumer: Consumer, tp: TopicPartition, start: int, end: int, key: bytes,
                  timeout: float) -> int | None:
    """Read [start, end) of one partition; the batch id of the last record with ``key``."""
    if start >= end:
        return None
    consumer.assign([TopicPartition(tp.topic, tp.partition, start)])
    found: int | None = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)  # returns as soon as a record (or the end) is there
        if msg is None:
            continue
        err = msg.error()
        if err is not None and err.code() == KafkaError._PARTITION_EOF:
            if msg.offset() >= end:
                return found
            continue
        if err is not None and transient(err):
            continue  # a leader moving: the consumer fetches from the new one by itself
        if err is not None:
            raise KafkaException(err)
        if msg.key() == key:
            found = int(json.loads(msg.value())["batch"])
        if msg.offset() + 1 >= end:
            return found
    raise TimeoutError(f"progress partition {tp.topic}[{tp.partition}] not readable up to {end}")


def _produce(producer: Producer, topic: str, partition: int, key: bytes | None, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, value, key, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)


def write_partition(spec: SinkSpec, run_id: str, batch_id: int, partition: int,
                    rows: Iterable[tuple[str | None, str]]) -> dict:
    """Write one output partition of one batch in one transaction; skip it if already committed."""
    records = list(rows)
    stats = {"partition": partition, "records": len(records), "written": 0, "skipped": 0,
             "broker_seconds": 0.0}
    if not records:
        return stats
    t0 = time.perf_counter()
    producer = _producer(spec, run_id, partition)
    retrying(producer.init_transactions, 60)
    done = last_committed_batch(spec, run_id, partition)
    if done is not None and done >= batch_id:
        stats["skipped"] = len(records)
        stats["broker_seconds"] = time.perf_counter() - t0
        return stats
    producer.begin_transaction()
    for key, value in records:
        _produce(producer, spec.topic, partition, key.encode() if key is not None else None, value.encode())
    progress = json.dumps({"batch": batch_id, "records": len(records), "at_ms": int(time.time() * 1000)})
    _produce(producer, spec.progress_topic, spec.progress_base + partition,
             spec.progress_key(run_id, partition), progress.encode())
    try:
        retrying(producer.commit_transaction, 60)  # a retriable commit may be called again
    except KafkaException as exc:
        if exc.args and exc.args[0].txn_requires_abort():
            producer.abort_transaction(60)
        raise
    stats["written"] = len(records)
    stats["broker_seconds"] = time.perf_counter() - t0
    return stats


def _checked(index: int, items: Iterator[tuple[int, str | None, str]]) -> Iterator[tuple[str | None, str]]:
    """(key, value) of rows routed to output partition ``index``; anything else is a routing bug."""
    for p, key, value in items:
        if p != index:
            raise RuntimeError(f"row routed to partition {p} arrived in task {index}")
        yield key, value


def partition_writer(spec: SinkSpec, run_id: str, batch_id: int):
    """The function Spark runs per partition (index == output partition)."""

    def run(index: int, items: Iterator[tuple[int, str | None, str]]) -> Iterator[dict]:
        yield write_partition(spec, run_id, batch_id, index, _checked(index, items))

    return run


def crash_hook(query: str, batch_id: int, written: int) -> None:
    """Fault injection for the restart tests: kill -9 the driver right after a batch committed.

    ``KBROKER_PIPELINE_CRASH_AFTER_COMMIT=<query>:<batch>`` kills the whole process group (driver
    JVM and Python workers) after the first batch >= <batch> of <query> that wrote records, before
    Spark records the batch as done in its checkpoint: the restart must replay it as a no-op.
    """
    target = os.environ.get("KBROKER_PIPELINE_CRASH_AFTER_COMMIT", "")
    if not target or written == 0:
        return
    name, _, batch = target.rpartition(":")
    if name == query and batch_id >= int(batch):
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
