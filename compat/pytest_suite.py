"""Running another project's pytest suite as a compat suite: collect, run bounded, read JUnit XML.

A Python client's integration tests (confluent-kafka-python, kafka-python) run in a pytest
subprocess from the suite's cached checkout. Test ids are the pytest node ids relative to the
suite's test folder. Every collected test gets an outcome: one that pytest never reported (the
run hit its overall deadline and was killed) counts as failed; deselected tests are recorded as
skipped (each runner documents why).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import structlog

log = structlog.get_logger("compat.pytest")


@dataclass
class PytestRun:
    root: Path                      # cwd and rootdir of the suite's checkout
    folder: str                     # test folder under root, e.g. "tests/integration"
    env: dict[str, str]             # extra environment (bootstrap, PYTHONPATH)
    per_test_timeout: int = 120     # pytest-timeout, seconds
    extra_args: list[str] = field(default_factory=list)
    python: str = sys.executable    # a suite whose client pins its own dependencies has its own venv

    def base(self) -> list[str]:
        return [self.python, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(self.root),
                "-c", str(self.root / "pytest.ini"), *self.extra_args]

    def environ(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def node(self, rel: str) -> str:
        return f"{self.folder}/{rel}"

    def rel(self, nodeid: str) -> str:
        return nodeid.removeprefix(self.folder + "/")


def collect(run: PytestRun) -> list[str]:
    """The suite's test ids (relative to its folder), from ``pytest --collect-only``."""
    out = subprocess.run([*run.base(), "--collect-only", "-q", run.folder], cwd=run.root,
                         env=run.environ(), capture_output=True, text=True, timeout=300)
    ids = [run.rel(line.strip()) for line in out.stdout.splitlines()
           if line.startswith(f"{run.folder}/") and "::" in line]  # not the warnings' lines
    if not ids:
        raise RuntimeError(f"pytest collected nothing:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return ids


def execute(run: PytestRun, selected: list[str], workdir: Path, deadline_s: float) -> dict[str, str]:
    """Run ``selected`` ids in one pytest process (killed by pid at ``deadline_s``)."""
    junit = workdir / "junit.xml"
    cmd = [*run.base(), f"--timeout={run.per_test_timeout}", f"--junitxml={junit}",
           "-o", "junit_family=xunit1", "-q", "-rfE", *(run.node(t) for t in selected)]
    logfile = workdir / "pytest.log"
    with open(logfile, "w") as out:
        proc = subprocess.Popen(cmd, cwd=run.root, env=run.environ(), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(deadline_s)
        except subprocess.TimeoutExpired:
            log.error("pytest_deadline", seconds=deadline_s, pid=proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: only the processes it started
            proc.wait(30)
    outcomes = read_junit(junit, run) if junit.exists() else {}
    keep_log(run, logfile)
    return {t: outcomes.get(t, "failed") for t in selected}


def keep_log(run: PytestRun, logfile: Path) -> None:
    """Copy the pytest output next to the checkout, so a failure's traceback can be read later."""
    dest = run.root / "last-run.log"
    dest.write_bytes(logfile.read_bytes())
    log.info("pytest_log", path=str(dest))


def read_junit(path: Path, run: PytestRun) -> dict[str, str]:
    """JUnit (xunit1, with file= attributes) -> {test id: outcome}."""
    outcomes: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        nodeid = junit_nodeid(case)
        kids = {child.tag for child in case}
        if kids & {"failure", "error"}:
            outcome = "failed"
        elif "skipped" in kids:
            outcome = "skipped"
        else:
            outcome = "passed"
        rel = run.rel(nodeid)
        # A test that passed and then errored in teardown is failed; keep the worst.
        if outcomes.get(rel) != "failed":
            outcomes[rel] = outcome
    return outcomes


def junit_nodeid(case: ET.Element) -> str:
    """Rebuild the pytest node id from a testcase's file, classname and name."""
    file = case.get("file", "")
    parts = case.get("classname", "").split(".")
    module = file.removesuffix(".py").replace("/", ".")
    classes = parts[len(module.split(".")):] if module and ".".join(parts).startswith(module) else []
    return "::".join([file, *classes, case.get("name", "")])


def skipped(ids: list[str], reasons: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Split ``ids`` by ``reasons`` (regex over ids -> why, documented by the runner): the
    deselected, recorded as skipped, and the rest to run."""
    out, rest = {}, []
    for t in ids:
        if any(re.search(p, t) for p in reasons):
            out[t] = "skipped"
        else:
            rest.append(t)
    return out, rest
