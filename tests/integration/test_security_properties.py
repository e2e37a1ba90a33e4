"""One broker from a Kafka ``server.properties`` with security only: a SASL_SSL listener (PLAIN and
SCRAM-SHA-512) and an SSL listener that requires client certificates, no plaintext listener.

The first administrator is a SCRAM user created before the first start (``python -m
tools.storage add-scram``, Kafka's ``kafka-storage format --add-scram``), and the broker's own
inter-broker login is that user (``security.inter.broker.protocol=SASL_SSL``). Every client
(confluent-kafka, kafka-python, aiokafka and the Java client 4.3 inside Kafka's CLI tools)
produces and reads back a record with each mechanism, as a user that holds only the ACLs it
needs; wrong passwords, unknown users, missing and untrusted client certificates and plaintext
clients are refused, and the broker keeps serving everyone else.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    NewTopic,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.integration.test_kafka_tools import kafka, kafka_libs  # noqa: F401  (fixture)
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.clients import allow
from tools.dev_ca import DevCA
from tools.devcluster import free_port

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
# Who logs in how: (protocol, mechanism, user, password); the TLS user is its certificate.
LOGINS = {
    "PLAIN": ("SASL_SSL", "PLAIN", "alice", "alice-secret"),
    "SCRAM-SHA-512": ("SASL_SSL", "SCRAM-SHA-512", "bob", "bob-secret"),
    "mTLS": ("SSL", None, "CN=carol,OU=eng,O=kbroker", None),
}


class PropertiesBroker(BrokerProcess):
    """A broker started as ``python -m broker server.properties``, nothing overridden."""

    def __init__(self, properties, port: int, log_dir: str) -> None:
        super().__init__(log_dir)
        self.properties, self.port = str(properties), port

    def command(self) -> list[str]:
        return [sys.executable, "-m", "broker", self.properties]


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    ca = DevCA(tmp_path_factory.mktemp("props-ca"))
    ca.broker = ca.issue("broker", cn="broker1", hosts=("127.0.0.1", "localhost"))
    ca.carol = ca.issue("carol", cn="carol", ou="eng", o="kbroker")
    ca.stranger = DevCA(ca.dir / "other", name="another CA").issue("stranger", cn="carol", ou="eng", o="kbroker")
    return ca


@pytest.fixture(scope="module")
def broker(tmp_path_factory, ca):
    tmp = tmp_path_factory.mktemp("props-broker")
    sasl_port, ssl_port = free_port(), free_port()
    props = tmp / "server.properties"
    props.write_text(f"""\
node.id=1
listeners=SASL_SSL://127.0.0.1:{sasl_port},SSL://127.0.0.1:{ssl_port}
advertised.listeners=SASL_SSL://127.0.0.1:{sasl_port},SSL://127.0.0.1:{ssl_port}
listener.security.protocol.map=SASL_SSL:SASL_SSL,SSL:SSL
security.inter.broker.protocol=SASL_SSL
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN_MODULE} required user_alice="alice-secret";
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={SCRAM_MODULE} required username="admin" password="admin-secret";
ssl.keystore.type=PEM
ssl.keystore.location={ca.broker.bundle}
ssl.truststore.type=PEM
ssl.truststore.location={ca.pem}
listener.name.ssl.ssl.client.auth=required
ssl.principal.mapping.rules=DEFAULT
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin
connection.failed.authentication.delay.ms=50
log.dirs={tmp / "data"}
metrics.listener=127.0.0.1:0
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
""")
    added = subprocess.run([sys.executable, "-m", "tools.storage", "add-scram", str(props), "--add-scram",
                            "SCRAM-SHA-512=[name=admin,password=admin-secret]"], cwd=REPO, capture_output=True,
                           text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    b = PropertiesBroker(props, sasl_port, str(tmp / "broker")).start()
    b.sasl_port, b.ssl_port = sasl_port, ssl_port
    admin = AdminClient(librdkafka(b, ca, "SASL_SSL", "SCRAM-SHA-512", "admin", "admin-secret"))
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"bob-secret")]).values():
        f.result(20)
    b.admin = admin
    yield b
    del b.admin, admin  # destroyed before its broker stops, so that it does not retry a closed port
    b.stop()


def librdkafka(broker, ca, protocol: str, mechanism: str | None, user: str, password: str | None,
               cert=None, **extra) -> dict:
    port = broker.sasl_port if protocol == "SASL_SSL" else broker.ssl_port
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": protocol,
            "ssl.ca.location": str(ca.pem), "socket.timeout.ms": 10000, **extra}
    if mechanism:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    if protocol == "SSL":
        cert = ca.carol if cert is None else cert
        conf.update({"ssl.certificate.location": str(cert.cert), "ssl.key.location": str(cert.key)})
    return conf


def grant(broker, topic: str, group: str, principal: str) -> None:
    """What a producer and a group consumer of ``topic`` need, and nothing more."""
    for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE):
        allow(broker.admin, topic, principal, op)
    allow(broker.admin, group, principal, AclOperation.READ, ResourceType.GROUP)


@pytest.fixture
def names(broker):
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    broker.admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    return topic, f"g-{topic}"


# --- every client, every way in -------------------------------------------------------------------

def via_confluent_kafka(broker, ca, login, topic, group) -> list[bytes]:
    protocol, mechanism, user, password = login
    conf = librdkafka(broker, ca, protocol, mechanism, user, password)
    p = Producer({**conf, "acks": "all"})
    p.produce(topic, b"confluent-kafka")
    assert p.flush(20) == 0
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        got = []
        for _ in range(60):
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
                break
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def kafka_python_settings(broker, ca, login) -> dict:
    protocol, mechanism, user, password = login
    port = broker.sasl_port if protocol == "SASL_SSL" else broker.ssl_port
    conf = {"bootstrap_servers": f"127.0.0.1:{port}", "security_protocol": protocol, "ssl_cafile": str(ca.pem)}
    if mechanism:
        conf.update(sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
    else:
        conf.update(ssl_certfile=str(ca.carol.cert), ssl_keyfile=str(ca.carol.key))
    return conf


def via_kafka_python(broker, ca, login, topic, group) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    conf = kafka_python_settings(broker, ca, login)
    p = KafkaProducer(acks="all", **conf)
    p.send(topic, b"kafka-python").get(timeout=20)
    p.close()
    c = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", consumer_timeout_ms=15000, **conf)
    try:
        return [next(iter(c)).value]
    finally:
        c.close()


def via_aiokafka(broker, ca, login, topic, group) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    protocol, mechanism, user, password = login
    port = broker.sasl_port if protocol == "SASL_SSL" else broker.ssl_port
    context = ssl.create_default_context(cafile=str(ca.pem))
    conf = {"bootstrap_servers": f"127.0.0.1:{port}", "security_protocol": protocol, "ssl_context": context}
    if mechanism:
        conf.update(sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
    else:
        context.load_cert_chain(str(ca.carol.cert), str(ca.carol.key))

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(acks="all", **conf)
        await p.start()
        try:
            await p.send_and_wait(topic, b"aiokafka")
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", **conf)
        await c.start()
        try:
            m = await asyncio.wait_for(c.getone(), 20)
            return [m.value]
        finally:
            await c.stop()

    return asyncio.run(run())


def java_properties(path, ca, login) -> str:
    protocol, mechanism, user, password = login
    lines = [f"security.protocol={protocol}", "ssl.truststore.type=PEM", f"ssl.truststore.location={ca.pem}"]
    if mechanism:
        module = PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE
        lines += [f"sasl.mechanism={mechanism}",
                  f'sasl.jaas.config={module} required username="{user}" password="{password}";']
    else:  # Kafka's PEM key store: the key and its chain in one file
        lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={ca.carol.bundle}"]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def via_kafka_tools(broker, ca, login, topic, group, tmp_path) -> list[bytes]:
    """The Java client 4.3 inside Kafka's CLI tools, each with ``--command-config``."""
    port = broker.sasl_port if login[0] == "SASL_SSL" else broker.ssl_port
    address, config = f"127.0.0.1:{port}", java_properties(tmp_path / "client.properties", ca, login)
    listed = kafka("kafka-topics", "--bootstrap-server", address, "--command-config", config, "--list")
    assert topic in listed.stdout.split()
    kafka("kafka-console-producer", "--bootstrap-server", address, "--command-config", config, "--topic", topic,
          input="java-client\n")
    read = kafka("kafka-console-consumer", "--bootstrap-server", address, "--command-config", config,
                 "--group", group, "--topic", topic, "--from-beginning", "--max-messages", "1", "--timeout-ms", "20000")
    return [line.encode() for line in read.stdout.split()]


CLIENTS = {"confluent-kafka": via_confluent_kafka, "kafka-python": via_kafka_python, "aiokafka": via_aiokafka}


@pytest.mark.parametrize("how", list(LOGINS))
@pytest.mark.parametrize("client", list(CLIENTS))
def test_each_client_produces_and_reads_with_each_way_in(broker, ca, names, client, how):
    topic, group = names
    login = LOGINS[how]
    principal = f"User:{login[2]}"
    grant(broker, topic, group, principal)
    assert CLIENTS[client](broker, ca, login, topic, group) == [client.encode()]


@pytest.mark.kafka_tools
@pytest.mark.parametrize("how", list(LOGINS))
def test_kafka_tools_produce_and_read_with_each_way_in(broker, ca, names, kafka_libs, tmp_path, how):  # noqa: F811
    topic, group = names
    grant(broker, topic, group, f"User:{LOGINS[how][2]}")
    assert via_kafka_tools(broker, ca, LOGINS[how], topic, group, tmp_path) == [b"java-client"]


def test_a_user_without_acls_is_authenticated_and_not_authorized(broker, ca, names):
    topic, _ = names  # bob logs in, but nothing was granted to him on this topic
    p = Producer({**librdkafka(broker, ca, *LOGINS["SCRAM-SHA-512"]), "message.timeout.ms": 5000})
    errors = []
    p.produce(topic, b"x", on_delivery=lambda err, _m: errors.append(err))
    p.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors


# --- refusals ---------------------------------------------------------------------------------------

REFUSED = {
    "PLAIN wrong password": ("SASL_SSL", "PLAIN", "alice", "wrong"),
    "PLAIN unknown user": ("SASL_SSL", "PLAIN", "mallory", "alice-secret"),
    "SCRAM wrong password": ("SASL_SSL", "SCRAM-SHA-512", "bob", "wrong"),
    "SCRAM unknown user": ("SASL_SSL", "SCRAM-SHA-512", "mallory", "bob-secret"),
}


def refused(conf: dict) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        AdminClient({**conf, "log_level": 0}).list_topics(timeout=6)
    return info.value.args[0]


@pytest.mark.parametrize("case", [*REFUSED, "no certificate", "untrusted certificate",
                                  "plaintext on SASL_SSL", "plaintext on SSL"])
def test_each_refusal_leaves_the_broker_serving_everyone_else(broker, ca, names, case):
    topic, group = names
    if case in REFUSED:
        error = refused(librdkafka(broker, ca, *REFUSED[case]))
        assert error.code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT, KafkaError._TIMED_OUT), error
        if error.code() == KafkaError._AUTHENTICATION:  # Kafka's generic answer: no hint who exists
            assert "Authentication failed during authentication due to invalid credentials with SASL " \
                   "mechanism" in error.str(), error.str()
    elif case == "no certificate":
        conf = librdkafka(broker, ca, "SSL", None, "", None)
        for key in ("ssl.certificate.location", "ssl.key.location"):
            del conf[key]
        refused(conf)
    elif case == "untrusted certificate":
        refused(librdkafka(broker, ca, "SSL", None, "", None, cert=ca.stranger))
    else:
        port = broker.sasl_port if case.endswith("SASL_SSL") else broker.ssl_port
        refused({"bootstrap.servers": f"127.0.0.1:{port}", "socket.timeout.ms": 3000})
    assert broker.is_alive()
    grant(broker, topic, group, "User:alice")
    assert via_confluent_kafka(broker, ca, LOGINS["PLAIN"], topic, group) == [b"confluent-kafka"]

