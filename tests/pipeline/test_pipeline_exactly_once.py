"""Acceptance of the pipeline: exact aggregates and dead letters, also across kill -9 of the driver.

50k events (300 malformed, one aborted transaction) go through the real job (Spark local[2])
against a broker process; the output is read with a plain read_committed consumer, without any
de-duplication, and compared with aggregates computed here in plain Python.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pytest

from pipeline.sample import read_committed
from tests.pipeline.helpers import Job, Orders, job_command, needs_spark

pytestmark = [pytest.mark.pipeline, needs_spark]

RUN_TIMEOUT = 300


def aggregates_of(bootstrap: str, topic: str) -> Counter:
    rows = Counter()
    for msg in read_committed(bootstrap, topic):
        v = json.loads(msg.value())
        assert msg.key().decode() == v["category"]
        rows[(v["category"], v["window_start"], v["window_end"], v["events"], v["units"], v["revenue_cents"])] += 1
    return rows


def dead_letters_of(bootstrap: str, topic: str) -> Counter:
    return Counter((json.loads(m.value())["raw"].encode(), json.loads(m.value())["reason"])
                   for m in read_committed(bootstrap, topic))


def assert_exact_output(bootstrap: str, name: str, orders: Orders) -> None:
    got = aggregates_of(bootstrap, f"{name}-out")
    missing, extra = orders.expected - got, got - orders.expected
    assert not missing and not extra, f"missing {list(missing)[:5]}, extra/duplicated {list(extra)[:5]}"
    dead = dead_letters_of(bootstrap, f"{name}-dlq")
    assert dead == Counter(orders.malformed.items()), "every malformed event exactly once, with its reason"


@pytest.mark.slow  # the driver-kill test below runs the same job to the same exact output
def test_stream_output_is_exactly_the_expected_aggregates(pipeline_broker, orders, tmp_path):
    name = "eos-plain"
    cmd = job_command("stream", pipeline_broker.bootstrap, tmp_path / "ck", name,
                      "--input-topic", orders.topic, "--idle-timeout", "3")
    job = Job(cmd, tmp_path / "job.log")
    assert job.wait(RUN_TIMEOUT) == 0, job.log.read_text()[-4000:]
    batches = job.batches("aggregates")
    for query in ("aggregates", "dead-letters"):  # 50k events + the end-of-input event, aborted ones skipped
        assert sum(b["records_in"] for b in job.batches(query)) == 50_001
    assert sum(b["dead_lettered"] for b in job.batches("dead-letters")) == len(orders.malformed)
    assert all({"records_in", "records_out", "dead_lettered", "latency_ms"} <= b.keys() for b in batches)
    assert_exact_output(pipeline_broker.bootstrap, name, orders)


def test_driver_killed_twice_mid_run_output_still_exact(pipeline_broker, orders, tmp_path):
    name = "eos-kill"
    ck = tmp_path / "ck"
    cmd = job_command("stream", pipeline_broker.bootstrap, ck, name,
                      "--input-topic", orders.topic, "--idle-timeout", "3")

    # 1: kill -9 at an arbitrary point of a batch, after a couple of batches went through
    first = Job(cmd, tmp_path / "run1.log")
    first.wait_for(lambda: len(first.batches("aggregates")) >= 2, RUN_TIMEOUT)
    time.sleep(random.uniform(0, 1.0))  # anywhere in the next batch (not needed for correctness)
    first.kill9()

    # 2: kill -9 right after a batch's transactions committed, before Spark records it as done
    resume = first.batches("aggregates")[-1]["batch"] + 2
    second = Job(cmd, tmp_path / "run2.log", env={"KBROKER_PIPELINE_CRASH_AFTER_COMMIT": f"aggregates:{resume}"})
    assert second.wait(RUN_TIMEOUT) == -9, second.log.read_text()[-4000:]

    # 3: restart from the checkpoint and run to the end: the replayed batch must be a no-op
    third = Job(cmd, tmp_path / "run3.log")
    assert third.wait(RUN_TIMEOUT) == 0, third.log.read_text()[-4000:]
    replayed = [b for b in third.batches("aggregates") if b["replayed_skipped"]]
    assert replayed, "the batch committed before the crash was not recognised on replay"
    assert replayed[0]["records_out"] == 0
    batches = third.batches("aggregates")
    assert all({"records_in", "records_out", "dead_lettered", "latency_ms"} <= b.keys() for b in batches)
    assert_exact_output(pipeline_broker.bootstrap, name, orders)
