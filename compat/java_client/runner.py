"""Kafka's Java client (kafka-clients 4.3.1) against a target: the compat suite "java-client".

The harness is the Maven project next to this file (``pom.xml``, ``src/main/java/kbroker/compat/
CompatTests.java``): a plain main that runs each test under a time limit and prints
``RESULT<TAB>id<TAB>outcome<TAB>reason``. :func:`prepare` builds it once into
``~/.cache/kbroker/java-client-4.3.1/<hash of the sources>`` (jar + runtime dependencies);
:func:`run` starts one JVM against the target and parses its lines. Every test is in the fast
subset (about 30 s on one node).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import structlog

from compat.results import FAILED, PASSED

log = structlog.get_logger("compat.java_client")

SUITE = "java-client"
KAFKA_CLIENTS = "4.3.1"
FAST = True
BROKER_CONFIG: dict[str, str] = {}  # the client's defaults need no broker setting
SECURITY = ("sasl-ssl", "mtls")  # every client starts from the target's settings (a properties file)

HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "kbroker" / f"java-client-{KAFKA_CLIENTS}"
MAIN = "kbroker.compat.CompatTests"
RUN_TIMEOUT = 900  # seconds for the whole JVM: 18 tests of at most 60 s each, and margin

FEATURES = {
    "bootstrap": [r"admin_describe_cluster"],
    "produce": [r"idempotent_producer", r"admin_list_offsets", r"admin_delete_records"],
    "consume": [r"idempotent_producer", r"read_committed", r"admin_delete_records"],
    "groups": [r"consume_transform_produce", r"admin_consumer_groups", r"admin_delete_consumer_group_offsets"],
    "idempotence": [r"idempotent_producer"],
    "transactions": [r"transactional_", r"producer_fencing", r"transaction", r"admin_describe_producers",
                     r"admin_fence_producers"],
    "read_committed": [r"read_committed", r"consume_transform_produce", r"admin_abort_transaction"],
    "admin": [r"^admin_"],
}


def _sources_hash() -> str:
    h = hashlib.sha256()
    for path in sorted([HERE / "pom.xml", *(HERE / "src").rglob("*.java")]):
        h.update(path.relative_to(HERE).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def _build_dir() -> Path:
    return CACHE / _sources_hash()


def prepare() -> str:
    """Build the harness (a no-op when this version of the sources is built)."""
    out = _build_dir()
    if not (out / ".complete").exists():
        if shutil.which("mvn") is None or shutil.which("java") is None:
            raise RuntimeError("the java-client suite needs Java 17+ and Maven (apt-get install maven)")
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run(["mvn", "-q", "-B", "-f", str(HERE / "pom.xml"), "package", "dependency:copy-dependencies",
                        "-DincludeScope=runtime", f"-Dbuild.dir={out}", f"-DoutputDirectory={out / 'deps'}"],
                       check=True, timeout=900)
        (out / ".complete").write_text(KAFKA_CLIENTS + "\n")
    return f"kafka-clients {KAFKA_CLIENTS} (Java)"


def _command(target, tests: list[str], client_config: Path | None = None) -> list[str]:
    out = _build_dir()
    classpath = os.pathsep.join([str(out / "java-client-compat-1.0.jar"), str(out / "deps" / "*")])
    config = [f"-Dcompat.client.config={client_config}"] if client_config else []
    return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", *config, "-cp", classpath, MAIN,
            target.bootstrap, str(target.nodes), *tests]


def parse(stdout: str) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """(every test id, {id: (outcome, reason)}) from the harness's output."""
    ids: list[str] = []
    results: dict[str, tuple[str, str]] = {}
    for line in stdout.splitlines():
        fields = line.split("\t")
        if fields[0] == "TESTS" and len(fields) == 2:
            ids = fields[1].split(",")
        elif fields[0] == "RESULT" and len(fields) == 4:
            results[fields[1]] = (fields[2], fields[3])
    return ids, results


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    """Every test (the fast subset is all of them) in one JVM against ``target.bootstrap``; on a
    secure target every client of the harness starts from the target's Java settings."""
    logfile = workdir / "java-client.log"
    config = target.security.java_file(workdir / "client.properties") if target.security else None
    with open(logfile, "w") as err:
        proc = subprocess.Popen(_command(target, [], config), stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True)
        try:
            stdout, _ = proc.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the JVM we started, by its pid (its own session)
            stdout, _ = proc.communicate()
    ids, results = parse(stdout)
    if not ids:
        raise RuntimeError(f"the harness listed no tests (exit {proc.returncode}); see {logfile}:\n"
                           f"{logfile.read_text()[-2000:]}")
    tests = {}
    for test in ids:
        outcome, reason = results.get(test, (FAILED, "no result: the JVM exited or hung before it"))
        tests[test] = PASSED if outcome == PASSED else FAILED
        log.info("java_client_test", target=target.name, test=test, outcome=outcome, detail=reason)
    return tests
