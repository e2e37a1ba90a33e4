"""A short smoke run of the cluster benchmark against our three-node cluster (figures are not asserted)."""

import json
import subprocess
import sys

import pytest

from tests.support.broker_process import REPO
from tests.support.cluster import require_etcd

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def test_cluster_bench_quick_run_completes(tmp_path):
    require_etcd()
    out = tmp_path / "cluster_bench.json"
    proc = subprocess.run([sys.executable, "bench/cluster_bench.py", "--target", "ours", "--quick",
                           "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours = json.loads(out.read_text())["results"]["ours"]
    assert ours["max"]["mb_s"] > 0 and ours["max"]["p99_ms"] >= ours["max"]["p50_ms"] > 0
    assert ours["rate"]["mb_s"] > 0 and ours["rate"]["broker_cpu_s_per_gb"] > 0
    assert ours["leader_failover"]["failover_s"] > 0
    assert ours["controller_failover"]["failover_s"] > 0
