"""franz-go (kgo v1.22.2, the compat harness's ``main.go``) against a broker of its own, checked
by what the broker saw rather than by what the client reports:

- its ``GroupTransactSession`` consume-transform-produce (first transaction aborted, output
  checked exactly once under read_committed) runs on transaction version 2 while that level is
  finalized: EndTxn v5, TxnOffsetCommit v5, and no AddPartitionsToTxn or
  AddOffsetsToTxn; after ``transaction.version`` is downgraded to 1 the same program falls back
  to version 1 (EndTxn v4 or older, its own AddPartitionsToTxn / AddOffsetsToTxn);
- its consumers fetch in incremental fetch sessions (KIP-227): the broker caches a session
  while they read, and none was cached before (the broker has no followers).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading

import pytest

from compat.franz_go import runner
from tests.integration.test_metrics import scrape
from tests.integration.test_tv2_clients import _count, _requests
from tests.support.raw import finalize_feature

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="Go is needed to build franz-go's harness")

EOS = "^txn_group_transact_session_eos$"


@pytest.fixture(scope="module")
def franzgo():
    return runner.build_scenarios()


def _sessions(b) -> float:
    return float(re.search(r"^kafka_server_fetchsessioncache_numincrementalfetchsessions (\S+)", scrape(b),
                           re.M).group(1))


def run_scenario(franzgo, b, scenario: str, watch=None, nodes: int = 1) -> tuple[dict, list[float]]:
    """One scenario's JSON line against ``b`` (a broker or a cluster of ``nodes``), and
    ``watch(b)`` sampled every 50 ms while it ran."""
    proc = subprocess.Popen([str(franzgo), "-brokers", b.bootstrap, "-nodes", str(nodes), "-run", scenario],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            seen.append(watch(b))

    sampler = threading.Thread(target=sample, daemon=True)
    if watch is not None:
        sampler.start()
    try:
        out, err = proc.communicate(timeout=runner.SCENARIO_TIMEOUT_S)
    finally:
        done.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    if watch is not None:
        sampler.join(5)
    rows = [line for line in out.splitlines() if line.startswith("{")]
    assert len(rows) == 1, (out, err[-2000:])
    return json.loads(rows[0]), seen


def test_franz_go_transacts_on_tv2_and_falls_back_to_tv1_after_a_downgrade(own_broker, franzgo):
    b = own_broker(**runner.BROKER_CONFIG)

    before = _requests(b)
    row, _ = run_scenario(franzgo, b, EOS)
    assert row["outcome"] == "passed", row
    tv2 = {k: n - before.get(k, 0) for k, n in _requests(b).items()}
    assert _count(tv2, "EndTxn", [5]) >= 2 and _count(tv2, "EndTxn", range(0, 5)) == 0  # one abort, then commits
    assert _count(tv2, "TxnOffsetCommit", [5]) >= 1
    assert _count(tv2, "AddPartitionsToTxn", range(0, 4)) == 0 and _count(tv2, "AddOffsetsToTxn") == 0

    finalize_feature(b.bootstrap, "transaction.version", 1)
    before = _requests(b)
    row, _ = run_scenario(franzgo, b, EOS)
    assert row["outcome"] == "passed", row
    tv1 = {k: n - before.get(k, 0) for k, n in _requests(b).items()}
    assert _count(tv1, "EndTxn", [5]) == 0 and _count(tv1, "EndTxn", range(0, 5)) >= 2
    assert _count(tv1, "TxnOffsetCommit", [5]) == 0  # (its non-transactional producer stays on v12+)
    assert _count(tv1, "AddPartitionsToTxn", range(0, 4)) >= 1 and _count(tv1, "AddOffsetsToTxn") >= 1


def test_franz_go_consumes_in_incremental_fetch_sessions(own_broker, franzgo):
    b = own_broker(**runner.BROKER_CONFIG)
    assert _sessions(b) == 0
    row, seen = run_scenario(franzgo, b, "^produce_consume$", watch=_sessions)
    assert row["outcome"] == "passed", row
    assert max(seen, default=0) >= 1, seen  # a single broker with no followers: every session is a client's
