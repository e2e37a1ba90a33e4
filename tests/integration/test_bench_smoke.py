"""A short smoke run of the benchmark script against our broker (figures are not asserted)."""

import json
import subprocess
import sys

from tests.support.broker_process import REPO


def test_bench_quick_run_completes(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "bench/produce_bench.py", "--target", "ours", "--quick",
                           "--phases", "produce,consume", "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours = json.loads(out.read_text())["results"]["ours"]
    for acks in ("acks=1", "acks=all"):
        run = ours["produce"][acks]
        assert run["mb_s"] > 0 and run["p99_ms"] >= run["p50_ms"] > 0
    assert ours["consume"]["mb_s"] > 0
