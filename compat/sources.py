"""Where a suite's pinned source comes from when no registry ships it.

confluent-kafka-python's and kafka-python's integration tests are in neither their PyPI sdists
nor any other registry reachable here; they are extracted from a snapshot of the project's
repository at the pinned tag (``git archive``) into the suite's cache, once. A machine with
neither the cache nor the snapshot cannot run the suite: :class:`SuiteUnavailable` says so, and
CI's fast run reports it as skipped with that reason instead of failing on a missing download.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

MIRRORS = Path("/work/.mirror")


class SuiteUnavailable(RuntimeError):
    """The suite's pinned source is not on this machine and cannot be downloaded here."""


def extract(repo: str, tag: str, paths: list[str], cache: Path) -> None:
    """Unpack ``paths`` of ``repo`` (owner/name) at ``tag`` into ``cache`` (a no-op once there)."""
    if all((cache / p).exists() for p in paths):
        return
    snapshot = MIRRORS / repo.replace("/", "+") / "repo"
    if not snapshot.is_dir():
        raise SuiteUnavailable(f"the tests of {repo} {tag} are not cached in {cache} and there is no "
                               f"snapshot of the repository at {snapshot} (no registry ships them)")
    cache.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(snapshot), "archive", tag, *paths],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(cache)], input=archive, check=True)


def go_build_stamp(here: Path) -> str:
    """What a Go harness's cached build depends on: its program, module files and runner."""
    h = hashlib.sha256()
    for name in ("main.go", "go.mod", "go.sum", "runner.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()
