"""Where a suite's pinned source comes from when no registry ships it.

confluent-kafka-python's and kafka-python's integration tests are in neither their PyPI sdists
nor any other registry; they are taken from the project's repository at the pinned tag into the
suite's cache, once: from a local snapshot of the repository when ``KBROKER_SOURCE_SNAPSHOTS``
names a directory of them (``<owner>+<name>/repo``, each a git repository holding the tag),
else by a shallow ``git clone`` of ``https://github.com/<owner>/<name>`` at the tag. A machine
with neither the cache, nor a snapshot, nor access to GitHub cannot run the suite:
:class:`SuiteUnavailable` says so, and CI's fast run reports it as skipped with that reason
instead of failing on a missing download.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SNAPSHOTS_ENV = "KBROKER_SOURCE_SNAPSHOTS"
CLONE_TIMEOUT_S = 300


class SuiteUnavailable(RuntimeError):
    """The suite's pinned source is not on this machine and cannot be downloaded here."""


def extract(repo: str, tag: str, paths: list[str], cache: Path) -> None:
    """Unpack ``paths`` of ``repo`` (owner/name) at ``tag`` into ``cache`` (a no-op once there)."""
    if all((cache / p).exists() for p in paths):
        return
    snapshots = os.environ.get(SNAPSHOTS_ENV, "").strip()
    snapshot = Path(snapshots) / repo.replace("/", "+") / "repo" if snapshots else None
    cache.mkdir(parents=True, exist_ok=True)
    if snapshot is not None and snapshot.is_dir():
        try:
            archive = subprocess.run(["git", "-C", str(snapshot), "archive", tag, *paths],
                                     check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(cache)], input=archive, check=True)
            return
        except subprocess.CalledProcessError:  # a snapshot without the tag: try the repository
            pass
    with tempfile.TemporaryDirectory(prefix="kbroker-source-") as tmp:
        try:
            subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", tag, f"https://github.com/{repo}",
                            tmp], check=True, capture_output=True, timeout=CLONE_TIMEOUT_S,
                           env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})  # never wait for a password
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            where = (f"{SNAPSHOTS_ENV} is not set" if snapshot is None else
                     f"the snapshot {snapshot} has no tag {tag}" if snapshot.is_dir() else f"no snapshot at {snapshot}")
            raise SuiteUnavailable(f"the tests of {repo} {tag} are not cached in {cache}, {where}, and "
                                   f"github.com cannot be reached ({type(exc).__name__}); no registry "
                                   "ships them") from None
        for p in paths:
            shutil.copytree(Path(tmp) / p, cache / p, dirs_exist_ok=True)


def go_build_stamp(here: Path) -> str:
    """What a Go harness's cached build depends on: its program, module files and runner."""
    h = hashlib.sha256()
    for name in ("main.go", "go.mod", "go.sum", "runner.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()
