"""librdkafka's own integration tests (``tests/test-runner``) against one target.

Each test number runs as its own process (``TESTS=<nnnn> test-runner -L -Q -p1``: broker
tests only, quick mode) with an outer timeout, so a hang costs one test, not the run; its
process group is killed by pid. The outcome of every test name the process ran is read from
the runner's ``Test <name> PASSED|FAILED|SKIPPED`` lines; a name it never reported (crash,
timeout) counts as failed. Test ids are the names with the number set off: ``0103-transactions``.

Local tests (``TEST_F_LOCAL``), manual ones and the mock-cluster tests never touch a broker and
are left out. ``TEST_KAFKA_VERSION=4.3.1`` lets the version-gated tests run. Topics are created
with the broker's default replication factor (most tests pass -1 or auto-create), so the
targets' ``default.replication.factor`` (1 on one node, 3 on the clusters) decides it.

``COMPAT_LIBRDKAFKA_TESTS=0090,0103`` restricts a run to those numbers (in that order);
``COMPAT_LIBRDKAFKA_TIMEOUT`` is the per-process limit in seconds (default 300).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import structlog

from compat.librdkafka import build

log = structlog.get_logger("compat.librdkafka")

SUITE = "librdkafka"
FAST = False

# librdkafka's default test scenario (tests/scenarios/default.json) and the broker settings its
# trivup clusters get (interactive_broker_version.py); replication comes from each target.
BROKER_CONFIG = {
    "auto.create.topics.enable": "true",
    "num.partitions": "4",
    "log.retention.bytes": "1000000000",
    "group.initial.rebalance.delay.ms": "0",
}

FEATURES = {
    "bootstrap": [r"^0001-", r"^0035-", r"^0063-"],
    "produce": [r"^0005-", r"^0008-", r"^0011-", r"^0012-", r"^0017-", r"^0039-", r"^0110-"],
    "consume": [r"^0012-", r"^0013-", r"^0015-", r"^0022-", r"^0031-", r"^0034-", r"^0041-",
                r"^0082-"],
    "groups": [r"^0018-", r"^0019-", r"^0030-", r"^0033-", r"^0045-", r"^0056-", r"^0089-",
               r"^0102-", r"^0113-", r"^0118-", r"^0132-"],
    "idempotence": [r"^0090-", r"^0094-", r"idempoten"],
    "transactions": [r"^0098-", r"^0103-", r"^0129-", r"txn", r"transaction"],
    "read_committed": [r"^0098-", r"^0129-"],
    "admin": [r"^0081-", r"^0019-"],
}

# Transactions and idempotence first: the run can be cut short and these matter most.
PRIORITY = ("0011", "0090", "0094", "0098", "0103", "0129", "0081", "0113", "0012", "0030",
            "0019", "0102", "0018", "0045")
FAST_TESTS = ("0001", "0012", "0103")

RESULT_LINE = re.compile(r"=+ Test (\S+) (PASSED|FAILED|SKIPPED)")
TEST_ENTRY = re.compile(r"_TEST\(\s*(\d{4})_(\w+),\s*([^,)]*)")


def prepare() -> str:
    build.build()
    return f"librdkafka {build.VERSION}"


def broker_tests() -> dict[str, list[str]]:
    """Test number -> its broker test names, from the runner's test table in test.c."""
    table = (build.TESTS / "test.c").read_text().split("struct test tests[] = {", 1)[1]
    groups: dict[str, list[str]] = {}
    for num, rest, flags in TEST_ENTRY.findall(table):
        if any(f in flags for f in ("TEST_F_LOCAL", "TEST_F_MANUAL")) or "mock" in rest:
            continue
        groups.setdefault(num, []).append(f"{num}_{rest}")
    return groups


def test_id(name: str) -> str:
    return name.replace("_", "-", 1)


def selected(groups: dict[str, list[str]], fast: bool) -> list[str]:
    """The test numbers to run, priority ones first."""
    wanted = os.environ.get("COMPAT_LIBRDKAFKA_TESTS")
    if wanted:
        return [n for n in (w.strip() for w in wanted.split(",")) if n in groups]
    if fast:
        return list(FAST_TESTS)
    return [n for n in PRIORITY if n in groups] + sorted(n for n in groups if n not in PRIORITY)


def run_group(num: str, names: list[str], env: dict[str, str], log_path: Path,
              timeout: float) -> dict[str, str]:
    """Run test number ``num`` in its own process; outcome per test id."""
    with log_path.open("wb") as out:
        proc = subprocess.Popen([str(build.RUNNER), "-L", "-Q", "-p1"], cwd=build.TESTS,
                                env={**env, "TESTS": num}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)    # its own session: only this runner's tree
            proc.wait()
            log.warning("librdkafka_test_timeout", test=num, seconds=timeout)
    outcomes = {test_id(n): o.lower() for n, o in
                RESULT_LINE.findall(log_path.read_text(errors="replace")) if n in names}
    return {test_id(n): outcomes.get(test_id(n), "failed") for n in names}


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    conf = workdir / "test.conf"
    conf.write_text(f"bootstrap.servers={target.bootstrap}\n"
                    "test.timeout.multiplier=2\n")
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)
    env = {**os.environ, "RDKAFKA_TEST_CONF": str(conf), "TEST_KAFKA_VERSION": "4.3.1",
           "LD_LIBRARY_PATH": f"{build.HOME / 'src'}:{build.HOME / 'src-cpp'}"}
    env.pop("CI", None)             # CI=... would lower test concurrency and change timeouts
    timeout = float(os.environ.get("COMPAT_LIBRDKAFKA_TIMEOUT", "300"))
    keep = Path(os.environ.get("COMPAT_LIBRDKAFKA_LOGS", "")) if \
        os.environ.get("COMPAT_LIBRDKAFKA_LOGS") else None
    groups = broker_tests()
    results: dict[str, str] = {}
    for num in selected(groups, fast):
        start = time.monotonic()
        log_path = (keep / target.name if keep else logs) / f"{num}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        got = run_group(num, groups[num], env, log_path, timeout)
        results.update(got)
        log.info("librdkafka_test", target=target.name, test=num, outcomes=got,
                 seconds=round(time.monotonic() - start, 1))
    return results
