"""franz-go (kgo + kadm, from the Go module proxy) against a target: two parts.

1. ``main.go`` here (pinned by the committed go.mod / go.sum): scenarios printed as one JSON line
   each (plain and idempotent produce/consume, a two-member group, transactions with
   read_committed, a GroupTransactSession consume-transform-produce loop checked exactly-once,
   kadm admin calls). Test ids are the scenario names.
2. franz-go's own integration tests ``TestGroupETL`` and ``TestTxnEtl`` (pkg/kgo, from the same
   module's source in the Go module cache), pointed at the target with ``KGO_SEEDS``; ids
   ``kgo/<Test>/<subtest>``. Their KIP-848 subtests skip themselves when the broker does not
   advertise ConsumerGroupHeartbeat v1.

On the secure targets (``SECURITY``) ``main.go`` gets the target's TLS / SCRAM settings as flags
(the password in ``COMPAT_SASL_PASSWORD``) and configures every client with them. kgo's test
harness reads TLS for all its clients from ``KGO_TEST_TLS`` (``ca:``, ``cert:``, ``key:``), so
the kgo tests run on ``mtls``; it has no SASL setting for its clients (``KGO_TEST_SCRAM`` only
feeds ``TestSCRAMAuth``, which dials without TLS), so on ``sasl-ssl`` only the scenarios run.

``prepare`` builds both binaries into ``~/.cache/kbroker/franz-go-<version>`` (a no-op when the
sources are unchanged); ``build_scenarios`` builds only ``main.go``'s. Each part is bounded and
its process group killed by pid on overrun.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import structlog

from compat.sources import go_build_stamp

log = structlog.get_logger("compat.franz_go")

SUITE = "franz-go"
VERSION = "v1.22.2"      # github.com/twmb/franz-go (kgo); go.mod pins the same
KADM_VERSION = "v1.19.0"
# franz-go's CI brokers (its docker-compose) run with these; both targets get them.
BROKER_CONFIG: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "true",
}
FAST = False
SECURITY = ("sasl-ssl", "mtls")
FEATURES = {
    "bootstrap": [r"bootstrap"],
    "produce": [r"produce", r"ETL", r"Etl"],
    "consume": [r"consume", r"ETL", r"Etl", r"read_committed", r"delete_records", r"compression"],
    "groups": [r"group", r"GroupETL", r"TxnEtl", r"offsets"],
    "idempotence": [r"idempotent", r"txn", r"TxnEtl"],
    "transactions": [r"txn", r"TxnEtl", r"transactions", r"producers"],
    "read_committed": [r"read_committed", r"eos", r"TxnEtl"],
    "admin": [r"^admin_", r"bootstrap"],
}
SCENARIOS = (
    "bootstrap_metadata", "produce_consume", "idempotent_produce", "group_two_members",
    "txn_abort_read_committed", "txn_group_transact_session_eos", "admin_create_delete_topics",
    "admin_describe_alter_configs", "admin_list_describe_groups", "admin_offsets",
    "admin_list_describe_transactions", "admin_describe_producers", "admin_delete_records",
    "produce_compression", "consume_after_milli", "admin_offset_for_leader_epoch",
    "admin_describe_log_dirs", "admin_describe_client_quotas",
)
KGO_TESTS = "TestGroupETL|TestTxnEtl"
KGO_RECORDS = 10000       # records per ETL chain (the suite's default, 500000, is for Kafka CI boxes)
HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "kbroker" / f"franz-go-{VERSION}"
SCENARIO_TIMEOUT_S = 90
KGO_TIMEOUT_S = 420


def _go_env() -> dict[str, str]:
    return {**os.environ, "GOFLAGS": "-mod=mod"}


def build_scenarios() -> Path:
    """``main.go``'s binary, built when its sources changed (seconds, once the module is
    downloaded); also what tests that drive one scenario against their own broker run."""
    stamp, binary = CACHE / ".stamp-scenarios", CACHE / "franzgo"
    if not binary.exists() or not stamp.exists() or stamp.read_text() != go_build_stamp(HERE):
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["go", "build", "-o", str(binary), "."], cwd=HERE,
                       env=_go_env(), check=True, timeout=600, capture_output=True)
        stamp.write_text(go_build_stamp(HERE))
    return binary


def prepare() -> str:
    build_scenarios()
    stamp = CACHE / ".stamp"
    if not stamp.exists() or stamp.read_text() != go_build_stamp(HERE):
        _build_kgo_tests()
        stamp.write_text(go_build_stamp(HERE))
    go = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, timeout=30)
    return f"franz-go {VERSION} (kadm {KADM_VERSION}, {go.stdout.strip()})"


def _build_kgo_tests() -> None:
    """Compile pkg/kgo's tests from a writable copy of the pinned module's source."""
    mod = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "github.com/twmb/franz-go"],
                         cwd=HERE, env=_go_env(), check=True, capture_output=True, text=True,
                         timeout=300).stdout.strip()
    src = CACHE / "src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(mod, src)
    for path in [src, *src.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)  # the module cache is read-only
    subprocess.run(["go", "test", "-c", "-o", str(CACHE / "kgo.test"), "./pkg/kgo"], cwd=src,
                   env=_go_env(), check=True, timeout=900, capture_output=True)


def _bounded(cmd: list[str], timeout: float, log_path: Path, **kw) -> str:
    """Run ``cmd`` (its own process group) at most ``timeout`` s; its stdout."""
    with open(log_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True, **kw)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.error("franz_go_overran", cmd=cmd[0], pid=proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
    return out


def security_args(security) -> tuple[list[str], dict[str, str]]:
    """``main.go``'s flags and environment for a target's ``ClientSecurity`` (none: PLAINTEXT)."""
    return security.go_flags() if security is not None else ([], {})


def run_scenarios(target, workdir: Path) -> dict[str, str]:
    args, env = security_args(target.security)
    out = _bounded([str(CACHE / "franzgo"), "-brokers", target.bootstrap,
                    "-nodes", str(target.nodes), *args],
                   SCENARIO_TIMEOUT_S * len(SCENARIOS) + 60, workdir / "franzgo.log",
                   env={**os.environ, **env})
    results = {name: "failed" for name in SCENARIOS}
    for line in out.splitlines():
        row = json.loads(line)
        results[row["test"]] = row["outcome"]
        if row["outcome"] != "passed":
            log.warning("franz_go_scenario_failed", test=row["test"], error=row.get("error"))
    return results


def run_kgo_tests(target, workdir: Path) -> dict[str, str]:
    env = {**os.environ, "KGO_SEEDS": target.bootstrap, "KGO_TEST_RF": str(min(target.nodes, 3)),
           "KGO_TEST_RECORDS": str(KGO_RECORDS)}
    if target.security:  # mTLS only (see run): the harness's clients take TLS, not SASL
        tls = [f"ca:{target.security.ca}"]
        if target.security.cert:
            tls += [f"cert:{target.security.cert}", f"key:{target.security.key}"]
        env["KGO_TEST_TLS"] = ",".join(tls)
    out = _bounded(["go", "tool", "test2json", "-t", str(CACHE / "kgo.test"), "-test.v=test2json",
                    "-test.run", KGO_TESTS, "-test.timeout", f"{KGO_TIMEOUT_S}s"],
                   KGO_TIMEOUT_S + 60, workdir / "kgo-test.log", env=env,
                   cwd=CACHE / "src" / "pkg" / "kgo")
    (workdir / "kgo-test.json").write_text(out)
    results = {f"kgo/{name}": "failed" for name in KGO_TESTS.split("|")}
    outcome = {"pass": "passed", "fail": "failed", "skip": "skipped"}
    for line in out.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("Test") and event.get("Action") in outcome:
            results[f"kgo/{event['Test']}"] = outcome[event["Action"]]
    return results


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    results = run_scenarios(target, workdir)
    if target.security and target.security.mechanism:
        # kgo's harness cannot log its clients in with SASL (module docstring): not run.
        log.info("franz_go_kgo_tests_skipped", target=target.name, reason="no SASL in kgo's test harness")
        return results
    return {**results, **run_kgo_tests(target, workdir)}
