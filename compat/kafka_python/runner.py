"""kafka-python's own ``test/integration`` against a target, in external-broker mode.

The suite's ``kafka_broker_factory`` fixture uses an existing broker when ``KAFKA_URI`` is set
(``KafkaFixture(external=True)``: no broker process, topics created through KafkaAdminClient);
``KAFKA_VERSION`` enables the integration tests and is passed to every client as
``api_version``. The venv's client is kafka-python 3.0.12; its sdist ships the integration tests
but not ``test/__init__.py``, ``test/conftest.py`` or ``test/service.py``, and the stored git
snapshot has no 3.0.12 tag, so the tests come from tag 3.0.11, whose ``test/`` files are
byte-identical to every file the 3.0.12 sdist ships. They are extracted into
``~/.cache/kbroker/kafka-python-3.0.12``; the clients under test are the venv's 3.0.12.

Not run (recorded as skipped): the SASL and SSL tests; they ask the fixture for a SASL / SSL
listener, which the external-broker mode cannot provide (it hands back the plaintext broker).

On a secure target ``KAFKA_URI`` is the secure listener and ``security_plugin`` (loaded with
``-p``) gives every client the suite makes the target's settings (SASL_SSL with SCRAM-SHA-512,
or SSL with a client certificate): all of them are built by ``KafkaFixture._enrich_client_params``.
"""

from __future__ import annotations

import json
from pathlib import Path

from compat.pytest_suite import PytestRun, collect, execute, skipped
from compat.sources import extract

SUITE = "kafka-python"
VERSION = "3.0.12"
TAG = "3.0.11"   # tests identical to 3.0.12's (see above)
CACHE = Path.home() / ".cache" / "kbroker" / f"kafka-python-{VERSION}"
KAFKA_VERSION = "4.3.1"  # the reference broker's version; the suite maps it to its (4, 3) API table

# The suite's own broker settings (servers/resources/default/kafka.properties, with the
# fixture's partitions=4, and its ACL settings), replication factors and listeners excepted:
# each target sets those.
BROKER_CONFIG: dict[str, str] = {
    "num.partitions": "4",
    # Not set by the suite, so Kafka's default: its tests create replication-factor-1 topics
    # and produce with acks=all, which a cluster target's min.insync.replicas=2 refuses.
    "min.insync.replicas": "1",
    "auto.create.topics.enable": "true",
    "offsets.topic.num.partitions": "2",
    "offsets.commit.timeout.ms": "500",
    "group.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "replica.lag.time.max.ms": "1000",
    "log.cleaner.enable": "false",
    # The fixture always renders its {acl_config}: for Kafka >= 4.0 the KRaft authorizer that
    # allows everything no ACL denies (the ACL test needs an authorizer to create ACLs in).
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    # The targets' nodes talk PLAINTEXT, as User:ANONYMOUS: a multi-node KRaft quorum cannot
    # form under the authorizer unless that principal is a super user.
    "super.users": "User:ANONYMOUS",
}
FAST = False
SECURITY = ("sasl-ssl", "mtls")
HERE = Path(__file__).resolve().parent

NOT_RUN = {
    r"^test_sasl_integration\.py": "needs a SASL listener (external mode gives plaintext)",
    r"^test_ssl_integration\.py": "needs an SSL listener (external mode gives plaintext)",
}

FEATURES = {
    "bootstrap": [r"."],
    "produce": [r"^test_producer_integration"],
    "consume": [r"^test_consumer_integration"],
    "groups": [r"test_consumer_integration\.py::test_(group|kafka_consumer_max_bytes|.*commit)",
               r"test_admin_integration\.py::test_.*(consumer_group|group)"],
    "idempotence": [r"idempotent"],
    "transactions": [r"transaction"],
    "read_committed": [r"test_transactional_producer_messages"],  # its consumer is read_committed
    "admin": [r"^test_admin_integration"],
}


def prepare() -> str:
    """Extract the pinned tests (cached); return the client."""
    extract("dpkp/kafka-python", TAG, ["test"], CACHE)
    (CACHE / "pytest.ini").write_text("[pytest]\n")
    import kafka

    return f"kafka-python {kafka.__version__}, tests {TAG}"


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    env = {
        # The fixture reads only the host and port (the scheme is not its transport).
        "KAFKA_URI": f"PLAINTEXT://{target.bootstrap.split(',')[0]}",
        "KAFKA_VERSION": KAFKA_VERSION,
        "PYTHONPATH": str(CACHE),   # before the stdlib's own ``test`` package
        # The fixture insists that a Kafka install exists even in external mode (it runs no
        # script from it there): the reference Kafka's cached jars.
        "KAFKA_ROOT": str(Path.home() / ".cache" / "kbroker" / "kafka-4.3.1"),
    }
    extra_args = []
    if target.security is not None:  # every client the fixture makes logs in (security_plugin)
        env["COMPAT_CLIENT_SECURITY"] = json.dumps(target.security.kafka_python())
        env["PYTHONPATH"] += f":{HERE}"
        extra_args = ["-p", "security_plugin"]
    pytest_run = PytestRun(CACHE, "test/integration", env, per_test_timeout=120, extra_args=extra_args)
    ids = collect(pytest_run)
    results, todo = skipped(ids, NOT_RUN)
    results.update(execute(pytest_run, todo, workdir, deadline_s=2400))
    return results
