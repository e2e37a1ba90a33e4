"""The exactly-once sink's building blocks against a broker process (no Spark needed).

A replayed batch is skipped; a batch committed behind another writer's open transaction on the
progress partition is still found (the scan goes to the high watermark and waits, it does not
stop at the last stable offset); a zombie producer of the same transactional id cannot commit.
"""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from confluent_kafka import KafkaException, Producer

from pipeline.sample import read_committed
from pipeline.sink import SinkSpec, close_consumers, last_committed_batch, write_partition
from tests.support.clients import create_topic

pytestmark = [pytest.mark.pipeline]


@pytest.fixture
def spec(pipeline_broker):
    name = f"sink-{uuid.uuid4().hex[:6]}"
    create_topic(pipeline_broker.bootstrap, f"{name}-out", 2)
    create_topic(pipeline_broker.bootstrap, f"{name}-progress", 4, {"cleanup.policy": "compact"})
    yield SinkSpec(name="aggregates", bootstrap=pipeline_broker.bootstrap, app_name=name, topic=f"{name}-out",
                   partitions=2, progress_topic=f"{name}-progress", progress_base=0)
    close_consumers()


def rows(batch: int, n: int = 3) -> list[tuple[str, str]]:
    return [(f"k{i}", json.dumps({"batch": batch, "i": i})) for i in range(n)]


def test_replayed_batch_is_skipped(spec):
    assert write_partition(spec, "run", 0, 1, rows(0))["written"] == 3
    replay = write_partition(spec, "run", 0, 1, rows(0))
    assert replay["written"] == 0 and replay["skipped"] == 3
    assert write_partition(spec, "run", 1, 1, rows(1))["written"] == 3
    assert last_committed_batch(spec, "run", 1) == 1
    assert last_committed_batch(spec, "other-run", 1) is None
    values = sorted(m.value() for m in read_committed(spec.bootstrap, spec.topic))
    assert values == sorted(v.encode() for _, v in rows(0) + rows(1))


def test_commit_behind_an_open_foreign_transaction_is_found(spec):
    foreign = Producer({"bootstrap.servers": spec.bootstrap, "transactional.id": f"{spec.app_name}-foreign"})
    foreign.init_transactions(30)
    foreign.begin_transaction()
    foreign.produce(spec.progress_topic, b"{}", b"someone-else", partition=0)
    foreign.flush(30)
    ours = Producer({"bootstrap.servers": spec.bootstrap, "transactional.id": spec.transactional_id("run", 0)})
    ours.init_transactions(30)
    ours.begin_transaction()
    ours.produce(spec.progress_topic, json.dumps({"batch": 5}).encode(), spec.progress_key("run", 0), partition=0)
    ours.commit_transaction(30)  # committed, but after the foreign transaction's first offset

    ender = threading.Timer(1.5, lambda: foreign.abort_transaction(30))
    ender.start()
    try:
        assert last_committed_batch(spec, "run", 0) == 5
    finally:
        ender.join()
    assert write_partition(spec, "run", 5, 0, rows(5))["skipped"] == 3


def test_zombie_cannot_commit_after_a_new_attempt_started(spec):
    zombie = Producer({"bootstrap.servers": spec.bootstrap, "transactional.id": spec.transactional_id("run", 1)})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(spec.topic, b"zombie", b"z", partition=1)
    zombie.flush(30)
    assert write_partition(spec, "run", 0, 1, rows(0))["written"] == 3  # fences the zombie
    with pytest.raises(KafkaException):
        zombie.commit_transaction(30)
    values = [m.value() for m in read_committed(spec.bootstrap, spec.topic)]
    assert b"zombie" not in values and len(values) == 3
