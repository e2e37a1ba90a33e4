"""kbroker-verify end to end on the devcluster (the command line, as CI and users run it).

(a) a 40-second run of Jepsen's transactional workload under kill -9 of brokers (three faults)
must be valid, and must not be vacuous: its history holds acknowledged writes, reads and the
final read;
(b) the sanity modes: readers at read_uncommitted must make the checker report G1a (aborted
reads), and plain producers (no idempotence, retries) behind the duplicating proxy must make it
report duplicates, each with the operations that show it, and exit non-zero;
(c) a fault the target cannot do (etcd-member on Apache Kafka) is refused in one line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cluster import require_etcd

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.cluster


def verify(out: Path, *args: str, timeout: float = 420) -> subprocess.CompletedProcess:
    """``python -m tools.verify`` with ``args``; the run starts and stops its own devcluster."""
    require_etcd()
    cmd = [sys.executable, "-m", "tools.verify", "--target", "devcluster", "--out", str(out), *args]
    with subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}) as popen:
        try:
            stdout, stderr = popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            popen.send_signal(signal.SIGTERM)  # the run stops its cluster and clients on SIGTERM
            try:
                stdout, stderr = popen.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                popen.kill()
                stdout, stderr = popen.communicate()
            pytest.fail(f"kbroker-verify did not finish in {timeout}s:\n{stderr[-3000:]}")
    (out / "stdout.txt").write_text(stdout)
    (out / "stderr.txt").write_text(stderr)
    return subprocess.CompletedProcess(cmd, popen.returncode, stdout, stderr)


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def read_ops(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def sends(op: dict) -> list:
    return [m for m in op.get("value") or [] if isinstance(m, list) and m and m[0] == "send"]


def reads(op: dict) -> int:
    return sum(len(recs) for m in op.get("value") or []
               if isinstance(m, list) and m and m[0] == "poll" and isinstance(m[1], dict)
               for recs in m[1].values())


def test_txn_under_kill9_is_valid(tmp_path):
    proc = verify(tmp_path, "--workload", "txn", "--nemesis", "kill9", "--seconds", "40",
                  "--interval", "15", "--seed", "1")
    verdict = last_line(proc.stdout)
    assert proc.returncode == 0, f"{verdict}\n{proc.stderr[-3000:]}"
    assert verdict.startswith("valid: true"), verdict

    ops = read_ops(tmp_path / "history.jsonl")
    committed = [op for op in ops if op["type"] == "ok" and op["f"] == "txn" and sends(op)]
    assert sum(len(sends(op)) for op in committed) >= 300, "too few acknowledged writes to check anything"
    polled = [op for op in ops if op["type"] == "ok" and op["f"] in ("poll", "txn") and reads(op)]
    assert sum(reads(op) for op in polled) >= 300, "too few reads to check anything"
    assert any(op["type"] == "fail" and op["f"] == "txn" for op in ops)  # aborts on purpose
    final = [op for op in ops if op["f"] == "final-read"]
    assert final and sum(len(v) for v in final[0]["value"].values()) >= 300
    faults = [op for op in ops if op["process"] == "nemesis" and op["f"] == "kill9"]
    assert len(faults) >= 4, "the kill -9 faults were not injected (start and stop, twice)"
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["valid"] is True
    assert (tmp_path / "report.html").stat().st_size > 10000


def test_a_fault_the_target_cannot_do_is_refused_in_one_line(tmp_path):
    """An etcd fault on Apache Kafka (no etcd there) is refused before anything starts: exit 2,
    one verdict line saying why, and a stderr line the matrix reads as an n/a cell."""
    import shutil

    from tools.verify.matrix import _unsupported

    if shutil.which("java") is None:
        pytest.skip("the kafka target needs java")
    proc = verify(tmp_path, "--target", "kafka", "--workload", "txn", "--nemesis", "etcd-member",
                  "--seconds", "5", timeout=120)
    verdict = last_line(proc.stdout)
    assert proc.returncode == 2, f"{verdict}\n{proc.stderr[-3000:]}"
    assert verdict.startswith("valid: unknown (not run: target kafka cannot do the etcd-member fault"), verdict
    assert "kill9 or machine covers it" in verdict
    assert (_unsupported(proc.stderr) or "").startswith("n/a: "), proc.stderr[-2000:]


def test_read_uncommitted_readers_report_g1a(tmp_path):
    proc = verify(tmp_path, "--workload", "txn", "--nemesis", "none", "--seconds", "10",
                  "--isolation", "read_uncommitted", "--seed", "2")
    verdict = last_line(proc.stdout)
    assert proc.returncode == 1, f"{verdict}\n{proc.stderr[-3000:]}"
    assert verdict.startswith("valid: false") and "G1a=" in verdict, verdict

    result = json.loads((tmp_path / "result.json").read_text())
    assert result["valid"] is False
    g1a = result["anomalies"]["G1a"]
    assert g1a and all(a["ops"] for a in g1a), "G1a reported without the operations that show it"
    shown = g1a[0]["ops"]
    writers = [op for op in shown if op.get("type") == "fail"]
    assert writers, shown  # the aborted write ...
    assert any(op["index"] != writers[0]["index"] for op in shown), shown  # ... and another op, its reader
    assert "G1a" in (tmp_path / "report.html").read_text()


def test_plain_producers_behind_the_duplicating_proxy_report_duplicates(tmp_path):
    proc = verify(tmp_path, "--workload", "txn", "--nemesis", "none", "--seconds", "10", "--no-idempotence",
                  "--seed", "3")
    verdict = last_line(proc.stdout)
    assert proc.returncode == 1, f"{verdict}\n{proc.stderr[-3000:]}"
    assert verdict.startswith("valid: false") and "duplicate=" in verdict, verdict

    result = json.loads((tmp_path / "result.json").read_text())
    dups = result["anomalies"]["duplicate"]
    assert dups and all(a["ops"] for a in dups), "duplicate reported without the operations that show it"
    example = dups[0]
    assert "appears at" in example["description"], example  # one value at two or more offsets ...
    assert any(op.get("f") == "send" and op.get("type") == "ok" for op in example["ops"]), example  # ... its send
    assert "duplicate" in (tmp_path / "report.html").read_text()


def test_merge_orders_by_time_and_drops_a_torn_line(tmp_path):
    """The runner's merge of the clients' files (no cluster): by time, re-indexed; a client
    killed mid-write leaves a torn last line, which is dropped, and an operation without a
    completion, which gets an info one (as Jepsen records for a crashed process)."""
    from tools.verify.history import HistoryWriter
    from tools.verify.runner import merge_history

    hist = tmp_path / "history"
    hist.mkdir()
    t0 = time.monotonic()
    a, b = HistoryWriter(str(hist / "p0.jsonl"), started=t0), HistoryWriter(str(hist / "p1.jsonl"), started=t0)
    a.record(0, "invoke", "txn", [["send", "t/0", 1]])
    b.record(1, "invoke", "poll", [["poll", None]])
    a.record(0, "ok", "txn", [["send", "t/0", [0, 1]]])
    a.close()
    b.close()
    with open(hist / "p1.jsonl", "a") as f:
        f.write('{"index":1,"time":')
    ops = merge_history(hist, tmp_path / "history.jsonl", ended={1: 99.0})
    # process 1 was killed mid-poll: its invoke gets an info completion when it ended
    assert [(op.process, op.type) for op in ops] == [(0, "invoke"), (1, "invoke"), (0, "ok"), (1, "info")]
    assert ops[-1].time == 99.0 and ops[-1].f == "poll" and ops[-1].error
    assert [op.index for op in ops] == [0, 1, 2, 3]
    assert len((tmp_path / "history.jsonl").read_text().splitlines()) == 4


def test_report_renders_plots_and_examples(tmp_path):
    """report.html from a small history with a fault and an anomaly (no cluster)."""
    from tools.verify.checker import check
    from tools.verify.history import Op
    from tools.verify.report import write_report

    h = [Op(0, 0.1, 0, "invoke", "txn", [["send", "t/0", 1]]),
         Op(1, 0.2, 0, "fail", "txn", [["send", "t/0", [0, 1]]]),
         Op(2, 0.3, "nemesis", "info", "kill9", {"phase": "start", "node": 1}),
         Op(3, 0.4, 1, "invoke", "poll", [["poll", None]]),
         Op(4, 1.5, 1, "ok", "poll", [["poll", {"t/0": [[0, 1]]}]]),
         Op(5, 2.0, "nemesis", "info", "kill9", {"phase": "stop", "node": 1}),
         Op(6, 2.5, "checker", "ok", "final-read", {"t/0": []})]
    result = check(h, isolation="read_uncommitted")
    assert not result.valid and "G1a" in result.counts
    path = tmp_path / "report.html"
    write_report(str(path), result, h, {"workload": "txn"}, {"records": 1})
    text = path.read_text()
    assert text.count("data:image/png;base64,") == 3
    assert "G1a" in text and "valid: false" in text
