"""librdkafka's own integration tests (``tests/test-runner``) against one target.

Each test number runs as its own process (``TESTS=<nnnn> test-runner -L -p1``: broker tests
only; not ``-Q``, which skips every sub-test not marked quick) with an outer timeout, so a hang
costs one test, not the run; its process group is killed by pid. The outcome of every test name the process ran is read from
the summary table the runner prints at exit (tests of another scenario, e.g.
``noautocreate``, show as skipped there); a name it never reported (crash, timeout) counts as
failed. Test ids are the names with the number set off: ``0103-transactions``.

Local tests (``TEST_F_LOCAL``), manual ones and the mock-cluster tests never touch a broker and
are left out. ``TEST_KAFKA_VERSION=4.3.1`` lets the version-gated tests run. Most tests create
topics with the broker's default replication factor (-1 or auto-create: the targets'
``default.replication.factor``, 1 on one node, 3 on the clusters); those that ask for 3 (librdkafka's
CI always has three brokers) are capped to the target's node count (``TEST_MAX_REPLICATION_FACTOR``,
see ``build.py``). ``KAFKA_PATH`` / ``BROKERS`` give the tests Kafka 4.3.1's ``kafka-topics`` and
jars for their Java helpers.

``COMPAT_LIBRDKAFKA_TESTS=0090,0103`` restricts a run to those numbers (in that order); with
``COMPAT_LIBRDKAFKA_MERGE=1`` as well, the outcomes of the other tests are taken from the
target's stored result (re-running a few tests without losing the full run).
``COMPAT_LIBRDKAFKA_TIMEOUT`` is the per-process limit in seconds (default 600; the
longest tests get ``LONG_TIMEOUT_S``). ``COMPAT_LIBRDKAFKA_JOBS`` test processes run at once
(default 3); ``COMPAT_LIBRDKAFKA_BUDGET_S`` stops starting tests after that many seconds (the
tests not started are left out of the result, and logged).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog

from compat.librdkafka import build
from compat.results import RESULTS

log = structlog.get_logger("compat.librdkafka")

SUITE = "librdkafka"
FAST = False
SECURITY = ("sasl-ssl", "mtls")  # test.conf carries the settings to every test's clients

# librdkafka's default test scenario (tests/scenarios/default.json) and the broker settings its
# trivup clusters get (interactive_broker_version.py); replication comes from each target. The
# ACL tests (0081-admin, and 0109/0115/0119 that deny a topic to User:* with kafka-acls) need
# an authorizer that lets everyone through when no ACL matches, and no super user (ANONYMOUS
# as a super user would ignore their deny ACLs).
BROKER_CONFIG = {
    "auto.create.topics.enable": "true",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "num.partitions": "4",
    "log.retention.bytes": "1000000000",
    "group.initial.rebalance.delay.ms": "3000",   # Kafka's default: trivup sets none
    # Kafka's default, which trivup keeps: several tests create RF 1 topics and produce with
    # acks=all (idempotence), which min.insync.replicas=2 (the cluster targets') refuses.
    "min.insync.replicas": "1",
    # librdkafka's cluster_testing.py for Kafka >= 4.2: share-group tests lower the record lock
    # duration (0173's lock-timeout redelivery) below Kafka's 15 s minimum otherwise.
    "group.share.min.record.lock.duration.ms": "1000",
}

FEATURES = {
    "bootstrap": [r"^0001-", r"^0035-", r"^0063-"],
    "produce": [r"^0005-", r"^0008-", r"^0011-", r"^0012-", r"^0017-", r"^0039-", r"^0110-"],
    "consume": [r"^0012-", r"^0013-", r"^0015-", r"^0022-", r"^0031-", r"^0034-", r"^0041-",
                r"^0082-"],
    "groups": [r"^0018-", r"^0019-", r"^0030-", r"^0033-", r"^0045-", r"^0056-", r"^0089-",
               r"^0102-", r"^0113-", r"^0118-", r"^0132-"],
    "idempotence": [r"^0090-", r"^0094-", r"idempoten"],
    # Share-group tests (0170-0185) are none of these features: they count in the totals.
    "transactions": [r"^0098-", r"^0103-", r"^0129-", r"^(?!01[78]\d-share).*(txn|transaction)"],
    "read_committed": [r"^0098-", r"^0129-"],
    "admin": [r"^0081-", r"^0019-"],
}

# Transactions and idempotence first: the run can be cut short and these matter most.
PRIORITY = ("0011", "0090", "0094", "0098", "0103", "0129", "0081", "0113", "0012", "0030",
            "0019", "0102", "0018", "0045")
FAST_TESTS = ("0001", "0012", "0103")
# 0081-admin (every Admin API) and 0113 (two dozen cooperative rebalance scenarios) run 5-10
# minutes when they pass.
# 0174's 19 share-consumer concurrency scenarios take over 600 s on three nodes (each
# acknowledgement is persisted through a remote share coordinator with acks=all).
LONG_TIMEOUT_S = {"0081": 1200.0, "0113": 1200.0, "0174": 1200.0}

# The summary table the runner prints at exit: "| 0103_transactions | PASSED | 12.3s |".
SUMMARY_ROW = re.compile(r"^\|\s*(\d{4}_\w+)\s*\|\s*(PASSED|FAILED|SKIPPED|RUNNING)\s*\|", re.M)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\x1b\(B")
OUTCOME = {"PASSED": "passed", "FAILED": "failed", "SKIPPED": "skipped", "RUNNING": "failed"}
TEST_ENTRY = re.compile(r"_TEST\(\s*(\d{4})_(\w+),\s*([^,)]*)")


def prepare() -> str:
    build.build()
    build.kafka_path()
    return f"librdkafka {build.VERSION}"


def broker_tests() -> dict[str, list[str]]:
    """Test number -> its broker test names, from the runner's test table in test.c."""
    return parse_test_table((build.TESTS / "test.c").read_text())


def parse_test_table(test_c: str) -> dict[str, list[str]]:
    table = test_c.split("struct test tests[] = {", 1)[1]
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
        proc = subprocess.Popen([str(build.RUNNER), "-L", "-p1"], cwd=build.TESTS,
                                env={**env, "TESTS": num}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)    # its own session: only this runner's tree
            proc.wait()
            log.warning("librdkafka_test_timeout", test=num, seconds=timeout)
    return outcomes(log_path.read_text(errors="replace"), names)


def outcomes(output: str, names: list[str]) -> dict[str, str]:
    """Test id -> outcome for ``names`` from test-runner's output; unreported means failed."""
    reported = {n: OUTCOME[o] for n, o in SUMMARY_ROW.findall(ANSI.sub("", output))}
    return {test_id(n): reported.get(n, "failed") for n in names}


WARM_UP = "compat-librdkafka-warm-up"   # topic, group and transactional id


def warm_up(bootstrap: str, security: dict[str, str], deadline_s: float = 60.0) -> None:
    """Create __consumer_offsets and __transaction_state before the first test.

    librdkafka's CI runs its tests on a cluster that has served groups and transactions before;
    on a fresh broker the first OffsetFetch can answer NOT_COORDINATOR while the offsets topic
    loads, which a test reports as a failure of its own.
    """
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    conf = {"bootstrap.servers": bootstrap, **security}
    end = time.monotonic() + deadline_s
    while True:
        try:
            producer = Producer(conf)
            producer.produce(WARM_UP, b"warm-up")
            if producer.flush(30):
                raise KafkaException("warm-up message not delivered")
            Producer({**conf, "transactional.id": WARM_UP}).init_transactions(30)
            consumer = Consumer({**conf, "group.id": WARM_UP})
            try:
                consumer.commit(offsets=[TopicPartition(WARM_UP, 0, 0)],
                                asynchronous=False)
            finally:
                consumer.close()
            return
        except KafkaException as e:
            if time.monotonic() > end:
                log.warning("librdkafka_warm_up_failed", error=str(e))
                return
            time.sleep(1)


def stored(target: str) -> dict[str, str]:
    """The test outcomes of the target's last stored run (empty if none)."""
    path = RESULTS / SUITE / f"{target}.json"
    return dict(json.loads(path.read_text())["tests"]) if path.exists() else {}


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    conf = workdir / "test.conf"
    security = target.librdkafka_security  # every test client's
    conf.write_text(f"bootstrap.servers={target.bootstrap}\n"
                    "test.timeout.multiplier=2\n" + "".join(f"{k}={v}\n" for k, v in security.items()))
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)
    env = {**os.environ, "RDKAFKA_TEST_CONF": str(conf), "TEST_KAFKA_VERSION": "4.3.1",
           "LD_LIBRARY_PATH": f"{build.HOME / 'src'}:{build.HOME / 'src-cpp'}",
           "TEST_MAX_REPLICATION_FACTOR": str(target.nodes),
           "KAFKA_PATH": str(build.kafka_path()), "BROKERS": target.bootstrap}
    env.pop("CI", None)             # CI=... would lower test concurrency and change timeouts
    timeout = float(os.environ.get("COMPAT_LIBRDKAFKA_TIMEOUT", "600"))
    keep = Path(os.environ.get("COMPAT_LIBRDKAFKA_LOGS", "")) if \
        os.environ.get("COMPAT_LIBRDKAFKA_LOGS") else None
    groups = broker_tests()
    warm_up(target.bootstrap, security)
    results = stored(target.name) if os.environ.get("COMPAT_LIBRDKAFKA_TESTS") and \
        os.environ.get("COMPAT_LIBRDKAFKA_MERGE") else {}
    budget = float(os.environ.get("COMPAT_LIBRDKAFKA_BUDGET_S", "inf"))
    started_at = time.monotonic()

    def one(num: str) -> dict[str, str]:
        if time.monotonic() - started_at > budget:     # not started: left out of the result
            log.warning("librdkafka_test_not_run", target=target.name, test=num)
            return {}
        start = time.monotonic()
        log_path = (keep / target.name if keep else logs) / f"{num}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        got = run_group(num, groups[num], env, log_path, max(timeout, LONG_TIMEOUT_S.get(num, 0)))
        log.info("librdkafka_test", target=target.name, test=num, outcomes=got,
                 seconds=round(time.monotonic() - start, 1))
        return got

    # librdkafka's runner itself runs several tests at once against one cluster (-p, default
    # 5): every test uses its own random topic and group names.
    jobs = int(os.environ.get("COMPAT_LIBRDKAFKA_JOBS", "3"))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for got in pool.map(one, selected(groups, fast)):
            results.update(got)
    return results
