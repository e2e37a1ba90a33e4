"""The brokers a compatibility suite runs against, started fresh for each run.

Four targets, the same for every suite:

- ``kbroker``: one kbroker node, the embedded single-node default (no etcd).
- ``kbroker-cluster``: three kbroker nodes and etcd on loopback (RF 3 for internal topics).
- ``kafka`` / ``kafka-cluster``: Apache Kafka 4.3.1 in KRaft mode, one node or three, from the
  jars ``compat/kafka/fetch.sh`` caches; the same suites run against them for the reference counts.

And the security column, one node each, for the suites that can be configured for it
(``SECURITY`` in their runner): ``kbroker-sasl-ssl`` / ``kafka-sasl-ssl`` (a SASL_SSL listener,
TLS and SCRAM-SHA-512 with a user created through AlterUserScramCredentials) and
``kbroker-mtls`` / ``kafka-mtls`` (an SSL listener that requires a client certificate). A
throwaway CA (:mod:`tools.dev_ca`) signs the broker's and the client's certificates; no
authorizer, so the suites see what they see on a PLAINTEXT broker. The target's ``bootstrap``
is the secure listener and ``security`` says how the suite's clients log in
(:class:`ClientSecurity`); a PLAINTEXT listener stays for the brokers themselves.

A suite passes its broker settings (``BROKER_CONFIG``) to every target, so both systems see the
same configuration. Each target is stopped by pid when the ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

KBROKER = ("kbroker", "kbroker-cluster")
KAFKA = ("kafka", "kafka-cluster")
TARGETS = KBROKER + KAFKA
SECURITY_MODES = ("sasl-ssl", "mtls")
SECURE_TARGETS = tuple(f"{system}-{mode}" for mode in SECURITY_MODES for system in ("kbroker", "kafka"))
SCRAM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class ClientSecurity:
    """How a suite's clients reach a secure target."""

    protocol: str  # SASL_SSL or SSL
    ca: Path
    mechanism: str | None = None  # SASL_SSL: SCRAM-SHA-512
    username: str | None = None
    password: str | None = None
    cert: Path | None = None  # SSL: the client's certificate and key (PEM)
    key: Path | None = None
    bundle: Path | None = None  # key and certificate in one PEM (the Java client's key store)

    def librdkafka(self) -> dict[str, str]:
        """librdkafka's settings (confluent-kafka, kcat, librdkafka's own test.conf)."""
        conf = {"security.protocol": self.protocol, "ssl.ca.location": str(self.ca)}
        if self.mechanism:
            conf.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username,
                         "sasl.password": self.password})
        if self.cert:
            conf.update({"ssl.certificate.location": str(self.cert), "ssl.key.location": str(self.key)})
        return conf

    def java(self) -> dict[str, str]:
        """The Java client's settings (and Kafka's tools' ``--command-config``)."""
        conf = {"security.protocol": self.protocol, "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.ca)}
        if self.mechanism:
            conf.update({"sasl.mechanism": self.mechanism, "sasl.jaas.config":
                         "org.apache.kafka.common.security.scram.ScramLoginModule required "
                         f'username="{self.username}" password="{self.password}";'})
        if self.bundle:
            conf.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.bundle)})
        return conf

    def kafka_python(self) -> dict[str, str]:
        """kafka-python's (and aiokafka's) client settings."""
        conf = {"security_protocol": self.protocol, "ssl_cafile": str(self.ca)}
        if self.mechanism:
            conf.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": self.username,
                         "sasl_plain_password": self.password})
        if self.cert:
            conf.update({"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key)})
        return conf

    def go_flags(self) -> tuple[list[str], dict[str, str]]:
        """The flags of the Go harnesses (``compat/franz_go``, ``compat/sarama``) and their
        environment (the password travels there, not on the command line)."""
        args = ["-ca", str(self.ca)]
        if self.cert:
            args += ["-cert", str(self.cert), "-key", str(self.key)]
        if self.mechanism:
            args += ["-sasl-mechanism", self.mechanism, "-sasl-user", self.username]
            return args, {"COMPAT_SASL_PASSWORD": self.password}
        return args, {}

    def java_file(self, path: Path) -> Path:
        """:meth:`java` as a properties file at ``path`` (a Java client's or tool's config file;
        keys and values escaped, the JAAS line has quotes, spaces and '=')."""
        def esc(text: str) -> str:
            out = text.replace("\\", "\\\\")
            for ch in ":=#! ":
                out = out.replace(ch, "\\" + ch)
            return out
        path.write_text("".join(f"{esc(k)}={esc(v)}\n" for k, v in self.java().items()))
        return path


@dataclass(frozen=True)
class Target:
    name: str
    bootstrap: str
    nodes: int
    security: ClientSecurity | None = None

    @property
    def is_cluster(self) -> bool:
        return self.nodes > 1

    @property
    def is_kbroker(self) -> bool:
        return self.name.startswith("kbroker")

    @property
    def librdkafka_security(self) -> dict[str, str]:
        """librdkafka's settings for this target's secure listener (none on a plaintext one)."""
        return self.security.librdkafka() if self.security else {}


@contextlib.contextmanager
def started(name: str, config: dict[str, str] | None = None,
            workdir: Path | None = None) -> Iterator[Target]:
    """Start target ``name`` with broker ``config``; yield it; stop it."""
    config = dict(config or {})
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"compat-{name}-")))
        workdir.mkdir(parents=True, exist_ok=True)
        if name == "kbroker":
            yield _kbroker(stack, workdir, config)
        elif name == "kbroker-cluster":
            yield _kbroker_cluster(stack, workdir, config)
        elif name == "kafka":
            yield _kafka(stack, workdir, config)
        elif name == "kafka-cluster":
            yield _kafka_cluster(stack, workdir, config)
        elif name in SECURE_TARGETS:
            yield _secure(stack, workdir, config, name)
        else:
            raise ValueError(f"unknown target {name!r}; one of {', '.join(TARGETS + SECURE_TARGETS)}")


def _kbroker(stack: contextlib.ExitStack, workdir: Path, config: dict[str, str]) -> Target:
    from tests.support.broker_process import BrokerProcess

    broker = BrokerProcess(str(workdir / "data"), config)
    # Set statically, as the Kafka target does (and most suites' broker templates): a client
    # describing the broker's configs then sees STATIC_BROKER_CONFIG on both systems.
    broker.overrides.setdefault("advertised.listeners", f"PLAINTEXT://{broker.bootstrap}")
    stack.callback(broker.stop)
    broker.start()
    return Target("kbroker", broker.bootstrap, 1)


def _kbroker_cluster(stack: contextlib.ExitStack, workdir: Path, config: dict[str, str]) -> Target:
    from tools.devcluster import DevCluster

    cluster = DevCluster(str(workdir / "cluster"), 3, overrides={
        "default.replication.factor": "3", "min.insync.replicas": "2", **config})
    for node in cluster.nodes.values():  # static, as on the Kafka targets (see _kbroker)
        node.overrides.setdefault("advertised.listeners", f"PLAINTEXT://{node.address}")
    stack.callback(cluster.stop)
    cluster.start()
    return Target("kbroker-cluster", cluster.bootstrap, 3)


def _kafka(stack: contextlib.ExitStack, workdir: Path, config: dict[str, str]) -> Target:
    from compat.kafka.kraft import KafkaBroker

    broker = KafkaBroker(workdir=workdir / "kafka", extra_config=config)
    stack.callback(broker.stop)
    broker.start()
    return Target("kafka", broker.bootstrap, 1)


def _kafka_cluster(stack: contextlib.ExitStack, workdir: Path, config: dict[str, str]) -> Target:
    from compat.kafka.kraft_cluster import KafkaCluster

    cluster = KafkaCluster(n_nodes=3, workdir=workdir / "kafka-cluster", extra_config={
        "default.replication.factor": "3", "min.insync.replicas": "2", **config})
    stack.callback(cluster.stop)
    cluster.start()
    return Target("kafka-cluster", cluster.bootstrap, 3)


def _secure(stack: contextlib.ExitStack, workdir: Path, config: dict[str, str], name: str) -> Target:
    """One node of either system with a secure listener beside its PLAINTEXT one."""
    import secrets

    from tools.dev_ca import DevCA
    from tools.devcluster import free_port

    system, mode = name.split("-", 1)
    ca = DevCA(workdir / "tls", name="compat CA")
    # An unencrypted PKCS8 key: Java 17 cannot read the PBES2 encryption ``cryptography`` writes.
    broker_cert = ca.issue("broker", cn="broker", hosts=("127.0.0.1", "localhost"))
    listener = "SASL_SSL" if mode == "sasl-ssl" else "SSL"
    secure = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(broker_cert.bundle),
              "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.pem)}
    if mode == "sasl-ssl":
        secure.update({"sasl.enabled.mechanisms": SCRAM,
                       "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                           "org.apache.kafka.common.security.scram.ScramLoginModule required ;"})
        security = ClientSecurity("SASL_SSL", ca.pem, SCRAM, "compat", secrets.token_urlsafe(12))
    else:
        secure["ssl.client.auth"] = "required"
        client = ca.issue("client", cn="compat-client")
        security = ClientSecurity("SSL", ca.pem, cert=client.cert, key=client.key, bundle=client.bundle)
    if config.get("authorizer.class.name") and "super.users" not in config:
        # Every test client authenticates here, so only the broker itself (Kafka's controller
        # listener) and this set-up's PLAINTEXT admin calls are ANONYMOUS: a super user, or a
        # suite's first ACL (librdkafka's 0081) would lock Kafka's broker out of its controller.
        config = {**config, "super.users": "User:ANONYMOUS"}
    port = free_port()
    if system == "kbroker":
        from tests.support.broker_process import BrokerProcess

        broker = BrokerProcess(str(workdir / "data"), config)
        broker.overrides.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},{listener}://127.0.0.1:{port}",
            "advertised.listeners": f"PLAINTEXT://{broker.bootstrap},{listener}://127.0.0.1:{port}",
            "inter.broker.listener.name": "PLAINTEXT", **secure})
    else:
        from compat.kafka.kraft import KafkaBroker

        plain, controller = free_port(), free_port()
        broker = KafkaBroker(port=plain, controller_port=controller, workdir=workdir / "kafka", extra_config={
            **config,
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},CONTROLLER://127.0.0.1:{controller},"
                         f"{listener}://127.0.0.1:{port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plain},{listener}://127.0.0.1:{port}",
            "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,{listener}:{listener}",
            **secure})
    stack.callback(broker.stop)
    broker.start()
    if security.mechanism:
        add_scram_user(broker.bootstrap, security.username, security.password)
    return Target(name, f"127.0.0.1:{port}", 1, security)


def add_scram_user(plaintext: str, username: str, password: str, iterations: int = 8192) -> None:
    """A SCRAM-SHA-512 credential for ``username``, set through a PLAINTEXT listener (there the
    caller is ANONYMOUS, allowed since these brokers have no authorizer)."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": plaintext})
    upsert = UserScramCredentialUpsertion(username, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, iterations),
                                          password.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
