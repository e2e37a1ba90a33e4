"""Quix Streams against a target: its own integration tests, and an exactly-once application
killed -9 (``compat/stream_eos.py`` with ``eos_app.py``).

Quix Streams pins confluent-kafka below the project venv's, so it gets a virtual environment of
its own (``~/.cache/kbroker/quixstreams-<version>/venv``, made once from PyPI); its tests and the
application run there, the harness and its read_committed check in the project's venv.

- ``exactly_once_under_kill9``: a stateful per-key count with a changelog topic,
  ``processing_guarantee="exactly-once"``, killed -9 four times in the middle of its work, then
  run to the end of its input; every input exactly once in the output and every per-key count
  sequence without a gap or a repeat. Its verdict is written to the work directory as
  ``verdict.json``. The fast run (CI) is this scenario alone.
- Its test suite (``tests/`` of the repository at the release's tag, not in the wheel; taken as
  ``compat/sources.py`` takes every suite's source): the tests that use its ``kafka_container``
  fixture, which the runner's lines appended to its conftest answer with the target instead of a
  Docker container (``confluentinc/cp-kafka``, defaults but for the settings in ``BROKER_CONFIG``).
  Its unit tests are deselected, not recorded. Not run (recorded as skipped): the Schema
  Registry and PostgreSQL tests, whose servers are containers of their own. The suite runs on
  the one-node targets, as against its own one-node container (a quarter of an hour each); the
  three-node and the secure targets (SASL_SSL with SCRAM, mutual TLS: the application's and
  the harness's clients take the target's settings) run the exactly-once scenario.

The version is the newest release whose tests the repository snapshots here hold.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from compat import stream_eos
from compat.pytest_suite import PytestRun, collect, execute, skipped
from compat.sources import extract

SUITE = "quixstreams"
VERSION = "3.25.0"
HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "kbroker" / f"quixstreams-{VERSION}"
PYTHON = CACHE / "venv" / "bin" / "python"
SOURCE = CACHE / "source"

# Its container's settings the tests rely on, on top of the stream-processor rows' own: topics
# created on first use (Kafka's default), nothing deleted by age.
BROKER_CONFIG = {**stream_eos.BROKER_CONFIG, "auto.create.topics.enable": "true", "log.retention.ms": "-1"}
FAST = False
SECURITY = ("sasl-ssl", "mtls")
FEATURES = {
    **stream_eos.FEATURES,
    "bootstrap": [r"."],
    "produce": [r"exactly_once|producer|test_app\.py"],
    "consume": [r"exactly_once|consumer|test_app\.py"],
    "groups": [r"exactly_once|test_app\.py|checkpoint"],
    "transactions": [r"(?i)exactly.?once|transaction"],
    "read_committed": [r"exactly_once"],
    "admin": [r"test_admin\.py|test_manager\.py|topic"],
}
# What its tests import besides the client (tests/requirements.txt, less the cloud sinks').
TEST_DEPS = ("pytest==9.2.0", "pytest-timeout==2.4.0", "testcontainers==4.13.2", "fastavro>=1.8,<2.0",
             "protobuf>=5.27.2,<7.0", "pandas>=1.0.0,<3.0", "influxdb3-python>=0.7.0,<1.0",
             "psycopg2-binary>=2.9,<3", "paho-mqtt>=2.1.0,<3")
NOT_RUN = {r"test_schema_registry\.py": "its Schema Registry is a container of its own (cp-schema-registry)",
           r"_postgres(_sink)?\.py": "its PostgreSQL is a container of its own"}

CONFTEST_TAIL = '''
# --- compat: the Kafka container answered by the target instead (compat/quixstreams/runner.py)
import os as _compat_os  # noqa: E402


@pytest.fixture(scope="session")
def kafka_container_factory():
    def factory():
        address = _compat_os.environ["COMPAT_BOOTSTRAP"]
        yield KafkaContainer(broker_address=address, internal_broker_address=address)

    return factory


def pytest_collection_modifyitems(config, items):
    """Only the tests that talk to a broker: the suite's unit tests say nothing about one."""
    keep = [item for item in items if "kafka_container" in getattr(item, "fixturenames", ())]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep
'''

PYTEST_INI = """[pytest]
filterwarnings =
    ignore::Warning:confluent_kafka.schema_registry.*
markers =
    timeit
"""


def prepare() -> str:
    stream_eos.own_venv(CACHE, f"quixstreams=={VERSION}")
    return f"quixstreams {VERSION}"


def _prepare_suite() -> None:
    """Its tests (cached), their dependencies in the venv, the conftest pointed at the target."""
    extract("quixio/quix-streams", f"v{VERSION}", ["tests"], SOURCE)
    stream_eos.own_venv(CACHE, f"quixstreams=={VERSION}", TEST_DEPS)
    conftest = SOURCE / "tests" / "conftest.py"
    text = conftest.read_text()
    if CONFTEST_TAIL not in text:
        conftest.write_text(text + CONFTEST_TAIL)
    (SOURCE / "pytest.ini").write_text(PYTEST_INI)


def _eos(target, workdir: Path) -> str:
    scenario = stream_eos.Scenario(replication_factor=min(3, target.nodes))
    security = target.librdkafka_security
    try:
        verdict = stream_eos.run([str(PYTHON), str(HERE / "eos_app.py")], {"COMPAT_CLIENT_CONFIG": json.dumps(security)},
                                 target.bootstrap, workdir, scenario, security)
    except (RuntimeError, TimeoutError) as exc:
        print(f"quixstreams: {exc}", file=sys.stderr)
        return "failed"
    return "passed" if verdict.exact else "failed"


def _suite(target, workdir: Path) -> dict[str, str]:
    _prepare_suite()
    pytest_run = PytestRun(SOURCE, "tests", {"COMPAT_BOOTSTRAP": target.bootstrap}, per_test_timeout=120,
                           python=str(PYTHON))
    results, todo = skipped(collect(pytest_run), NOT_RUN)
    suite_dir = workdir / "suite"
    suite_dir.mkdir(exist_ok=True)
    results.update(execute(pytest_run, todo, suite_dir, deadline_s=3600))
    return results


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    results = {"exactly_once_under_kill9": _eos(target, workdir)}
    if not fast and target.nodes == 1 and target.security is None:
        results.update(_suite(target, workdir))
    return results
