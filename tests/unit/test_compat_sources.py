"""Where a compatibility suite's pinned tests come from (compat/sources.py), with local git
repositories as snapshots and a repository name no host has."""

import subprocess

import pytest

from compat.sources import SNAPSHOTS_ENV, SuiteUnavailable, extract

REPO = "kbroker-fixture/no-such-suite"


def git(*args: str, cwd) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


@pytest.fixture
def snapshots(tmp_path, monkeypatch):
    repo = tmp_path / "snapshots" / REPO.replace("/", "+") / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_one.py").write_text("def test_one(): pass\n")
    git("init", "-q", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "one", cwd=repo)
    git("tag", "v1.0", cwd=repo)
    monkeypatch.setenv(SNAPSHOTS_ENV, str(tmp_path / "snapshots"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    return repo


def test_a_snapshot_holding_the_tag_is_unpacked_into_the_cache_once(tmp_path, snapshots):
    cache = tmp_path / "cache"
    extract(REPO, "v1.0", ["tests"], cache)
    assert (cache / "tests" / "test_one.py").read_text() == "def test_one(): pass\n"
    (snapshots / "tests" / "test_one.py").unlink()  # the cache is used from now on
    extract(REPO, "v1.0", ["tests"], cache)
    assert (cache / "tests" / "test_one.py").exists()


def test_a_snapshot_without_the_tag_says_so_and_does_not_crash(tmp_path, snapshots):
    with pytest.raises(SuiteUnavailable, match=r"has no tag v9\.9.*github\.com cannot be reached"):
        extract(REPO, "v9.9", ["tests"], tmp_path / "cache")


def test_no_snapshot_and_no_download_is_unavailable_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.delenv(SNAPSHOTS_ENV, raising=False)
    with pytest.raises(SuiteUnavailable, match=rf"{SNAPSHOTS_ENV} is not set.*no registry ships them"):
        extract(REPO, "v1.0", ["tests"], tmp_path / "cache")
