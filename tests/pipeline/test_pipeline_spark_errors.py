"""A failure inside Spark (after the pre-flight checks) also ends with one clear line.

The job runs once over a small topic; the topic is then deleted and created again, empty: the
checkpoint points at offsets that no longer exist, Spark's Kafka source fails the query
(``failOnDataLoss``), and the job must say so in one line, without a JVM stack trace.
"""

from __future__ import annotations

import json

import pytest

from pipeline import sample
from tests.pipeline.helpers import Job, job_command, needs_spark
from tests.support.clients import admin, create_topic

pytestmark = [pytest.mark.pipeline, needs_spark, pytest.mark.slow]


def test_checkpoint_ahead_of_a_recreated_topic_is_one_clear_line(pipeline_broker, tmp_path):
    bootstrap, topic, name = pipeline_broker.bootstrap, "orders-recreated", "spark-errors"
    create_topic(bootstrap, topic, 1)
    data = sample.generate(500, 5, seed=3)
    sample.load(bootstrap, topic, data.records, aborted=0)
    cmd = job_command("stream", bootstrap, tmp_path / "ck", name, "--input-topic", topic, "--idle-timeout", "2")
    first = Job(cmd, tmp_path / "run1.log")
    assert first.wait(300) == 0, first.log.read_text()[-3000:]

    client = admin(bootstrap)  # must outlive the future
    client.delete_topics([topic], operation_timeout=10)[topic].result(15)
    create_topic(bootstrap, topic, 1)
    sample.load(bootstrap, topic, [(b"k", json.dumps({"type": "end_of_input", "ts": 0}).encode())], aborted=0)

    second = Job(cmd, tmp_path / "run2.log")
    assert second.wait(300) == 2, second.log.read_text()[-3000:]
    text = second.log.read_text()
    errors = [line for line in text.splitlines() if line.startswith("pipeline: error: ")]
    assert len(errors) == 1, text[-3000:]
    assert "input records the checkpoint points at are gone" in errors[0], errors[0]
    assert "\tat " not in text and "Traceback" not in text and "Exception in thread" not in text, text[-3000:]
