"""Bad configuration ends with one clear line on stderr and exit status 2, never a stack trace.

Covers an unreachable bootstrap server, a missing input topic, an unwritable checkpoint directory
and missing connector jars; each is caught before the JVM starts (so these tests need no Java).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.broker_process import REPO, free_port

pytestmark = [pytest.mark.pipeline]

STACK_TRACE_MARKERS = ("Traceback", "\tat ", "Exception in thread", "py4j", "java.")


def run_job(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    cmd = [sys.executable, "-m", "pipeline", "stream", *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def assert_one_clear_line(res: subprocess.CompletedProcess, *words: str) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{res.stderr}"
    line = lines[0]
    assert line.startswith("pipeline: error: ")
    assert not any(m in res.stderr for m in STACK_TRACE_MARKERS), res.stderr
    for word in words:
        assert word in line, line
    return line


def test_unreachable_bootstrap(tmp_path):
    port = free_port()  # nothing listens there
    res = run_job("--bootstrap-servers", f"127.0.0.1:{port}", "--checkpoint", str(tmp_path / "ck"))
    assert_one_clear_line(res, "cannot reach the broker", f"127.0.0.1:{port}")


def test_missing_input_topic(pipeline_broker, tmp_path):
    res = run_job("--bootstrap-servers", pipeline_broker.bootstrap, "--checkpoint", str(tmp_path / "ck"),
                  "--input-topic", "no-such-topic")
    assert_one_clear_line(res, "input topic 'no-such-topic' does not exist")


def test_unwritable_checkpoint(pipeline_broker, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")  # (root ignores permission bits: use a file as parent)
    res = run_job("--bootstrap-servers", pipeline_broker.bootstrap, "--checkpoint", str(blocker / "ck"))
    assert_one_clear_line(res, "checkpoint directory", "is not writable")


def test_missing_connector_jars(pipeline_broker, orders, tmp_path):
    res = run_job("--bootstrap-servers", pipeline_broker.bootstrap, "--checkpoint", str(tmp_path / "ck"),
                  "--input-topic", orders.topic, "--output-topic", "cfg-out",
                  "--dead-letter-topic", "cfg-dlq", "--progress-topic", "cfg-progress",
                  env={"PIPELINE_JARS": str(tmp_path / "no-jars")})
    assert_one_clear_line(res, "connector jars are missing", "make pipeline-setup")
