"""aiokafka's own test suite against a target.

The tests come from aiokafka's repository at the tag of the venv's client (they are not in its
sdist) and are cached in ``~/.cache/kbroker/aiokafka-<version>``. Its conftest starts a Docker
container per session; the runner appends ``target_fixtures`` to that conftest, which answers the
same fixtures with the target (``kafka_server`` at its bootstrap address, no Docker), and passes
``--docker-image`` with the reference version's tag, which the test classes read their Kafka
version from.

On a secure target ``security_plugin`` (loaded with ``-p``) gives every client the tests make the
target's settings (SASL_SSL with SCRAM-SHA-512, or SSL with a client certificate).

Only the tests that use a broker run (``kafka_server`` among their fixtures); the suite's unit
tests are deselected, not recorded. Not run (recorded as skipped): the SSL tests (their
certificates and listener come from the container) and the SASL tests (``test_sasl.py``: SCRAM
users and Kerberos set up through ``docker exec``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from compat.pytest_suite import PytestRun, collect, execute, skipped
from compat.sources import extract

SUITE = "aiokafka"
HERE = Path(__file__).resolve().parent
KAFKA_VERSION = "4.3.1"
DOCKER_IMAGE = f"aiolibs/kafka:2.13_{KAFKA_VERSION}"  # the test classes parse the version from it

# The container's settings that the tests depend on (two partitions per auto-created topic),
# replication factors and listeners excepted: each target sets those.
BROKER_CONFIG: dict[str, str] = {
    "num.partitions": "2",
    "auto.create.topics.enable": "true",
    "min.insync.replicas": "1",  # its topics are replication factor 1, produced with acks=all
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.num.partitions": "5",
}
FAST = False
SECURITY = ("sasl-ssl", "mtls")
# What its conftest and unit-test modules import besides the client (requirements-ci.txt's pins),
# installed without their dependencies' own pytest, which would shadow the venv's.
DEPS = ["docker==7.1.0", "pytest-mock==3.15.1", "requests==2.34.2", "urllib3==2.8.0", "idna==3.20",
        "certifi==2026.10.19.post1", "charset-normalizer==3.5.3"]

NOT_RUN = {
    r"^test_sasl\.py": "SASL users and Kerberos are set up inside the suite's container (docker exec)",
    r"(?i)ssl": "the SSL listener and its certificates come from the suite's container",
}

FEATURES = {
    "bootstrap": [r"."],
    "produce": [r"^test_producer\.py", r"^test_sender\.py"],
    "consume": [r"^test_consumer\.py", r"^test_fetcher\.py"],
    "groups": [r"^test_coordinator\.py", r"^test_consumer\.py::.*(group|commit|rebalance)"],
    "idempotence": [r"idempot|indempot"],  # the suite spells it both ways
    "transactions": [r"^test_transactional_"],
    "read_committed": [r"^test_transactional_consumer\.py"],
    "admin": [r"^test_admin\.py"],
}

CONFTEST_TAIL = """
# --- compat: the fixtures answered by the target instead of a container (target_fixtures.py)
import target_fixtures as _compat_target  # noqa: E402

_compat_target.KafkaServer = KafkaServer
from target_fixtures import *  # noqa: E402,F401,F403
"""

PYTEST_INI = """[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
markers =
    ssl: Tests that require SSL certificates to run
filterwarnings =
    default:unclosed event loop:ResourceWarning
"""


def _version() -> str:
    import aiokafka

    return aiokafka.__version__


def _cache() -> Path:
    return Path.home() / ".cache" / "kbroker" / f"aiokafka-{_version()}"


def prepare() -> str:
    """Extract the pinned tests (cached) and point their conftest at the target; return the client."""
    cache = _cache()
    extract("aio-libs/aiokafka", f"v{_version()}", ["tests"], cache)
    if not (cache / "site" / "docker").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(cache / "site"),
                        *DEPS],
                       cwd=cache, check=True)
    conftest = cache / "tests" / "conftest.py"
    text = conftest.read_text()
    if CONFTEST_TAIL not in text:
        conftest.write_text(text + CONFTEST_TAIL)
    (cache / "pytest.ini").write_text(PYTEST_INI)
    return f"aiokafka {_version()}"


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    env = {
        "COMPAT_BOOTSTRAP": target.bootstrap,
        "COMPAT_BROKER_TESTS_ONLY": "1",
        "PYTHONPATH": f"{_cache() / 'site'}:{_cache()}:{HERE}",
    }
    extra_args = ["--docker-image", DOCKER_IMAGE, "-p", "no:kbroker"]
    if target.security is not None:  # every client the tests make logs in (security_plugin)
        env["COMPAT_CLIENT_SECURITY"] = json.dumps(target.security.kafka_python())
        extra_args += ["-p", "security_plugin"]
    pytest_run = PytestRun(_cache(), "tests", env, per_test_timeout=120, extra_args=extra_args)
    ids = collect(pytest_run)
    results, todo = skipped(ids, NOT_RUN)
    results.update(execute(pytest_run, todo, workdir, deadline_s=2400))
    return results
