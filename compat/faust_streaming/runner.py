"""faust-streaming's exactly-once mode against a target: ``compat/stream_eos.py`` with ``eos_app.py``.

faust-streaming brings its own aiokafka and mode; it gets a virtual environment of its own
(``~/.cache/kbroker/faust-streaming-<version>/venv``, made once from PyPI); the worker runs there,
the harness and its read_committed check in the project's venv. One scenario (an agent counting per key in a table with a changelog topic,
``processing_guarantee="exactly_once"``, killed -9 four times in the middle of its work, then run
to the end of its input), recorded as two tests: ``exactly_once_under_kill9`` (every input exactly
once in the output and every per-key count sequence without a gap or a repeat) and
``no_loss_under_kill9`` (every input at least once). faust-streaming fails the first on every
broker (FINDINGS.md); the second is what it does keep. The verdict is written to the work
directory as ``verdict.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from compat import stream_eos

SUITE = "faust-streaming"
VERSION = "0.15.3"
HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "kbroker" / f"faust-streaming-{VERSION}"
PYTHON = CACHE / "venv" / "bin" / "python"

BROKER_CONFIG = stream_eos.BROKER_CONFIG
FAST = False
FEATURES = stream_eos.FEATURES


def prepare() -> str:
    stream_eos.own_venv(CACHE, f"faust-streaming=={VERSION}")
    return f"faust-streaming {VERSION}"


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
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
