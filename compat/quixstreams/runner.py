"""Quix Streams' exactly-once mode against a target: ``compat/stream_eos.py`` with ``eos_app.py``.

Quix Streams pins confluent-kafka below the venv's, so it gets a virtual environment of its own
(``~/.cache/kbroker/quixstreams-<version>/venv``, made once from PyPI); the application runs
there, the harness and its read_committed check in the project's venv. One scenario, recorded as
one test: ``exactly_once_under_kill9`` (a stateful per-key count with a changelog topic,
``processing_guarantee="exactly-once"``, killed -9 four times in the middle of its work, then run
to the end of its input;
every input exactly once in the output and every per-key count sequence without a gap or a
repeat). Its verdict is written to the work directory as ``verdict.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from compat import stream_eos

SUITE = "quixstreams"
VERSION = "3.28.1"
HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "kbroker" / f"quixstreams-{VERSION}"
PYTHON = CACHE / "venv" / "bin" / "python"

BROKER_CONFIG = stream_eos.BROKER_CONFIG
FAST = False
FEATURES = stream_eos.FEATURES


def prepare() -> str:
    stream_eos.own_venv(CACHE, f"quixstreams=={VERSION}")
    return f"quixstreams {VERSION}"


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    scenario = stream_eos.Scenario(replication_factor=min(3, target.nodes))
    try:
        verdict = stream_eos.run([str(PYTHON), str(HERE / "eos_app.py")], {}, target.bootstrap, workdir, scenario)
    except (RuntimeError, TimeoutError) as exc:
        print(f"quixstreams: {exc}", file=sys.stderr)
        return {"exactly_once_under_kill9": "failed"}
    return {"exactly_once_under_kill9": "passed" if verdict.exact else "failed"}
