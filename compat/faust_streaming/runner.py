"""faust-streaming against a target: its exactly-once mode (``compat/stream_eos.py`` with
``eos_app.py``) and the live-broker tests of its own suite.

faust-streaming brings its own aiokafka and mode; it gets a virtual environment of its own
(``~/.cache/kbroker/faust-streaming-<version>/venv``, made once from PyPI); the worker runs there,
the harness and its read_committed check in the project's venv. One scenario (an agent counting per key in a table with a changelog topic,
``processing_guarantee="exactly_once"``, killed -9 four times in the middle of its work, then run
to the end of its input), recorded as two tests: ``exactly_once_under_kill9`` (every input exactly
once in the output and every per-key count sequence without a gap or a repeat) and
``no_loss_under_kill9`` (every input at least once). faust-streaming fails the first on every
broker and, now and then, the second (its commit protocol; FINDINGS.md). The verdict is written
to the work directory as ``verdict.json``. A fast run is this scenario alone.

Its own suite's tests that talk to a broker are ``tests/integration/broker`` (the rest of its
suite mocks the transport), pointed at the target with its ``FAUST_TEST_BROKER`` setting; they
come from the repository (not in the wheel) at the newest tag the source snapshots here hold,
``SUITE_TAG``, which is one patch release behind the client (PyPI has no wheel of that tag).
"""

from __future__ import annotations

import sys
from pathlib import Path

from compat import stream_eos
from compat.pytest_suite import PytestRun, collect, execute
from compat.sources import extract

SUITE = "faust-streaming"
VERSION = "0.15.3"
HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "kbroker" / f"faust-streaming-{VERSION}"
PYTHON = CACHE / "venv" / "bin" / "python"
SUITE_TAG = "v0.15.2"
SOURCE = CACHE / f"source-{SUITE_TAG}"
# Its requirements/test.txt's runner (pytest<8) and confluent-kafka, which one test drives.
TEST_DEPS = ("pytest==7.4.4", "pytest-asyncio==0.23.8", "pytest-timeout==2.4.0", "confluent-kafka==2.16.0")
PYTEST_INI = """[pytest]
asyncio_mode = auto
filterwarnings =
    error::ResourceWarning
"""

# Its live-broker tests produce to topics they never create: Kafka's default, which its CI's
# broker keeps.
BROKER_CONFIG = {**stream_eos.BROKER_CONFIG, "auto.create.topics.enable": "true"}
FAST = False
FEATURES = stream_eos.FEATURES


def prepare() -> str:
    stream_eos.own_venv(CACHE, f"faust-streaming=={VERSION}")
    return f"faust-streaming {VERSION}"


def _eos(target, workdir: Path) -> dict[str, str]:
    scenario = stream_eos.Scenario(replication_factor=min(3, target.nodes))
    env = {"COMPAT_PARTITIONS": str(scenario.partitions), "COMPAT_REPLICATION_FACTOR": str(scenario.replication_factor)}
    try:
        verdict = stream_eos.run([str(PYTHON), str(HERE / "eos_app.py"), "worker", "-l", "info"], env,
                                 target.bootstrap, workdir, scenario)
    except (RuntimeError, TimeoutError) as exc:
        print(f"faust-streaming: {exc}", file=sys.stderr)
        return {"exactly_once_under_kill9": "failed", "no_loss_under_kill9": "failed"}
    return {"exactly_once_under_kill9": "passed" if verdict.exact else "failed",
            "no_loss_under_kill9": "passed" if verdict.lossless else "failed"}


def _suite(target, workdir: Path) -> dict[str, str]:
    extract("faust-streaming/faust", SUITE_TAG, ["tests"], SOURCE)
    stream_eos.own_venv(CACHE, f"faust-streaming=={VERSION}", TEST_DEPS)
    (SOURCE / "pytest.ini").write_text(PYTEST_INI)
    first = target.bootstrap.split(",")[0]
    pytest_run = PytestRun(SOURCE, "tests/integration/broker", {"FAUST_TEST_BROKER": f"kafka://{first}"},
                           per_test_timeout=120, python=str(PYTHON))
    suite_dir = workdir / "suite"
    suite_dir.mkdir(exist_ok=True)
    return execute(pytest_run, collect(pytest_run), suite_dir, deadline_s=600)


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    results = _eos(target, workdir)
    if not fast:
        results.update(_suite(target, workdir))
    return results
