"""Helpers of the pipeline tests: skip reason, expected aggregates, the job as a process group.

The tests run the real job (``python -m pipeline``, Spark local[2]) as a separate process against
a real broker process and read its output with a plain read_committed consumer. They are skipped
with the reason when Java, pyspark or the connector jars are missing (``make pipeline-setup``).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.broker_process import REPO

WINDOW_MS = 5 * 60_000
WATERMARK_MS = 10 * 60_000
N_VALID = 49_700
N_MALFORMED = 300


def _skip_reason() -> str | None:
    if shutil.which("java") is None:
        return "Java (17+) is not installed: Spark needs a JVM (apt-get install openjdk-17-jre-headless)"
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (make pipeline-setup)"
    from pipeline.errors import PipelineError
    from pipeline.session import connector_jars

    try:
        connector_jars()
    except PipelineError as exc:
        return str(exc)
    return None


SPARK_MISSING = _skip_reason()
needs_spark = pytest.mark.skipif(SPARK_MISSING is not None, reason=SPARK_MISSING or "")


@dataclass
class Orders:
    """The loaded input topic and what the job must make of it."""

    topic: str
    expected: Counter  # (category, window_start, window_end, events, units, revenue_cents) -> 1
    malformed: dict[bytes, str]  # raw value -> reason


def expected_aggregates(events: list[dict]) -> Counter:
    """The windows the job must emit, computed here in plain Python."""
    with open(REPO / "pipeline" / "data" / "products.csv", newline="") as f:
        category = {row["sku"]: row["category"] for row in csv.DictReader(f)}
    sums: dict[tuple[str, int], list[int]] = {}
    for e in events:
        start = e["ts"] - e["ts"] % WINDOW_MS
        acc = sums.setdefault((category[e["sku"]], start), [0, 0, 0])
        acc[0] += 1
        acc[1] += e["qty"]
        acc[2] += e["qty"] * e["price_cents"]
    return Counter((cat, start, start + WINDOW_MS, *acc) for (cat, start), acc in sums.items())


def job_command(command: str, bootstrap: str, checkpoint: Path, name: str, *extra: str) -> list[str]:
    """``python -m pipeline`` with topics and transactional ids of its own (``name``)."""
    return [sys.executable, "-m", "pipeline", command, "--bootstrap-servers", bootstrap,
            "--checkpoint", str(checkpoint), "--output-topic", f"{name}-out",
            "--dead-letter-topic", f"{name}-dlq", "--progress-topic", f"{name}-progress",
            "--app-name", name, "--log-format", "json", *extra]


class Job:
    """One run of the job as a process group of its own (driver, JVM, Python workers)."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        out = open(log, "a")
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})}, start_new_session=True)
        out.close()

    def lines(self) -> list[dict]:
        out = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def batches(self, query: str) -> list[dict]:
        return [x for x in self.lines() if x.get("event") == "batch" and x.get("query") == query]

    def wait_for(self, predicate, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"job exited ({self.proc.returncode}):\n{self.log.read_text()[-4000:]}")
            time.sleep(0.1)
        raise AssertionError(f"condition not met in {timeout}s:\n{self.log.read_text()[-4000:]}")

    def kill9(self) -> None:
        """kill -9 of the whole driver: Python driver, Spark JVM, Python workers."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"job still running after {timeout}s:\n{self.log.read_text()[-4000:]}") from None
