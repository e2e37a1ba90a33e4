"""Fetching and building librdkafka's own test runner, pinned and cached.

The source comes from the npm registry: ``@confluentinc/kafka-javascript`` ships the full
librdkafka source tree (``deps/librdkafka``, with ``tests/``) of the release it binds. It is
built once with gcc into ``~/.cache/kbroker/librdkafka-<version>``, with OpenSSL (TLS and SCRAM,
for the security column and 0064) and the other optional dependencies (GSSAPI, zstd, curl) off;
a later call is a no-op. ``libssl-dev`` and ``rapidjson-dev`` (apt; the latter for the C++ tests
that check JSON, 0098-consumer_txn) are installed by the build when it runs as root; without
rapidjson configure leaves those tests out and they report skipped.

One change to the test framework before building: librdkafka's CI always runs a three-broker
cluster, so several tests create their topics with replication factor 3. ``test.c`` is patched so
``TEST_MAX_REPLICATION_FACTOR`` caps the factor a test asks for (the runner sets it to the
target's node count); nothing else in the tests changes.

The tests that call Kafka's own tools (``kafka-topics.sh``, Java helper clients such as
``TransactionProducerCli``) find them under ``$KAFKA_PATH``: :func:`kafka_path` lays out a
directory with the Apache Kafka 4.3.1 jars ``compat/kafka/fetch.sh`` caches and thin scripts.
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
STAMP = HOME / ".kbroker-build-3"      # bump when the build steps or the patch change
KAFKA_BIN = Path(__file__).resolve().parent.parent / "kafka"
CONFIGURE = ("--disable-gssapi", "--disable-zstd", "--disable-curl",
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


# Inserted at the top of test_admin_create_topic(), before the NewTopic is made.
RF_ANCHOR = "        if (!(rk = use_rk))\n                rk = test_create_producer();\n\n" \
            "        rkqu = rd_kafka_queue_new(rk);\n"
RF_CAP = """        {   /* kbroker compat: cap RF to the target's broker count */
                const char *max_rf =
                    test_getenv("TEST_MAX_REPLICATION_FACTOR", NULL);
                if (max_rf && replication_factor > atoi(max_rf))
                        replication_factor = atoi(max_rf);
        }
"""


def _patch_tests() -> None:
    test_c = TESTS / "test.c"
    text = test_c.read_text()
    if RF_ANCHOR not in text:
        raise RuntimeError("test.c changed: cannot add the replication factor cap")
    test_c.write_text(text.replace(RF_ANCHOR, RF_CAP + RF_ANCHOR, 1))


BUILD_PACKAGES = {"rapidjson-dev": "/usr/include/rapidjson", "libssl-dev": "/usr/include/openssl/ssl.h"}


def _ensure_packages() -> None:
    missing = [pkg for pkg, path in BUILD_PACKAGES.items() if not Path(path).exists()]
    if not missing or os.geteuid() != 0:
        return
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def build() -> Path:
    """The built ``tests/test-runner`` (building it the first time)."""
    if STAMP.exists():
        return RUNNER
    if HOME.exists():                   # an older or half-finished build: start over
        shutil.rmtree(HOME)
    CACHE.mkdir(parents=True, exist_ok=True)
    _ensure_packages()
    _unpack()
    _patch_tests()
    log = HOME / "build.log"
    jobs = f"-j{os.cpu_count() or 2}"
    _run(["./configure", *CONFIGURE], HOME, log)
    _run(["make", jobs, "libs"], HOME, log)
    _run(["make", jobs, "test-runner"], TESTS, log)
    STAMP.touch()
    return RUNNER


def kafka_path() -> Path:
    """A ``$KAFKA_PATH`` for the tests: ``libs/`` (Kafka's jars) and ``bin/`` scripts."""
    libs = subprocess.run([str(KAFKA_BIN / "fetch.sh")], check=True, text=True,
                          stdout=subprocess.PIPE).stdout.strip().splitlines()[-1]
    root = HOME / "kafka-path"
    (root / "bin").mkdir(parents=True, exist_ok=True)
    link = root / "libs"
    if not link.is_symlink():
        link.symlink_to(libs)
    scripts = {
        # tests/java/run-class.sh sets CLASSPATH to the compiled helper classes
        "kafka-run-class.sh": f'exec java -cp "$CLASSPATH:{libs}/*" "$@"',
        "kafka-topics.sh": f'exec "{KAFKA_BIN / "bin" / "kafka-topics"}" "$@"',
        "kafka-acls.sh": f'exec "{KAFKA_BIN / "kafka-run.sh"}" org.apache.kafka.tools.AclCommand "$@"',
    }
    for name, line in scripts.items():
        script = root / "bin" / name
        script.write_text(f"#!/bin/sh\n{line}\n")
        script.chmod(0o755)
    return root
