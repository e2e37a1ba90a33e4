"""Real clients on both transaction versions at once: Kafka's own Java consume-transform-produce
copier (kafka-clients 4.3.1, ``TransactionalMessageCopier`` with random aborts) reads the
finalized ``transaction.version`` 2 and runs on it, while librdkafka's (confluent-kafka, which
knows only version 1) copies another partition beside it. Both outputs are exact under
read_committed, and the broker's request counts by version show who spoke which protocol:
EndTxn v5 and no AddPartitionsToTxn or AddOffsetsToTxn from the Java client, EndTxn v3-4 and
AddPartitionsToTxn v3 from librdkafka."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.test_metrics import scrape
from tests.support.clients import create_topic
from tests.support.copier import Copier
from tests.support.raw import finalize_feature

KAFKA_RUN = Path(__file__).resolve().parents[2] / "compat" / "kafka" / "kafka-run.sh"
RECORDS = 600  # per input partition
COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"

pytestmark = [
    pytest.mark.kafka_tools,
    pytest.mark.skipif(shutil.which("java") is None, reason="Java (17+) is needed for Kafka's copier"),
]


def _requests(b) -> dict[tuple[str, int], float]:
    text = scrape(b)
    out = {}
    for m in re.finditer(r'kafka_network_requestmetrics_requests_total\{request="(\w+)",version="(\d+)"\} (\S+)',
                         text):
        out[(m.group(1), int(m.group(2)))] = float(m.group(3))
    return out


def _count(requests: dict, name: str, versions=range(0, 20)) -> float:
    return sum(n for (r, v), n in requests.items() if r == name and v in versions)


def _load(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    values = {p: [b"p%d-%05d" % (p, i) for i in range(RECORDS)] for p in (0, 1)}
    for p, vs in values.items():
        for v in vs:
            producer.produce(topic, v, key=v, partition=p)
    assert producer.flush(30) == 0
    return values


def read_committed(bootstrap: str, topic: str, expected: int, partitions: int = 2,
                   timeout: float = 60) -> list[bytes]:
    """Every value of ``topic`` a read_committed consumer sees, once it has ``expected`` of them
    and nothing more comes (or ``timeout`` passed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append(msg.value())
            elif msg is None and len(out) >= expected:
                break
    finally:
        consumer.close()
    return out


def _java_copier(bootstrap: str, source: str, sink: str, partition: int) -> subprocess.Popen:
    return subprocess.Popen(
        [str(KAFKA_RUN), COPIER, "--broker-list", bootstrap, "--input-topic", source, "--input-partition",
         str(partition), "--output-topic", sink, "--consumer-group", f"java-{source}", "--transactional-id",
         f"java-{source}", "--max-messages", str(RECORDS), "--transaction-size", "40", "--enable-random-aborts",
         "--use-group-metadata"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class _PartitionCopier(Copier):
    """librdkafka's copier on one partition (the Java copier owns the other)."""

    def __init__(self, bootstrap: str, source: str, sink: str, partition: int) -> None:
        super().__init__(bootstrap, source, sink, f"rdkafka-{source}", f"rdkafka-{source}", batch=40)
        self.consumer.unsubscribe()
        self.consumer.assign([TopicPartition(source, partition, 0)])


def _run_java(bootstrap: str, source: str, sink: str, partition: int) -> None:
    java = _java_copier(bootstrap, source, sink, partition)
    try:
        out, _ = java.communicate(timeout=180)
    finally:
        if java.poll() is None:
            java.kill()
    assert java.returncode == 0, out[-3000:]


def test_java_on_tv2_and_librdkafka_on_tv1_copy_exactly_side_by_side(own_broker):
    b = own_broker()
    source, sinks = "tv2-in", ("tv2-java-out", "tv2-java-out-2", "tv2-rdkafka-out")
    for name in (source, *sinks):
        create_topic(b.bootstrap, name, partitions=2)
    values = _load(b.bootstrap, source)

    # The Java client alone: transaction version 2 from end to end.
    before = _requests(b)
    _run_java(b.bootstrap, source, sinks[0], 0)
    java = {k: n - before.get(k, 0) for k, n in _requests(b).items()}
    transactions = RECORDS / 40
    assert _count(java, "EndTxn", [5]) >= transactions and _count(java, "EndTxn", range(0, 5)) == 0
    assert _count(java, "TxnOffsetCommit", [5]) >= transactions and _count(java, "Produce", range(12, 14)) > 0
    assert _count(java, "AddPartitionsToTxn", range(0, 4)) == 0 and _count(java, "AddOffsetsToTxn") == 0
    assert sorted(read_committed(b.bootstrap, sinks[0], RECORDS)) == values[0]  # no loss, no duplicate

    # Both at once, copying the other partition: each on its own version.
    before = _requests(b)
    rdkafka = _PartitionCopier(b.bootstrap, source, sinks[2], 1)
    thread = threading.Thread(target=rdkafka.run_until, args=({1: RECORDS}, 120), daemon=True)
    thread.start()
    _run_java(b.bootstrap, source, sinks[1], 1)
    thread.join(150)
    assert not thread.is_alive(), "librdkafka's copier did not finish"
    rdkafka.close()
    both = {k: n - before.get(k, 0) for k, n in _requests(b).items()}
    assert _count(both, "EndTxn", [5]) >= transactions and _count(both, "EndTxn", range(0, 5)) >= transactions
    assert _count(both, "AddPartitionsToTxn", range(0, 4)) >= transactions  # librdkafka's own adds
    assert sorted(read_committed(b.bootstrap, sinks[1], RECORDS)) == values[1]
    assert sorted(read_committed(b.bootstrap, sinks[2], RECORDS)) == sorted(b"copied:" + v for v in values[1])


def test_a_downgrade_to_tv1_while_a_tv2_copier_runs_breaks_nothing(own_broker):
    """kafka-features downgrade while the Java copier's transactions are open: they end as they
    began (EndTxn v5 is TV2 whatever the level), the coordinator's own aborts follow the new
    level, a producer started after it uses version 1, and the output stays exact."""
    b = own_broker()
    source, sinks = "tv-down-in", ("tv-down-out", "tv-down-out-2")
    for name in (source, *sinks):
        create_topic(b.bootstrap, name, partitions=2)
    values = _load(b.bootstrap, source)
    java = _java_copier(b.bootstrap, source, sinks[0], 0)
    try:
        deadline = time.monotonic() + 60
        while _count(_requests(b), "EndTxn", [5]) < 3:  # a few transactions in
            assert time.monotonic() < deadline and java.poll() is None, java.communicate()[0][-3000:]
            time.sleep(0.05)
        finalize_feature(b.bootstrap, "transaction.version", 1)
        out, _ = java.communicate(timeout=180)
    finally:
        if java.poll() is None:
            java.kill()
    assert java.returncode == 0, out[-3000:]
    assert sorted(read_committed(b.bootstrap, sinks[0], RECORDS)) == values[0]
    before = _requests(b)
    _run_java(b.bootstrap, source, sinks[1], 1)  # started after the downgrade: version 1
    after = {k: n - before.get(k, 0) for k, n in _requests(b).items()}
    assert _count(after, "EndTxn", [5]) == 0 and _count(after, "AddPartitionsToTxn", range(0, 4)) > 0
    assert sorted(read_committed(b.bootstrap, sinks[1], RECORDS)) == values[1]
