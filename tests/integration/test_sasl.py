"""SASL listeners with real clients against a broker process (Kafka's SASL_PLAINTEXT and
SASL_SSL): PLAIN users from the listener's JAAS line, SCRAM-SHA-256/512 users from
AlterUserScramCredentials; the authenticated user is the principal the ACLs see; wrong
credentials, unknown users and requests before authentication are refused without affecting
anyone else; a deleted SCRAM credential logs nobody in any more. Re-authentication
(KIP-368): sessions of ``connections.max.reauth.ms`` renewed on the same connection, closed
when not renewed, and not renewable once the credential is deleted.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from protocol.errors import ErrorCode
from tests.integration.test_kafka_tools import kafka, kafka_libs  # noqa: F401  (fixture)
from tests.support.broker_process import BrokerProcess
from tests.support.clients import allow, create_topic, delivery_errors
from tools.dev_ca import DevCA
from tools.devcluster import free_port

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret" user_alice="alice-secret";')


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    ca = DevCA(tmp_path_factory.mktemp("sasl-ca"))
    ca.broker = ca.issue("broker", cn="broker1", hosts=("127.0.0.1",))
    return ca


@pytest.fixture(scope="module")
def broker(tmp_path_factory, ca):
    b = BrokerProcess(str(tmp_path_factory.mktemp("sasl-broker") / "data"))
    b.sasl_port, b.sasl_ssl_port = free_port(), free_port()
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{b.sasl_port},"
                     f"SASL_SSL://127.0.0.1:{b.sasl_ssl_port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(ca.broker.bundle),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:ANONYMOUS;User:admin",
        "connection.failed.authentication.delay.ms": "50",
    })
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # PLAINTEXT: ANONYMOUS, a super user
    for f in admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                         b"carol-secret"),
            UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                         b"dave-secret")]).values():
        f.result(20)
    yield b
    b.kill9()


def sasl(broker, mechanism: str, username: str, password: str, tls=None, **extra) -> dict:
    port = broker.sasl_ssl_port if tls else broker.sasl_port
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": username, "sasl.password": password, **extra}
    if tls:
        conf["ssl.ca.location"] = str(tls.pem)
    return conf


def make_topic(broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic)


@pytest.mark.parametrize("mechanism, user, password, tls", [
    ("PLAIN", "admin", "admin-secret", False),
    ("SCRAM-SHA-256", "carol", "carol-secret", False),
    ("SCRAM-SHA-512", "dave", "dave-secret", False),
    ("SCRAM-SHA-512", "dave", "dave-secret", True),
])
def test_each_mechanism_logs_in_and_its_user_is_the_principal(broker, ca, topic_name, mechanism, user, password,
                                                             tls):
    make_topic(broker, topic_name)
    conf = sasl(broker, mechanism, user, password, ca if tls else None)
    errors = delivery_errors(conf, topic_name, n=1, timeout=5)
    if user == "admin":
        assert errors == []
        return
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors
    allow(broker.bootstrap, topic_name, f"User:{user}")
    assert delivery_errors(conf, topic_name) == []


def test_kafka_python_with_scram_over_sasl_ssl(broker, ca, topic_name):
    from kafka import KafkaProducer

    make_topic(broker, topic_name)
    allow(broker.bootstrap, topic_name, "User:dave")
    p = KafkaProducer(bootstrap_servers=f"127.0.0.1:{broker.sasl_ssl_port}", security_protocol="SASL_SSL",
                      ssl_cafile=str(ca.pem), sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="dave",
                      sasl_plain_password="dave-secret", acks="all")
    p.send(topic_name, b"from-kafka-python").get(timeout=20)
    p.close()


@pytest.mark.parametrize("mechanism, user, password", [
    ("PLAIN", "alice", "wrong"), ("PLAIN", "mallory", "x"),
    ("SCRAM-SHA-256", "carol", "wrong"), ("SCRAM-SHA-256", "mallory", "x"),
    ("SCRAM-SHA-512", "carol", "carol-secret"),  # carol has only a SCRAM-SHA-256 credential
])
def test_bad_credentials_are_refused_and_others_stay_served(broker, topic_name, mechanism, user, password):
    make_topic(broker, topic_name)
    admin = AdminClient({**sasl(broker, mechanism, user, password), "log_level": 0})
    with pytest.raises(KafkaException) as exc:
        admin.list_topics(timeout=5)
    assert exc.value.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT,
                                        KafkaError._TIMED_OUT), exc.value
    assert delivery_errors(sasl(broker, "PLAIN", "admin", "admin-secret"), topic_name, n=1) == []
    assert broker.is_alive()


def _frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    client = b"raw"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_only_the_sasl_requests_are_served_before_authentication(broker):
    with socket.create_connection(("127.0.0.1", broker.sasl_port), timeout=5) as s:
        s.sendall(_frame(18, 0, 1))  # ApiVersions v0: answered
        size = struct.unpack(">i", s.recv(4))[0]
        assert size > 0
        data = b""
        while len(data) < size:
            data += s.recv(size - len(data))
        assert struct.unpack(">i", data[:4])[0] == 1
        s.sendall(_frame(3, 1, 2, struct.pack(">i", -1)))  # Metadata v1, all topics: closes the connection
        assert s.recv(4) == b""


def test_a_deleted_scram_credential_logs_nobody_in(broker, topic_name):
    make_topic(broker, topic_name)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                         b"erin-secret")]).values():
        f.result(20)
    erin = sasl(broker, "SCRAM-SHA-256", "erin", "erin-secret")
    logged_in = AdminClient(erin)
    logged_in.list_topics(timeout=10)
    for f in admin.alter_user_scram_credentials([
            UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_256)]).values():
        f.result(20)
    with pytest.raises(KafkaException):
        AdminClient({**erin, "log_level": 0}).list_topics(timeout=5)


def _read_committed(bootstrap: str, topic: str, expected: int, timeout: float) -> list:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{topic}", "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got, deadline = [], time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        got += [m.value() for m in c.consume(10, 0.3) if m.error() is None]
    c.close()
    return got


def _commit_three(bootstrap: str, topic: str, prefix: bytes) -> None:
    """Three records in one committed transaction on a new topic; the commit returns once it
    is durable as PrepareCommit, and the markers (inter-broker requests) follow."""
    create_topic(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=prefix + b"%d" % i)
    p.commit_transaction(20)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_the_broker_logs_in_to_a_sasl_inter_broker_listener(tmp_path, ca, topic_name, mechanism):
    """Transaction markers go to the leader through the inter-broker listener, this broker's
    own included: with it SASL_SSL, a commit becomes visible only once the broker has logged in
    as its own user (a super user; ANONYMOUS is one only on the clients' PLAINTEXT listener's
    side). With SCRAM the broker's credential is created after start-up: its logins fail until
    then, and the markers go through once it exists."""
    b = BrokerProcess(str(tmp_path / "data"))
    b.internal_port = free_port()
    jaas = {"PLAIN": PLAIN_JAAS.replace("required ", 'required username="admin" password="admin-secret" '),
            "SCRAM-SHA-512": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                             'username="broker" password="broker-secret";'}[mechanism]
    b.overrides.update({
        "listeners": f"CLIENT://127.0.0.1:{b.port},INTERNAL://127.0.0.1:{b.internal_port}",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": mechanism,
        "sasl.mechanism.inter.broker.protocol": mechanism,
        f"listener.name.internal.{mechanism.lower()}.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(ca.broker.bundle),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.pem),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin;User:broker",
    })
    b.start()
    try:
        _commit_three(b.bootstrap, topic_name, b"t")  # durable as PrepareCommit; the markers follow
        if mechanism.startswith("SCRAM"):
            assert _read_committed(b.bootstrap, topic_name, 3, timeout=3) == []  # no credential yet
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                    "broker", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"broker-secret")]).values():
                f.result(20)
        assert sorted(_read_committed(b.bootstrap, topic_name, 3, timeout=30)) == [b"t0", b"t1", b"t2"]
    finally:
        b.kill9()


@pytest.mark.parametrize("login", ["unsecured", "token-file"])
def test_the_broker_logs_in_to_an_oauthbearer_inter_broker_listener(tmp_path, topic_name, login):
    """OAUTHBEARER between brokers: the broker's token from the unsecured login's JAAS claims
    (checked by the unsecured validator), or a signed JWT read from
    ``sasl.oauthbearer.token.endpoint.url=file:...`` (checked against the JWKS); markers reach
    the leader through that listener, so a commit becomes visible only once the login works,
    and the token's subject is a super user."""
    import json

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    from security.oauthbearer import LOGIN_HANDLER, SECURED_HANDLERS, UNSECURED_HANDLER

    b = BrokerProcess(str(tmp_path / "data"))
    b.internal_port = free_port()
    module = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
    b.overrides.update({
        "listeners": f"CLIENT://127.0.0.1:{b.port},INTERNAL://127.0.0.1:{b.internal_port}",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:kbroker-node",
    })
    if login == "unsecured":
        b.overrides.update({
            "listener.name.internal.oauthbearer.sasl.server.callback.handler.class": UNSECURED_HANDLER,
            "listener.name.internal.oauthbearer.sasl.jaas.config":
                f'{module} unsecuredLoginStringClaim_sub="kbroker-node";'})
    else:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
        (tmp_path / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256"}]}))
        token = jwt.encode({"sub": "kbroker-node", "iat": int(time.time()), "exp": int(time.time()) + 600},
                           key, algorithm="RS256", headers={"kid": "k1"})
        (tmp_path / "token.jwt").write_text(token)
        b.overrides.update({
            "listener.name.internal.oauthbearer.sasl.server.callback.handler.class": sorted(SECURED_HANDLERS)[0],
            "listener.name.internal.oauthbearer.sasl.jaas.config": f"{module} ;",
            "listener.name.internal.oauthbearer.sasl.login.callback.handler.class": LOGIN_HANDLER,
            "sasl.oauthbearer.token.endpoint.url": (tmp_path / "token.jwt").as_uri(),
            "sasl.oauthbearer.jwks.endpoint.url": (tmp_path / "jwks.json").as_uri()})
    b.start()
    try:
        _commit_three(b.bootstrap, topic_name, b"o")
        assert sorted(_read_committed(b.bootstrap, topic_name, 3, timeout=30)) == [b"o0", b"o1", b"o2"]
        assert "User:kbroker-node" in b.output()  # the principal the broker logged in as
    finally:
        b.kill9()


async def test_a_normal_user_cannot_write_markers_or_fetch_as_a_replica(broker, topic_name):
    """The broker-only APIs need ClusterAction: a logged-in user without it is refused as Kafka
    refuses it (CLUSTER_AUTHORIZATION_FAILED for markers, TOPIC_AUTHORIZATION_FAILED for a
    fetch claiming a replica id), while a super user's markers are accepted."""
    from broker.network_client import NetworkClient
    from security.sasl import SaslClient

    create_topic(broker.bootstrap, topic_name)
    allow(broker.bootstrap, topic_name, "User:alice", AclOperation.READ)
    markers = {"markers": [{"producer_id": 4242, "producer_epoch": 0, "transaction_result": False,
                            "topics": [{"name": topic_name, "partition_indexes": [0]}],
                            "coordinator_epoch": 0}]}
    fetch = {"replica_id": 7, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
             "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
             "topics": [{"topic": topic_name, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                             "fetch_offset": 0, "last_fetched_epoch": -1,
                                                             "log_start_offset": -1,
                                                             "partition_max_bytes": 1 << 20}]}]}
    address = ("127.0.0.1", broker.sasl_port)
    alice = NetworkClient("alice", lambda _n: address, 10, sasl=SaslClient("PLAIN", "alice", "alice-secret"))
    admin = NetworkClient("admin", lambda _n: address, 10, sasl=SaslClient("PLAIN", "admin", "admin-secret"))
    try:
        refused = await alice.send_request(1, 27, 1, markers)
        assert refused.markers[0].topics[0].partitions[0].error_code == ErrorCode.cluster_authorization_failed
        as_replica = await alice.send_request(1, 1, 12, fetch)
        assert as_replica.responses[0].partitions[0].error_code == ErrorCode.topic_authorization_failed
        accepted = await admin.send_request(1, 27, 1, markers)
        assert accepted.markers[0].topics[0].partitions[0].error_code == ErrorCode.none
    finally:
        alice.close()
        admin.close()


def test_the_first_scram_administrator_is_added_before_the_first_start(tmp_path, topic_name):
    """``python -m tools.storage add-scram`` (Kafka's ``kafka-storage format --add-scram``): a
    stopped broker's first SCRAM user, who logs in at the first start and is a super user."""
    import subprocess
    import sys

    from tools.devcluster import REPO

    data = str(tmp_path / "data")
    b = BrokerProcess(data)
    b.sasl_port = free_port()
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{b.sasl_port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:root",
    })
    bad = subprocess.run([sys.executable, "-m", "tools.storage", "add-scram", "--override", f"log.dirs={data}",
                          "--add-scram", "SCRAM-SHA-512=[name=root]"], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2 and "name and password are required" in bad.stderr
    added = subprocess.run([sys.executable, "-m", "tools.storage", "add-scram", "--override", f"log.dirs={data}",
                            "--add-scram", "SCRAM-SHA-512=[name=root,password=root-secret,iterations=8192]"],
                           cwd=REPO, capture_output=True, text=True)
    assert added.returncode == 0, added.stderr
    assert "SCRAM-SHA-512 credential for root (8192 iterations)" in added.stdout
    b.start()
    try:
        root = {"bootstrap.servers": f"127.0.0.1:{b.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "root", "sasl.password": "root-secret"}
        admin = AdminClient(root)
        admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(20)
        assert delivery_errors(root, topic_name) == []
    finally:
        b.kill9()


def test_a_garbage_sasl_token_fails_only_its_connection(broker, topic_name):
    from broker.network_client import NetworkClient
    from security.sasl import SaslClient

    class Garbage(SaslClient):
        def exchange(self):
            yield b"\xff\x00not a scram message\x00\x01"

    async def attempt():
        client = NetworkClient("garbage", lambda _n: ("127.0.0.1", broker.sasl_port), 5,
                               sasl=Garbage("SCRAM-SHA-256", "carol", "x"))
        try:
            await client.send_request(1, 3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False})
        finally:
            client.close()

    import asyncio

    with pytest.raises(ConnectionError, match="SASL login to node 1 failed: Authentication failed"):
        asyncio.run(attempt())
    make_topic(broker, topic_name)
    assert delivery_errors(sasl(broker, "PLAIN", "admin", "admin-secret"), topic_name, n=1) == []


def _raw_token_login(c, mechanism: str, user: str, password: str) -> list[bytes | None]:
    """SaslHandshake v0, then the tokens as bare frames (pre-1.0 clients): the server's answers
    (None: the connection closed instead)."""
    from scramp import ScramClient

    assert c.call(17, 0, {"mechanism": mechanism}).error_code == ErrorCode.none
    if mechanism == "PLAIN":
        c.send_frame(b"\x00" + user.encode() + b"\x00" + password.encode())
        return [c.recv_frame()]
    client = ScramClient([mechanism], user, password)
    c.send_frame(client.get_client_first().encode())
    first = c.recv_frame()
    if first is None:
        return [None]
    client.set_server_first(first.decode())
    c.send_frame(client.get_client_final().encode())
    return [first, c.recv_frame()]


def _topic_error(c, topic: str) -> int:
    md = c.call(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False})
    return md.topics[0].error_code


def test_a_v0_handshake_exchanges_bare_tokens_and_sets_the_principal(broker, topic_name):
    from tests.support.raw import RawClient

    make_topic(broker, topic_name)
    bootstrap = f"127.0.0.1:{broker.sasl_port}"
    with RawClient(bootstrap) as c:  # PLAIN: one token, an empty answer; admin is a super user
        assert _raw_token_login(c, "PLAIN", "admin", "admin-secret") == [b""]
        assert _topic_error(c, topic_name) == ErrorCode.none
    with RawClient(bootstrap) as c:  # SCRAM: two rounds; carol has no ACL on the topic
        first, final = _raw_token_login(c, "SCRAM-SHA-256", "carol", "carol-secret")
        assert first.startswith(b"r=") and final.startswith(b"v=")
        assert _topic_error(c, topic_name) == ErrorCode.topic_authorization_failed
    with RawClient(bootstrap) as c:  # a wrong password: no answer in this framing, just the close
        assert _raw_token_login(c, "PLAIN", "admin", "wrong") == [None]
    with RawClient(bootstrap) as c:  # a SaslAuthenticate request is not a token's framing
        assert c.call(17, 0, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
        c.send_call(36, 2, {"auth_bytes": b"\x00admin\x00admin-secret"})
        assert c.recv_frame() is None
    assert delivery_errors(sasl(broker, "PLAIN", "admin", "admin-secret"), topic_name, n=1) == []


# --- re-authentication (KIP-368) ------------------------------------------------------------------

SESSION_MS = 1500


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory):
    """SCRAM-SHA-256 sessions of 1.5 s on the SASL listener (Kafka's per-listener, per-mechanism
    ``connections.max.reauth.ms``); PLAIN's sessions never expire."""
    b = BrokerProcess(str(tmp_path_factory.mktemp("sasl-reauth") / "data"))
    b.sasl_port = free_port()
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{b.sasl_port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": str(SESSION_MS),
        "connection.failed.authentication.delay.ms": "50",
    })
    b.start()
    yield b
    b.kill9()


def _scram_user(broker, name: str, password: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), password.encode())]).values():
        f.result(20)


def _delete_scram_user(broker, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.alter_user_scram_credentials([
            UserScramCredentialDeletion(name, ScramMechanism.SCRAM_SHA_256)]).values():
        f.result(20)


def _raw_login(c, mechanism: str, user: str, password: str):
    """SaslHandshake v1 + SaslAuthenticate v2 on ``c``: the last SaslAuthenticate response."""
    from scramp import ScramClient

    assert c.call(17, 1, {"mechanism": mechanism}).error_code == ErrorCode.none
    if mechanism == "PLAIN":
        return c.call(36, 2, {"auth_bytes": b"\x00" + user.encode() + b"\x00" + password.encode()})
    client = ScramClient([mechanism], user, password)
    first = c.call(36, 2, {"auth_bytes": client.get_client_first().encode()})
    if first.error_code:
        return first
    client.set_server_first(bytes(first.auth_bytes).decode())
    return c.call(36, 2, {"auth_bytes": client.get_client_final().encode()})


def _metadata(c):
    return c.call(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})


def test_a_session_is_renewed_by_reauthentication_and_ends_without_it(reauth_broker):
    from tests.support.raw import RawClient

    _scram_user(reauth_broker, "frank", "frank-secret")
    bootstrap = f"127.0.0.1:{reauth_broker.sasl_port}"
    with RawClient(bootstrap) as c:
        done = _raw_login(c, "SCRAM-SHA-256", "frank", "frank-secret")
        assert done.error_code == ErrorCode.none
        assert done.session_lifetime.total_seconds() * 1000 == SESSION_MS
        for _ in range(3):  # re-authenticated before each expiry: served throughout
            time.sleep(SESSION_MS / 1000 * 0.7)
            again = _raw_login(c, "SCRAM-SHA-256", "frank", "frank-secret")
            assert (again.error_code, again.session_lifetime.total_seconds() * 1000) == (ErrorCode.none, SESSION_MS)
            assert _metadata(c).brokers
    with RawClient(bootstrap) as c:
        assert _raw_login(c, "SCRAM-SHA-256", "frank", "frank-secret").error_code == ErrorCode.none
        time.sleep(SESSION_MS / 1000 + 0.2)  # the session's end, by its configured length
        c.send_call(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                            "include_topic_authorized_operations": False})
        assert c.recv_frame() is None, "a request after the session expired must close the connection"
    with RawClient(bootstrap) as c:  # PLAIN's sessions do not expire: lifetime 0
        assert _raw_login(c, "PLAIN", "alice", "alice-secret").session_lifetime.total_seconds() == 0


def test_reauthentication_cannot_change_mechanism_or_outlive_a_deleted_credential(reauth_broker):
    from tests.support.raw import RawClient

    _scram_user(reauth_broker, "grace", "grace-secret")
    bootstrap = f"127.0.0.1:{reauth_broker.sasl_port}"
    with RawClient(bootstrap) as c:
        assert _raw_login(c, "SCRAM-SHA-256", "grace", "grace-secret").error_code == ErrorCode.none
        failed = _raw_login(c, "PLAIN", "alice", "alice-secret")
        assert failed.error_code == ErrorCode.sasl_authentication_failed
        assert "not supported for re-authentication of mechanism 'SCRAM-SHA-256'" in failed.error_message
        assert c.is_closed_by_peer()
    with RawClient(bootstrap) as c:
        assert _raw_login(c, "SCRAM-SHA-256", "grace", "grace-secret").error_code == ErrorCode.none
        _delete_scram_user(reauth_broker, "grace")
        assert _metadata(c).brokers  # the session lasts until its end ...
        failed = _raw_login(c, "SCRAM-SHA-256", "grace", "grace-secret")  # ... and is not renewed
        assert failed.error_code == ErrorCode.sasl_authentication_failed
        assert c.is_closed_by_peer()


def test_librdkafka_reauthenticates_and_a_deleted_user_loses_access(reauth_broker, topic_name):
    """confluent-kafka re-authenticates within each 1.5 s session (KIP-368) while it produces;
    once the user's credential is deleted, its next re-authentication fails and it is cut off."""
    _scram_user(reauth_broker, "heidi", "heidi-secret")
    create_topic(reauth_broker.bootstrap, topic_name)
    delivered, failed = [], []
    p = Producer({**sasl(reauth_broker, "SCRAM-SHA-256", "heidi", "heidi-secret"), "linger.ms": 0,
                  "message.timeout.ms": 3000, "log_level": 0})

    def produce_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            p.produce(topic_name, b"v", on_delivery=lambda err, _m: (failed if err else delivered).append(err))
            p.poll(0.1)

    produce_for(4 * SESSION_MS / 1000)  # several sessions long
    p.flush(10)
    assert not failed and len(delivered) > 20, (failed[:3], len(delivered))
    renewed = [line for line in reauth_broker.output().splitlines()
               if "reauthenticated" in line and "principal=User:heidi" in line]
    assert len(renewed) >= 2, "librdkafka did not re-authenticate on its connection"
    _delete_scram_user(reauth_broker, "heidi")
    produce_for(2 * SESSION_MS / 1000 + 3)
    p.flush(10)
    assert failed, "the deleted user kept producing"


def test_the_broker_reauthenticates_to_its_inter_broker_listener(tmp_path, topic_name):
    """Markers go through the inter-broker listener, whose sessions last 1.5 s: the broker's own
    connection logs in again before each session ends, so transactions keep committing and the
    listener never has to close an expired connection."""
    b = BrokerProcess(str(tmp_path / "data"))
    b.internal_port = free_port()
    b.overrides.update({
        "listeners": f"CLIENT://127.0.0.1:{b.port},INTERNAL://127.0.0.1:{b.internal_port}",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config":
            PLAIN_JAAS.replace("required ", 'required username="admin" password="admin-secret" '),
        "listener.name.internal.plain.connections.max.reauth.ms": str(SESSION_MS),
    })
    b.start()
    try:
        create_topic(b.bootstrap, topic_name)
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": f"tx-{topic_name}"})
        p.init_transactions(20)
        end, committed = time.monotonic() + 4 * SESSION_MS / 1000, 0
        while time.monotonic() < end:
            p.begin_transaction()
            p.produce(topic_name, value=b"t%d" % committed)
            p.commit_transaction(20)
            committed += 1
            time.sleep(0.2)
        assert len(_read_committed(b.bootstrap, topic_name, committed, timeout=30)) == committed
        out = b.output()
        assert sum("reauthenticated" in line and "principal=User:admin" in line for line in out.splitlines()) >= 2
        assert "session_expired" not in out
    finally:
        b.kill9()


# --- OAUTHBEARER ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def oauth(tmp_path_factory):
    """A broker with a signed-token OAUTHBEARER listener (JWKS file, audience, issuer) and an
    unsecured one for development; the signing key mints tokens for the clients."""
    import json

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    from security.oauthbearer import SECURED_HANDLERS, UNSECURED_HANDLER

    tmp = tmp_path_factory.mktemp("oauth")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    (tmp / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256"}]}))
    b = BrokerProcess(str(tmp / "data"))
    b.oauth_port, b.dev_port = free_port(), free_port()
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},OAUTH://127.0.0.1:{b.oauth_port},DEV://127.0.0.1:{b.dev_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OAUTH:SASL_PLAINTEXT,DEV:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class": sorted(SECURED_HANDLERS)[0],
        "listener.name.oauth.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;",
        "sasl.oauthbearer.jwks.endpoint.url": (tmp / "jwks.json").as_uri(),
        "sasl.oauthbearer.expected.audience": "kbroker",
        "sasl.oauthbearer.expected.issuer": "https://idp.example",
        "listener.name.dev.oauthbearer.sasl.server.callback.handler.class": UNSECURED_HANDLER,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:ANONYMOUS",
        "connection.failed.authentication.delay.ms": "50",
    })
    b.start()

    def mint(sub: str, audience: str = "kbroker", lifetime: int = 300) -> tuple[str, float]:
        exp = time.time() + lifetime
        return jwt.encode({"sub": sub, "aud": audience, "iss": "https://idp.example", "iat": int(time.time()),
                           "exp": int(exp)}, key, algorithm="RS256", headers={"kid": "k1"}), exp

    b.mint = mint
    yield b
    b.kill9()


def test_oauthbearer_signed_token_is_the_principal(oauth, topic_name):
    """confluent-kafka's oauth_cb hands a signed JWT; its subject is the principal the ACLs see,
    and a token for another audience is refused."""
    create_topic(oauth.bootstrap, topic_name)
    conf = {"bootstrap.servers": f"127.0.0.1:{oauth.oauth_port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": lambda _config: oauth.mint("svc-orders")}
    errors = delivery_errors(conf, topic_name, n=1, timeout=5)
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors
    allow(oauth.bootstrap, topic_name, "User:svc-orders")
    assert delivery_errors(conf, topic_name) == []
    wrong = {**conf, "oauth_cb": lambda _config: oauth.mint("svc-orders", audience="another-service"),
             "log_level": 0}
    with pytest.raises(KafkaException) as exc:
        AdminClient(wrong).list_topics(timeout=5)
    assert exc.value.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT, KafkaError._TIMED_OUT)
    assert "invalid_token" in oauth.output()


def test_oauthbearer_unsecured_tokens_on_the_development_listener_only(oauth, topic_name):
    """librdkafka's built-in unsecured JWT (``alg: none``) logs in where the unsecured validator
    is configured, and nowhere else."""
    create_topic(oauth.bootstrap, topic_name)
    allow(oauth.bootstrap, topic_name, "User:dev")
    unsecured = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                 "enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": "principal=dev"}
    dev = {**unsecured, "bootstrap.servers": f"127.0.0.1:{oauth.dev_port}"}
    assert delivery_errors(dev, topic_name) == []
    signed_only = {**unsecured, "bootstrap.servers": f"127.0.0.1:{oauth.oauth_port}", "log_level": 0}
    with pytest.raises(KafkaException):
        AdminClient(signed_only).list_topics(timeout=5)


# --- Kafka's own tools and the Java client ---------------------------------------------------------

def _java_client_properties(path, mechanism: str, user: str, password: str, tls=None) -> str:
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    lines = [f"security.protocol={'SASL_SSL' if tls else 'SASL_PLAINTEXT'}", f"sasl.mechanism={mechanism}",
             f'sasl.jaas.config={module} required username="{user}" password="{password}";']
    if tls is not None:
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={tls.pem}"]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.kafka_tools
@pytest.mark.parametrize("mechanism, user, password, tls", [
    ("PLAIN", "admin", "admin-secret", False),
    ("SCRAM-SHA-256", "carol", "carol-secret", False),
    ("SCRAM-SHA-512", "dave", "dave-secret", True),
])
def test_kafka_tools_log_in_with_command_config(broker, ca, kafka_libs, tmp_path, topic_name,  # noqa: F811
                                                mechanism, user, password, tls):
    """Kafka's CLI tools (the Java client 4.3 inside) with ``--command-config``: each mechanism
    logs in, the user sees what its ACLs allow, and a wrong password is one clear failure."""
    make_topic(broker, topic_name)
    port = broker.sasl_ssl_port if tls else broker.sasl_port
    address = f"127.0.0.1:{port}"
    config = _java_client_properties(tmp_path / "client.properties", mechanism, user, password, ca if tls else None)
    if user != "admin":
        allow(broker.bootstrap, topic_name, f"User:{user}", AclOperation.DESCRIBE)
    listed = kafka("kafka-topics", "--bootstrap-server", address, "--command-config", config, "--list")
    assert topic_name in listed.stdout.split()
    if tls:  # the Java producer and consumer over SASL_SSL
        allow(broker.bootstrap, topic_name, f"User:{user}", AclOperation.WRITE)
        allow(broker.bootstrap, topic_name, f"User:{user}", AclOperation.READ)
        group = f"g-{topic_name}"
        from confluent_kafka.admin import ResourceType

        allow(broker.bootstrap, group, f"User:{user}", AclOperation.READ, ResourceType.GROUP)
        kafka("kafka-console-producer", "--bootstrap-server", address, "--command-config", config,
              "--topic", topic_name, input="from-the-java-client\n")
        read = kafka("kafka-console-consumer", "--bootstrap-server", address, "--command-config", config,
                     "--group", group, "--topic", topic_name, "--from-beginning", "--max-messages", "1",
                     "--timeout-ms", "20000")
        assert "from-the-java-client" in read.stdout
    wrong = _java_client_properties(tmp_path / "wrong.properties", mechanism, user, "not-the-password",
                                    ca if tls else None)
    refused = kafka("kafka-topics", "--bootstrap-server", address, "--command-config", wrong, "--list",
                    check=False)
    assert refused.returncode != 0 and "Authentication failed" in refused.stdout + refused.stderr
    assert broker.is_alive()


async def test_aiokafka_with_scram_over_sasl_ssl(broker, ca, topic_name):
    import ssl as ssl_module

    from aiokafka import AIOKafkaProducer

    make_topic(broker, topic_name)
    allow(broker.bootstrap, topic_name, "User:dave")
    p = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{broker.sasl_ssl_port}", security_protocol="SASL_SSL",
                         ssl_context=ssl_module.create_default_context(cafile=str(ca.pem)),
                         sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="dave",
                         sasl_plain_password="dave-secret", acks="all")
    await p.start()
    try:
        meta = await p.send_and_wait(topic_name, b"from-aiokafka")
        assert meta.offset >= 0
    finally:
        await p.stop()
