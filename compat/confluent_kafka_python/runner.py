"""confluent-kafka-python's own ``tests/integration`` against a target, in BYO-broker mode.

The suite's ``kafka_cluster`` fixture uses an existing cluster when ``BROKERS`` is set (its
``ByoFixture``); without it, it would start a trivup cluster. The tests come from the project's
git tag (the newest stored snapshot holds v2.15.0; the venv's client is confluent-kafka 2.16.1,
whose sdist ships no tests), extracted into ``~/.cache/kbroker/confluent-kafka-python-<tag>``
with their Python dependencies installed beside them (``site/``, from PyPI).

Not run (recorded as skipped): tests that need a Schema Registry, the SASL / OAUTHBEARER share
consumer tests (they start their own trivup SASL cluster), and the SCRAM credentials test and the
``sasl_cluster``-parametrized describe test (they need a SASL listener, which BYO mode lacks).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from compat.pytest_suite import PytestRun, collect, execute, skipped
from compat.sources import extract

SUITE = "confluent-kafka-python"
TAG = "v2.15.0"
CACHE = Path.home() / ".cache" / "kbroker" / f"confluent-kafka-python-{TAG.lstrip('v')}"
DEPS = ["tests/trivup/trivup-0.14.0.tar.gz", "attrs", "cachetools", "httpx", "authlib", "requests",
        "fastavro", "avro", "jsonschema", "googleapis-common-protos", "async-timeout"]

# The suite's own broker settings: TestUtils.broker_conf() in tests/common and what its trivup
# KafkaBrokerApp adds (server.properties.template and the KRaft StandardAuthorizer, which the
# ACL part of test_basic_operations needs), replication factors and listeners excepted: each
# target sets those for its node count.
BROKER_CONFIG: dict[str, str] = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    # trivup's brokers talk to each other over SASL as User:admin, its super user; the targets'
    # nodes talk PLAINTEXT, as User:ANONYMOUS, which must be a super user too or a multi-node
    # KRaft quorum cannot form under the authorizer.
    "super.users": "User:admin;User:ANONYMOUS",
    "delete.topic.enable": "true",
    "auto.create.topics.enable": "true",
    # Not set by the suite, so Kafka's default: its tests create replication-factor-1 topics
    # and produce with acks=all, which a cluster target's min.insync.replicas=2 refuses.
    "min.insync.replicas": "1",
    "group.share.record.lock.duration.ms": "1000",
    "group.share.min.record.lock.duration.ms": "1000",
}
FAST = True
SECURITY = ("sasl-ssl", "mtls")
HERE = Path(__file__).resolve().parent

NOT_RUN = {
    r"^schema_registry/": "needs Schema Registry",
    r"test_share_consumer_deserialization\.py::test_schema_registry_": "needs Schema Registry",
    r"^share_consumer_sasl/": "starts its own trivup SASL cluster",
    r"^share_consumer_oauth/": "starts its own trivup OAUTHBEARER cluster",
    r"test_user_scram_credentials": "needs a SASL/SCRAM listener",
    r"\[sasl_cluster": "its sasl_cluster fixture starts a trivup SASL cluster",
}

# CI's subset: producer, transactions, admin and the consumer basics (about a minute on one node).
FAST_TESTS = (
    r"^producer/test_transactions\.py",
    r"^producer/test_producer_wakeable",
    r"^admin/test_basic_operations\.py",
    r"^admin/test_delete_records\.py",
    r"^admin/test_list_offsets\.py",
    r"^admin/test_incremental_alter_configs\.py",
    r"^consumer/test_consumer_error\.py",
    r"^consumer/test_incremental_assign\.py",
    r"^serialization/test_serializers\.py",
)

FEATURES = {
    "bootstrap": [r"^(?!share_consumer/)"],  # every test that reaches the broker, share groups aside
    "produce": [r"^producer/", r"^serialization/", r"test_transactions", r"test_delete_records"],
    # Share groups (KIP-932, share_consumer/) are none of these features: they count in the
    # totals and in FINDINGS.md, not in the classic consume / groups cells.
    "consume": [r"^consumer/", r"^serialization/", r"test_transactions"],
    "groups": [r"^consumer/test_(cooperative|incremental|consumer_memberid|consumer_upgrade)"],
    "idempotence": [r"test_transactions"],
    "transactions": [r"test_transactions"],
    "read_committed": [r"test_transactions"],  # consume_committed: librdkafka's default read_committed
    "admin": [r"^admin/"],
}


def prepare() -> str:
    """Extract the pinned tests and install their dependencies (cached); return the client."""
    extract("confluentinc/confluent-kafka-python", TAG, ["tests"], CACHE)
    if not (CACHE / "site" / "trivup").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target",
                        str(CACHE / "site"), *DEPS], cwd=CACHE, check=True)
    (CACHE / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    import confluent_kafka

    version = confluent_kafka.version()  # a str in 2.16 (a (str, int) pair before)
    version = version if isinstance(version, str) else version[0]
    return f"confluent-kafka {version} (librdkafka {confluent_kafka.libversion()[0]}), tests {TAG}"


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    env = {"BROKERS": target.bootstrap, "PYTHONPATH": f"{CACHE / 'site'}:{CACHE}:{HERE}"}
    extra_args = []
    if target.security is not None:  # every client the BYO fixture makes logs in (security_plugin)
        env["COMPAT_CLIENT_SECURITY"] = json.dumps(target.security.librdkafka())
        extra_args = ["-p", "security_plugin"]
    pytest_run = PytestRun(CACHE, "tests/integration", env, per_test_timeout=120, extra_args=extra_args)
    ids = collect(pytest_run)
    results, todo = skipped(ids, NOT_RUN)
    if fast:
        todo = [t for t in todo if any(re.search(p, t) for p in FAST_TESTS)]
    results.update(execute(pytest_run, todo, workdir, deadline_s=3600))
    return results
