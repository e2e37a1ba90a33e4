"""The backfill command: the same transformation over an offset range, written exactly once.

A second run with the same checkpoint (the range is pinned there) must be a no-op: nothing is
written again, the output is unchanged. Two Spark runs, over a minute: ``slow`` (``make
test-all``); ``make test`` runs the streaming job's driver-kill test, which shares the sink.
"""

from __future__ import annotations

import json

import pytest

from tests.pipeline.helpers import Job, job_command, needs_spark
from tests.pipeline.test_pipeline_exactly_once import aggregates_of, assert_exact_output

pytestmark = [pytest.mark.pipeline, pytest.mark.slow, needs_spark]


def summary_of(job: Job) -> dict:
    lines = [x for x in job.lines() if x.get("event") == "backfill"]
    assert len(lines) == 1, job.log.read_text()[-3000:]
    return lines[0]


def test_backfill_writes_every_window_once_and_a_rerun_is_a_noop(pipeline_broker, orders, tmp_path):
    name = "backfill"
    cmd = job_command("backfill", pipeline_broker.bootstrap, tmp_path / "ck", name, "--input-topic", orders.topic)
    first = Job(cmd, tmp_path / "run1.log")
    assert first.wait(300) == 0, first.log.read_text()[-4000:]
    summary = summary_of(first)
    assert summary["records_in"] == 50_001
    assert summary["records_out"] == sum(orders.expected.values())
    assert summary["dead_lettered"] == len(orders.malformed)
    pinned = json.loads((tmp_path / "ck" / "backfill.json").read_text())
    assert sum(pinned["end"].values()) > 50_001  # transaction markers and the aborted records count too
    assert_exact_output(pipeline_broker.bootstrap, name, orders)

    before = aggregates_of(pipeline_broker.bootstrap, f"{name}-out")
    second = Job(cmd, tmp_path / "run2.log")
    assert second.wait(300) == 0, second.log.read_text()[-4000:]
    again = summary_of(second)
    assert again["run"] == summary["run"]
    assert again["records_out"] == 0 and again["dead_lettered"] == 0
    assert again["replayed_skipped"] == summary["records_out"] + summary["dead_lettered"]
    assert aggregates_of(pipeline_broker.bootstrap, f"{name}-out") == before
    assert_exact_output(pipeline_broker.bootstrap, name, orders)
