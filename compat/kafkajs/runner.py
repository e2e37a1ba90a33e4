"""kafkajs 2.2.4 (npm) scenarios against a target: ``scenarios.js`` run by node.

``prepare`` installs the committed ``package.json`` + ``package-lock.json`` with ``npm ci`` into
``~/.cache/kbroker/kafkajs-2.2.4`` (a no-op when the cached lock file is the same).
``scenarios.js`` bounds each test itself and appends one JSON line per test; the runner bounds
the whole node process too and kills its process group by pid if it overruns. A test with no
line (the process died or was killed) counts as failed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import structlog

log = structlog.get_logger("compat.kafkajs")

SUITE = "kafkajs"
VERSION = "2.2.4"
# What kafkajs's own docker-compose sets on its brokers that matters here: no initial
# rebalance delay (its group tests wait for joins), auto topic creation for its producers.
BROKER_CONFIG: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "true",
}
FAST = False
# Every client of scenarios.js takes ``ssl`` (CA, client certificate) and ``sasl``
# (scram-sha-512) from KAFKAJS_SECURITY.
SECURITY = ("sasl-ssl", "mtls")
FEATURES = {
    "bootstrap": [r"bootstrap"],
    "produce": [r"produce", r"idempotent", r"transaction", r"delete_topic_records"],
    "consume": [r"consume", r"transaction", r"idempotent", r"delete_topic_records"],
    "groups": [r"group", r"offsets", r"send_offsets"],
    "idempotence": [r"idempotent", r"transaction"],
    "transactions": [r"transaction"],
    "read_committed": [r"read_committed", r"transaction_commit", r"send_offsets"],
    "admin": [r"^admin_", r"bootstrap"],
}
TESTS = (
    "bootstrap_metadata", "produce_consume_roundtrip", "consumer_group_two_members",
    "idempotent_producer", "transaction_commit", "transaction_abort_read_committed",
    "transaction_send_offsets", "admin_create_topics", "admin_fetch_topic_metadata",
    "admin_describe_configs", "admin_alter_configs", "admin_fetch_offsets", "admin_reset_offsets",
    "admin_list_describe_groups", "admin_delete_groups", "admin_delete_topic_records",
    "admin_fetch_offsets_by_timestamp",
)
HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "kbroker" / f"kafkajs-{VERSION}"
TEST_TIMEOUT_S = 90


def prepare() -> str:
    lock = (HERE / "package-lock.json").read_bytes()
    if not (CACHE / "node_modules" / "kafkajs").exists() or \
            (CACHE / "package-lock.json").read_bytes() != lock:
        CACHE.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(HERE / name, CACHE / name)
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=CACHE, check=True,
                       timeout=300, capture_output=True)
    installed = json.loads((CACHE / "node_modules" / "kafkajs" / "package.json").read_text())
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=10)
    return f"kafkajs {installed['version']} (node {node.stdout.strip()})"


def _security(sec) -> dict[str, str]:
    """The target's ``ClientSecurity`` as scenarios.js reads it (paths as strings, no ``None``)."""
    fields = ("protocol", "ca", "cert", "key", "mechanism", "username", "password")
    return {f: str(getattr(sec, f)) for f in fields if getattr(sec, f) is not None}


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    out = workdir / "kafkajs-results.jsonl"
    env = {**os.environ, "NODE_PATH": str(CACHE / "node_modules"),
           "TEST_TIMEOUT_MS": str(TEST_TIMEOUT_S * 1000)}
    if target.security is not None:
        env["KAFKAJS_SECURITY"] = json.dumps(_security(target.security))
    cmd = ["node", str(HERE / "scenarios.js"), target.bootstrap, str(target.nodes), str(out)]
    with open(workdir / "kafkajs.log", "w") as logf:
        proc = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=TEST_TIMEOUT_S * len(TESTS) + 60)
        except subprocess.TimeoutExpired:
            log.error("kafkajs_overran", pid=proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    results = {test: "failed" for test in TESTS}
    for line in out.read_text().splitlines() if out.exists() else []:
        row = json.loads(line)
        results[row["test"]] = row["outcome"]
        if row["outcome"] != "passed":
            log.warning("kafkajs_test_failed", test=row["test"], error=row.get("error"))
    return results
