"""Run compatibility suites against fresh brokers and regenerate the matrix.

    python -m compat.run                                # every suite, every target (make compat)
    python -m compat.run --suite kcat --target kbroker  # one cell
    python -m compat.run --fast --target kbroker        # the subset CI runs

Each suite is a package ``compat/<suite>/`` whose ``runner`` module defines:

- ``SUITE`` (its folder name) and ``BROKER_CONFIG`` (broker settings every target gets);
- ``prepare() -> str``: fetch or build the suite (pinned, cached); returns client and version;
- ``run(target, workdir, fast) -> dict[str, str]``: test id -> passed / failed / skipped;
- ``FEATURES``: feature -> regexes over test ids, for the matrix;
- ``SECURITY`` (optional, default none): the security modes (``sasl-ssl``, ``mtls``) whose
  settings the suite's clients take from ``target.security``; it also runs against those
  secure targets (``kbroker-sasl-ssl``, ``kafka-sasl-ssl``, ...).

For kbroker targets the exit status is 1 when an allowlisted test did not pass.
``COMPAT_KEEP_WORKDIR=1`` keeps each run's work directory (the brokers' data and logs) and
logs its path, for looking into a failure.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import tempfile
import time
from pathlib import Path

import structlog

from compat import matrix
from compat.results import COMPAT, allowlist, classify, record, regressions
from compat.targets import SECURE_TARGETS, TARGETS, started

log = structlog.get_logger("compat")

# In matrix order; CI's fast subset is marked by each runner's FAST flag.
SUITES = ("confluent-kafka-python", "kafka-python", "aiokafka", "quixstreams", "faust-streaming", "bytewax", "librdkafka", "java-client", "kafka-tools",
          "kafkajs", "franz-go", "sarama", "kcat")


def runner(suite: str):
    return importlib.import_module(f"compat.{suite.replace('-', '_')}.runner")


def available() -> list[str]:
    return [s for s in SUITES if (COMPAT / suite_dir(s) / "runner.py").exists()]


def _workdir(suite: str):
    if os.environ.get("COMPAT_KEEP_WORKDIR"):
        path = tempfile.mkdtemp(prefix=f"compat-{suite}-")
        log.info("workdir_kept", path=path)
        return contextlib.nullcontext(path)
    return tempfile.TemporaryDirectory(prefix=f"compat-{suite}-")


def run_one(suite: str, target: str, fast: bool = False) -> list[str]:
    """Run ``suite`` against a fresh ``target``; record it; return its regressions."""
    mod = runner(suite)
    client = mod.prepare()
    log.info("suite_start", suite=suite, target=target, client=client, fast=fast)
    start = time.monotonic()
    with _workdir(suite) as tmp, started(target, mod.BROKER_CONFIG, Path(tmp) / "broker") as t:
        tests = mod.run(t, Path(tmp), fast)
    result = record(suite, target, client, tests, classify(tests, mod.FEATURES),
                    time.monotonic() - start, save=not fast)
    expected = allowlist(COMPAT / suite_dir(suite), target)
    if fast:  # the fast subset is judged on the allowlisted tests it ran
        expected &= set(tests)
    missing = regressions(result, expected) if target.startswith("kbroker") else []
    if target.startswith("kbroker") and not expected:  # a run that checked nothing is not a pass
        missing = ["(no allowlisted test ran)"]
    log.info("suite_done", suite=suite, target=target, passed=result.passed,
             failed=result.failed, seconds=result.duration_s, regressions=len(missing))
    for test in missing:
        log.error("allowlisted_test_did_not_pass", suite=suite, target=target, test=test)
    return missing


def targets_of(suite: str) -> tuple[str, ...]:
    modes = getattr(runner(suite), "SECURITY", ())
    return TARGETS + tuple(t for t in SECURE_TARGETS if t.split("-", 1)[1] in modes)


def suite_dir(suite: str) -> str:
    return suite.replace("-", "_")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", action="append", choices=SUITES, help="default: every suite")
    ap.add_argument("--target", action="append", choices=TARGETS + SECURE_TARGETS,
                    help="default: every target (the secure ones for the suites with SECURITY)")
    ap.add_argument("--fast", action="store_true",
                    help="only the suites and tests CI runs (results are not stored)")
    ap.add_argument("--no-matrix", action="store_true", help="do not rewrite compat/README.md")
    args = ap.parse_args(argv)
    suites = args.suite or [s for s in available() if not args.fast or runner(s).FAST]
    failures = 0
    for suite in suites:
        for target in args.target or targets_of(suite):
            if target in SECURE_TARGETS and target not in targets_of(suite):
                log.info("suite_skipped", suite=suite, target=target, reason="its clients cannot take these settings")
                continue
            try:
                failures += len(run_one(suite, target, args.fast))
            except Exception as e:  # one suite's setup failure must not hide the others' results
                log.error("suite_error", suite=suite, target=target, error=repr(e))
                failures += 1
    if not (args.no_matrix or args.fast):
        matrix.write()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
