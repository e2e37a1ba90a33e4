"""Fetching and building librdkafka's own test runner, pinned and cached.

The source comes from the npm registry: ``@confluentinc/kafka-javascript`` ships the full
librdkafka source tree (``deps/librdkafka``, with ``tests/``) of the release it binds. It is
built once with gcc into ``~/.cache/kbroker/librdkafka-<version>``, with the optional
dependencies (SSL, SASL, zstd, curl) off since no test here needs them; a later call is a no-op.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

NPM_PACKAGE = "@confluentinc/kafka-javascript@1.10.1"   # bundles librdkafka 2.15.1
VERSION = "2.15.1"
CACHE = Path(os.environ.get("KBROKER_CACHE", Path.home() / ".cache" / "kbroker"))
HOME = CACHE / f"librdkafka-{VERSION}"
TESTS = HOME / "tests"
RUNNER = TESTS / "test-runner"
CONFIGURE = ("--disable-ssl", "--disable-gssapi", "--disable-zstd", "--disable-curl",
             "--disable-lz4-ext", "--disable-regex-ext", "--disable-syslog")


def _run(cmd: list[str], cwd: Path, log: Path) -> None:
    with log.open("ab") as out:
        subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=True)


def _unpack() -> None:
    """npm pack the pinned package and move its deps/librdkafka to HOME."""
    with tempfile.TemporaryDirectory(prefix="librdkafka-src-") as tmp:
        subprocess.run(["npm", "pack", NPM_PACKAGE, "--silent"], cwd=tmp, check=True,
                       stdout=subprocess.DEVNULL)
        (tgz,) = Path(tmp).glob("*.tgz")
        with tarfile.open(tgz) as tar:
            tar.extractall(tmp, filter="tar")
        src = Path(tmp) / "package" / "deps" / "librdkafka"
        version = (src / "src" / "rdkafka.h").read_text()
        if "0x020f01ff" not in version:
            raise RuntimeError(f"{NPM_PACKAGE} does not bundle librdkafka {VERSION}")
        shutil.move(str(src), HOME)


def build() -> Path:
    """The built ``tests/test-runner`` (building it the first time)."""
    if RUNNER.exists():
        return RUNNER
    if HOME.exists():                   # a half-finished earlier build: start over
        shutil.rmtree(HOME)
    CACHE.mkdir(parents=True, exist_ok=True)
    _unpack()
    log = HOME / "build.log"
    jobs = f"-j{os.cpu_count() or 2}"
    _run(["./configure", *CONFIGURE], HOME, log)
    _run(["make", jobs, "libs"], HOME, log)
    _run(["make", jobs, "test-runner"], TESTS, log)
    return RUNNER
