"""TLS listeners with real clients against a broker process (Kafka's SSL security protocol).

One broker, three listeners: PLAINTEXT (inter-broker, and for setup), SSL (server
authentication only: clients are ``User:ANONYMOUS``) and MTLS (SSL with ``ssl.client.auth``
required, set for that listener only: the client certificate's subject is the principal the
ACLs see). confluent-kafka and kafka-python produce and consume over TLS; a client without a
certificate, with one from another CA, or speaking plaintext to a TLS port is refused, and
the broker keeps serving everyone else.
"""

from __future__ import annotations

import re

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
)

from tests.integration.test_kafka_tools import kafka_libs  # noqa: F401  (fixture)
from tests.integration.test_metrics import scrape
from tests.support.broker_process import BrokerProcess
from tests.support.clients import allow, consume_all, delivery_errors
from tests.support.cluster import wait_for
from tools.dev_ca import DevCA
from tools.devcluster import free_port


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    ca = DevCA(tmp_path_factory.mktemp("tls-ca"))
    ca.broker = ca.issue("broker", cn="broker1", hosts=("127.0.0.1", "localhost"))
    ca.admin = ca.issue("admin", cn="admin")
    ca.alice = ca.issue("alice", cn="alice", ou="eng", o="kbroker")
    ca.stranger_ca = DevCA(ca.dir / "other", name="another CA")
    ca.stranger = ca.stranger_ca.issue("stranger", cn="admin")  # same name, untrusted issuer
    return ca


@pytest.fixture(scope="module")
def broker(tmp_path_factory, ca):
    b = BrokerProcess(str(tmp_path_factory.mktemp("tls-broker") / "data"))
    b.ssl_port, b.mtls_port = free_port(), free_port()
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{b.ssl_port},MTLS://127.0.0.1:{b.mtls_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(ca.broker.bundle),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca.pem),
        "listener.name.mtls.ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:ANONYMOUS;User:CN=admin",
    })
    b.start()
    yield b
    b.kill9()


def failed_authentications(broker, listener: str) -> float:
    match = re.search(rf'kafka_server_socketservermetrics_failed_authentication_total\{{listener="{listener}"\}} (\S+)',
                      scrape(broker))
    return float(match.group(1)) if match else 0.0


def tls(port: int, ca, cert=None, **extra) -> dict:
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL", "ssl.ca.location": str(ca.pem),
            "socket.timeout.ms": 5000, **extra}
    if cert is not None:
        conf.update({"ssl.certificate.location": str(cert.cert), "ssl.key.location": str(cert.key)})
    return conf


def test_clients_produce_and_consume_over_tls(broker, ca, topic_name):
    admin = AdminClient(tls(broker.ssl_port, ca))
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(20)
    assert delivery_errors(tls(broker.ssl_port, ca), topic_name, n=5) == []
    conf = tls(broker.ssl_port, ca)
    got = consume_all(conf.pop("bootstrap.servers"), topic_name, 1, 5, **conf)
    assert [m.value() for m in got] == [b"v%d" % i for i in range(5)]

    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    kp = KafkaProducer(bootstrap_servers=f"127.0.0.1:{broker.ssl_port}", security_protocol="SSL",
                       ssl_cafile=str(ca.pem), acks="all")
    kp.send(topic_name, b"from-kafka-python").get(timeout=20)
    kp.close()
    kc = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{broker.mtls_port}", security_protocol="SSL",
                       ssl_cafile=str(ca.pem), ssl_certfile=str(ca.admin.cert), ssl_keyfile=str(ca.admin.key),
                       consumer_timeout_ms=10000)
    kc.assign([TopicPartition(topic_name, 0)])
    kc.seek_to_beginning()
    values = [m.value for m in kc]
    kc.close()
    assert values[-1] == b"from-kafka-python" and len(values) == 6


def test_the_client_certificate_is_the_principal_the_acls_see(broker, ca, topic_name):
    admin = AdminClient(tls(broker.mtls_port, ca, ca.admin))  # User:CN=admin, a super user
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(20)
    assert delivery_errors(tls(broker.mtls_port, ca, ca.admin), topic_name) == []

    alice = tls(broker.mtls_port, ca, ca.alice)
    errors = delivery_errors(alice, topic_name, n=1, timeout=5)
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors

    allow(broker.bootstrap, topic_name, "User:CN=alice,OU=eng,O=kbroker")
    assert delivery_errors(alice, topic_name, n=2) == []


@pytest.mark.parametrize("who", ["no-certificate", "untrusted-certificate", "plaintext"])
def test_a_refused_client_leaves_the_others_served(broker, ca, topic_name, who):
    conf = {"no-certificate": tls(broker.mtls_port, ca),
            "untrusted-certificate": tls(broker.mtls_port, ca, ca.stranger),
            "plaintext": {"bootstrap.servers": f"127.0.0.1:{broker.ssl_port}", "socket.timeout.ms": 3000}}[who]
    listener = "SSL" if who == "plaintext" else "MTLS"
    failures = failed_authentications(broker, listener)
    admin = AdminClient({**conf, "log_level": 0})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=4)
    # Counted and logged with the client's address, as Kafka's failed TLS handshakes are.
    wait_for(lambda: failed_authentications(broker, listener) > failures, 10, "the failure to be counted")
    assert any("authentication_failed" in line and "SSL handshake failed" in line and "127.0.0.1" in line
               and listener in line for line in broker.output().splitlines()), "no log line for the failed handshake"
    # Everyone else is still served, on every listener.
    good = AdminClient(tls(broker.mtls_port, ca, ca.admin))
    good.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(20)
    assert delivery_errors(tls(broker.ssl_port, ca), topic_name, n=1) == []
    assert delivery_errors({"bootstrap.servers": broker.bootstrap}, topic_name, n=1) == []
    assert broker.is_alive()


def test_an_ssl_inter_broker_listener_carries_the_brokers_own_requests(tmp_path, ca, topic_name):
    """Transaction markers go to the partition leader through the inter-broker listener, this
    broker included: with that listener SSL (the peer's name checked against its certificate),
    a committed transaction becomes visible only if the broker's own TLS connection works."""
    from confluent_kafka import Consumer, TopicPartition

    b = BrokerProcess(str(tmp_path / "data"))
    b.internal_port = free_port()
    b.overrides.update({
        "listeners": f"CLIENT://127.0.0.1:{b.port},INTERNAL://127.0.0.1:{b.internal_port}",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SSL",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(ca.broker.bundle),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.pem),
        "listener.name.internal.ssl.client.auth": "required",
    })
    b.start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(20)
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": f"tx-{topic_name}"})
        p.init_transactions(20)
        p.begin_transaction()
        for i in range(4):
            p.produce(topic_name, value=b"t%d" % i, partition=i % 2)
        p.commit_transaction(20)
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"g-{topic_name}",
                      "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        c.assign([TopicPartition(topic_name, part, 0) for part in range(2)])
        got = []
        for _ in range(40):
            got += [m.value() for m in c.consume(10, 0.5) if m.error() is None]
            if len(got) == 4:
                break
        c.close()
        assert sorted(got) == [b"t0", b"t1", b"t2", b"t3"]
    finally:
        b.kill9()


def test_a_certificate_rotated_on_disk_is_served_without_a_restart(tmp_path, ca):
    import shutil
    import ssl
    import time

    from cryptography import x509

    def served_subject(port: int) -> str:
        pem = ssl.get_server_certificate(("127.0.0.1", port), timeout=5)
        return x509.load_pem_x509_certificate(pem.encode()).subject.rfc4514_string()

    old = ca.issue("rotating-old", cn="before-rotation", hosts=("127.0.0.1",))
    new = ca.issue("rotating-new", cn="after-rotation", hosts=("127.0.0.1",))
    store = tmp_path / "broker.pem"
    shutil.copy(old.bundle, store)
    b = BrokerProcess(str(tmp_path / "data"))
    b.ssl_port = free_port()
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{b.ssl_port}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(store),
    })
    b.start()
    try:
        assert served_subject(b.ssl_port) == "CN=before-rotation"
        kept = AdminClient(tls(b.ssl_port, ca))
        kept.list_topics(timeout=10)
        tmp = tmp_path / "broker.pem.new"
        shutil.copy(new.bundle, tmp)
        tmp.replace(store)  # an atomic rotation, as a certificate manager writes it
        deadline = time.monotonic() + 20
        while served_subject(b.ssl_port) != "CN=after-rotation":
            assert time.monotonic() < deadline, "the rotated certificate was never served"
            time.sleep(0.5)
        kept.list_topics(timeout=10)  # an open connection keeps working
        assert "ssl_stores_reloaded" in b.output()
    finally:
        b.kill9()


@pytest.mark.parametrize("what", ["tls-to-plaintext-port", "truncated-handshake"])
def test_a_broken_handshake_closes_only_its_connection(broker, ca, topic_name, what):
    import socket
    import ssl

    if what == "tls-to-plaintext-port":
        ctx = ssl.create_default_context(cafile=str(ca.pem))
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as raw:
            with pytest.raises((ssl.SSLError, OSError)):
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                    pass
    else:
        hello = bytes.fromhex("16030100a5010000a10303") + b"\x00" * 20  # a ClientHello cut short
        with socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=5) as raw:
            raw.sendall(hello)
    admin = AdminClient(tls(broker.mtls_port, ca, ca.admin))
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(20)
    assert delivery_errors(tls(broker.ssl_port, ca), topic_name, n=1) == []
    assert delivery_errors({"bootstrap.servers": broker.bootstrap}, topic_name, n=1) == []


def test_alter_configs_gives_a_listener_a_new_key_store(tmp_path, ca):
    """Kafka's documented rotation: ``kafka-configs --entity-type brokers --entity-name <id>
    --alter --add-config listener.name.<l>.ssl.keystore.location=<new store>``. New
    connections get the new certificate at once and after a restart; a store whose certificate
    changes the subject is refused (``ssl.allow.dn.changes``), and so is a cluster-wide update."""
    import ssl

    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    def served_serial(port: int) -> int:
        from cryptography import x509

        pem = ssl.get_server_certificate(("127.0.0.1", port), timeout=5)
        return x509.load_pem_x509_certificate(pem.encode()).serial_number

    def serial_of(issued) -> int:
        from cryptography import x509

        return x509.load_pem_x509_certificate(issued.cert.read_bytes()).serial_number

    first = ca.issue("dyn-first", cn="broker1", hosts=("127.0.0.1",))
    second = ca.issue("dyn-second", cn="broker1", hosts=("127.0.0.1",))
    renamed = ca.issue("dyn-renamed", cn="somebody-else", hosts=("127.0.0.1",))
    b = BrokerProcess(str(tmp_path / "data"))
    b.ssl_port = free_port()
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{b.ssl_port}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(first.bundle),
    })
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})

    def alter(store):
        entry = ConfigEntry("listener.name.ssl.ssl.keystore.location", str(store.bundle),
                            incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[entry])
        return admin.incremental_alter_configs([resource])[resource]

    try:
        assert served_serial(b.ssl_port) == serial_of(first)
        alter(second).result(20)
        assert served_serial(b.ssl_port) == serial_of(second)
        with pytest.raises(KafkaException, match="DistinguishedName does not match"):
            alter(renamed).result(20)
        from tests.support.raw import RawClient

        with RawClient(b.bootstrap) as c:  # the cluster-wide default (an empty broker name)
            r = c.call(44, 1, {"validate_only": False, "resources": [{
                "resource_type": 4, "resource_name": "", "configs": [{
                    "name": "listener.name.ssl.ssl.keystore.location", "config_operation": 0,
                    "value": str(second.bundle)}]}]}).responses[0]
        assert r.error_code == 42 and "default cluster level" in r.error_message, r  # INVALID_REQUEST
        assert served_serial(b.ssl_port) == serial_of(second)
        b.restart()
        assert served_serial(b.ssl_port) == serial_of(second), "the dynamic store did not survive a restart"
    finally:
        b.kill9()


@pytest.mark.kafka_tools
def test_kafka_tools_with_a_client_certificate(broker, ca, kafka_libs, tmp_path, topic_name):  # noqa: F811
    """Kafka's CLI (the Java client) on the mutual-TLS listener with a PEM key store: its
    certificate (CN=admin, a super user) is the principal; without a certificate it is refused."""
    from tests.integration.test_kafka_tools import kafka

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(20)
    address = f"127.0.0.1:{broker.mtls_port}"
    trust = ["security.protocol=SSL", "ssl.truststore.type=PEM", f"ssl.truststore.location={ca.pem}"]
    with_cert = tmp_path / "admin.properties"
    with_cert.write_text("\n".join(trust + ["ssl.keystore.type=PEM", f"ssl.keystore.location={ca.admin.bundle}"]))
    listed = kafka("kafka-topics", "--bootstrap-server", address, "--command-config", str(with_cert), "--list")
    assert topic_name in listed.stdout.split()
    without = tmp_path / "anonymous.properties"
    # Under TLS 1.3 the client learns of the refusal as a closed connection, which the Java
    # client retries until its API timeout: keep that short.
    without.write_text("\n".join(trust + ["default.api.timeout.ms=8000", "request.timeout.ms=4000"]))
    refused = kafka("kafka-topics", "--bootstrap-server", address, "--command-config", str(without), "--list",
                    check=False, timeout=60)
    assert refused.returncode != 0
    assert broker.is_alive()
