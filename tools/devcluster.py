"""``python -m tools.devcluster --nodes 3 --data-dir DIR``: N nodes on loopback, each a broker
and an etcd member beside it.

Starts, by default, one member of Debian's ``etcd`` per node (at most 5; ``--etcd-members N``
chooses: 1 is a single point of failure, fine for a laptop or CI, not for a cluster that must
survive a machine), as KRaft's combined nodes run a controller beside each broker: member i's
data under DIR/etcd-<i>, its log in DIR/etcd-<i>.log, every member named in
``--initial-cluster`` and every client address in the brokers' ``metadata.etcd.endpoints``.
Then N broker processes (node ids 1..N, data under DIR/broker-<id>, each logging to
DIR/broker-<id>.log); waits until every broker listens and has registered, prints one line
``bootstrap.servers=host:port,host:port,...`` and runs until SIGTERM or Ctrl-C, then stops the
brokers (controlled shutdown) and the members.

``--security`` makes it a cluster nobody enters without credentials: a throwaway CA and a broker
certificate (:mod:`tools.dev_ca`, under DIR/tls), one SASL_SSL listener per broker for clients
and brokers alike (PLAIN and SCRAM-SHA-512; the brokers log in to each other as ``broker``),
the StandardAuthorizer with ``broker`` and ``admin`` as super users, and a SCRAM-SHA-512 user
``alice`` with no ACLs; etcd itself on TLS, between members as for clients, open only to
certificates from the same CA. Passwords are random; the client settings for librdkafka and the
Java client are printed and written to DIR/client-admin.properties and DIR/client-alice.properties.

:class:`DevCluster` is the same thing as a library: the cluster tests use it to kill, pause,
restart or wipe single brokers (``nodes``) and single etcd members (``etcd_members``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from kbroker.process import (
    child_setup,
    free_port,  # noqa: F401  (the one free-port picker; the tests import it from here)
    terminate,
)

REPO = Path(__file__).resolve().parents[1]
MAX_DEFAULT_MEMBERS = 5  # one etcd member per node up to this many, as KRaft's voters
ETCD_CANDIDATES = ("etcd", "/usr/bin/etcd", "/usr/local/bin/etcd")


def etcd_binary() -> str | None:
    for candidate in ETCD_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def wait_for_port(port: int, timeout: float = 30.0, proc: subprocess.Popen | None = None,
                  what: str = "broker", host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} during start-up")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{what} did not listen on {port} within {timeout}s")


class ClusterProcess:
    """A process of the cluster started from a command, with its data directory and its log
    (``<data dir>.log``, one ``==== start`` line per start): ``alive``, ``kill9``, ``pause``,
    ``resume``, ``wipe``, ``output``."""

    cluster: DevCluster
    data_dir: str
    log_path: str
    proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _spawn(self, cwd: Path | None = None) -> None:
        with open(self.log_path, "a") as out:
            out.write(f"\n==== start {time.strftime('%H:%M:%S')} ====\n")
            out.flush()
            self.proc = subprocess.Popen(self.command(), cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, preexec_fn=child_setup(self.cluster.die_with_parent))

    def kill9(self) -> None:
        if self.alive:
            self.proc.kill()
            self.proc.wait()

    def pause(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGCONT)

    def wipe(self) -> None:
        """Delete the data directory (the process must be down)."""
        assert not self.alive
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def output(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""


class Node(ClusterProcess):
    """One broker process of the cluster; keeps its node id, port and data directory. Wiped,
    it returns empty."""

    def __init__(self, cluster: DevCluster, node_id: int, port: int, host: str = "127.0.0.1",
                 command_prefix: list[str] | None = None) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.port = port
        self.host = host
        self.command_prefix = list(command_prefix or [])  # e.g. ip netns exec NS
        self.data_dir = os.path.join(cluster.data_dir, f"broker-{node_id}")
        self.log_path = self.data_dir + ".log"
        self.overrides: dict[str, str] = {}

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        props = {**self.cluster.broker_properties(), "node.id": str(self.node_id),
                 "listeners": f"{self.cluster.listener_name}://{self.host}:{self.port}", "log.dirs": self.data_dir,
                 **self.overrides}
        cmd = [*self.command_prefix, sys.executable, "-m", "broker"]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, wait: bool = True, timeout: float = 60.0) -> Node:
        self._spawn(cwd=REPO)
        if wait:
            self.wait_listening(timeout)
        return self

    def wait_listening(self, timeout: float) -> None:
        wait_for_port(self.port, timeout, self.proc, f"broker {self.node_id}", self.host)

    def stop(self, timeout: float = 40.0) -> int:
        """SIGTERM (a controlled shutdown; a paused broker is resumed first), then SIGKILL."""
        code = terminate(self.proc, timeout)
        return 0 if code is None else code


class EtcdMember(ClusterProcess):
    """One member of the cluster's etcd (the metadata store), beside a broker as KRaft's combined
    nodes are: ``kill9``/``pause``/``resume``/``start``/``stop``/``alive`` as a broker's :class:`Node`.
    Wiped, it can only come back as a new member (``DevCluster.joining_etcd_member``)."""

    def __init__(self, cluster: DevCluster, member_id: int, host: str = "127.0.0.1",
                 command_prefix: list[str] | None = None) -> None:
        self.cluster = cluster
        self.member_id = member_id
        self.name = f"etcd-{member_id}"
        self.host = host
        self.command_prefix = list(command_prefix or [])
        self.client_port = free_port()
        self.peer_port = free_port()
        self.data_dir = os.path.join(cluster.data_dir, self.name)
        self.log_path = self.data_dir + ".log"
        # "new" for a member of the first start; "existing" for one added to a running cluster
        # (etcdctl member add), which joins with the members named in ``initial_cluster``.
        self.initial_state = "new"
        self.initial_cluster: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def client_url(self) -> str:
        return f"{self.cluster.etcd_scheme}://{self.address}"

    @property
    def peer_url(self) -> str:
        return f"{self.cluster.etcd_peer_scheme}://{self.host}:{self.peer_port}"

    def command(self) -> list[str]:
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError("etcd is not installed (Debian package etcd-server; `make tools` installs it)")
        cluster = self.cluster
        cmd = [*self.command_prefix, binary, "--name", self.name, "--data-dir", self.data_dir,
               "--listen-client-urls", self.client_url, "--advertise-client-urls", self.client_url,
               "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
               "--initial-cluster", self.initial_cluster or cluster.initial_cluster(),
               "--initial-cluster-state", self.initial_state, "--initial-cluster-token", cluster.etcd_token,
               "--heartbeat-interval", str(cluster.etcd_heartbeat_ms),
               "--election-timeout", str(cluster.etcd_election_ms), "--log-level", "warn"]
        if cluster.security is not None:
            cmd += cluster.security.etcd_flags()
        return cmd

    def start(self, wait: bool = True, timeout: float = 30.0) -> EtcdMember:
        self._spawn()
        if wait:
            wait_for_port(self.client_port, timeout, self.proc, self.name, self.host)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (a paused member is resumed first), then SIGKILL."""
        terminate(self.proc, timeout)

    def health(self, timeout: float = 2.0) -> bool:
        """Whether the member answers /health with a leader (it serves reads and writes)."""
        import urllib.request
        context = self.cluster.security.etcd_client_context() if self.cluster.security is not None else None
        try:
            with urllib.request.urlopen(f"{self.client_url}/health", timeout=timeout, context=context) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError):
            return False


class DevCluster:
    def __init__(self, data_dir: str, nodes: int = 3, base_port: int = 0, etcd_port: int = 0,
                 overrides: dict[str, str] | None = None, etcd_host: str = "127.0.0.1",
                 node_hosts: dict[int, str] | None = None,
                 command_prefixes: dict[int, list[str]] | None = None, security: bool = False,
                 etcd_members: int | None = None) -> None:
        """``node_hosts`` / ``command_prefixes``: per node, the address it listens on and a
        command prefix (the network-namespace tests run each node in its own namespace, its
        etcd member beside its broker). ``security``: SASL_SSL everywhere (see the module's
        docstring). ``etcd_members``: how many etcd members (default one per node, at most
        5); member i runs on node i's host. ``etcd_port``: the first member's client port."""
        self.data_dir = os.path.abspath(data_dir)
        os.makedirs(self.data_dir, exist_ok=True)
        hosts, prefixes = node_hosts or {}, command_prefixes or {}
        members = etcd_members if etcd_members is not None else min(max(nodes, 1), MAX_DEFAULT_MEMBERS)
        if members < 1:
            raise ValueError("a cluster needs at least one etcd member")
        member_hosts = {i: hosts.get(i, etcd_host) for i in range(1, members + 1)}
        self.security = SecureSetup(os.path.join(self.data_dir, "tls"), node_hosts, etcd_host,
                                    set(member_hosts.values())) if security else None
        self.etcd_host = etcd_host
        self.etcd_token = f"kbroker-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        self.etcd_heartbeat_ms, self.etcd_election_ms = 100, 1000
        self.etcd_members = {i: EtcdMember(self, i, member_hosts[i], prefixes.get(i)) for i in range(1, members + 1)}
        if etcd_port:
            self.etcd_members[1].client_port = etcd_port
        self.overrides = dict(overrides or {})
        self.nodes = {i: Node(self, i, (base_port + i - 1) if base_port else free_port(),
                              hosts.get(i, "127.0.0.1"), prefixes.get(i))
                      for i in range(1, nodes + 1)}
        self.prefix = "/kbroker"
        # Set by an owner that must not leave processes behind if it is killed outright (the
        # pytest plugin's EmbeddedCluster): etcd and the brokers get a parent-death signal.
        self.die_with_parent = False

    # --- configuration --------------------------------------------------------------------------

    def broker_properties(self) -> dict[str, str]:
        n = len(self.nodes)
        props = {
            "metadata.etcd.endpoints": self.etcd_endpoints,
            "metadata.etcd.prefix": self.prefix,
            "offsets.topic.replication.factor": str(min(3, n)),
            "transaction.state.log.replication.factor": str(min(3, n)),
            "transaction.state.log.min.isr": str(min(2, n)),
            "metrics.listener": "127.0.0.1:0",
            "group.initial.rebalance.delay.ms": "0",
        }
        if self.security is not None:
            props.update(self.security.broker_properties())
        props.update(self.overrides)
        return props

    @property
    def listener_name(self) -> str:
        return "SASL_SSL" if self.security is not None else "PLAINTEXT"

    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.nodes.values())

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id]

    # --- etcd -----------------------------------------------------------------------------------

    @property
    def etcd_endpoints(self) -> str:
        """Every member's client address, as ``metadata.etcd.endpoints`` takes them."""
        return ",".join(m.address for m in self.etcd_members.values())

    @property
    def etcd_scheme(self) -> str:
        return "https" if self.security is not None else "http"

    @property
    def etcd_peer_scheme(self) -> str:
        return "https" if self.security is not None else "http"

    def initial_cluster(self) -> str:
        return ",".join(f"{m.name}={m.peer_url}" for m in self.etcd_members.values())

    def start_etcd(self, timeout: float = 30.0) -> None:
        """Start every member that is down (together: a new cluster has no quorum before a
        majority runs), and wait until the cluster has a leader."""
        starting = [m for m in self.etcd_members.values() if not m.alive]
        for member in starting:
            member.start(wait=False)
        deadline = time.monotonic() + timeout
        for member in starting:
            wait_for_port(member.client_port, max(deadline - time.monotonic(), 1), member.proc, member.name,
                          member.host)
        self.wait_etcd_healthy(max(deadline - time.monotonic(), 1))

    def wait_etcd_healthy(self, timeout: float = 30.0) -> None:
        """Until every running member answers /health with a leader (a port opens before that)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = [m for m in self.etcd_members.values() if m.alive]
            if running and all(m.health() for m in running):
                return
            time.sleep(0.1)
        raise TimeoutError(f"etcd ({self.etcd_endpoints}) was not healthy within {timeout}s")

    def stop_etcd(self) -> None:
        for member in self.etcd_members.values():
            member.resume()
            if member.alive:
                member.proc.terminate()
        for member in self.etcd_members.values():
            member.stop()

    def joining_etcd_member(self, member_id: int, host: str | None = None,
                            command_prefix: list[str] | None = None) -> EtcdMember:
        """The member to start after ``etcdctl member add`` told the cluster of it (a new one, or
        a dead one's replacement under its old name, data wiped): it starts with
        ``--initial-cluster-state existing`` and the members there are now, itself included."""
        old = self.etcd_members.get(member_id)
        if old is not None:
            assert not old.alive, f"etcd-{member_id} still runs"
            member = old
            member.wipe()
        else:
            member = EtcdMember(self, member_id, host or self.etcd_host, command_prefix)
        member.initial_state = "existing"
        self.etcd_members[member_id] = member
        others = [m for i, m in sorted(self.etcd_members.items()) if i != member_id and m.alive]
        member.initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in [*others, member])
        return member

    def etcd_leader(self, timeout: float = 10.0) -> int | None:
        """The member id of the member that leads etcd's Raft now (None: no leader answered)."""
        from tools.etcd_admin import raft_leader_name
        name = raft_leader_name(self, timeout)
        return None if name is None else int(name.rsplit("-", 1)[1])

    # --- whole cluster --------------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> DevCluster:
        self.start_etcd()
        self._start_brokers(timeout)
        if self.security is not None:
            self.security.create_scram_user(self.nodes[1].host, self.nodes[1].port)
        return self

    def _start_brokers(self, timeout: float) -> None:
        for node in self.nodes.values():
            node.start(wait=False)
        deadline = time.monotonic() + timeout
        for node in self.nodes.values():
            node.wait_listening(max(deadline - time.monotonic(), 1))
        self.wait_registered(set(self.nodes), max(deadline - time.monotonic(), 1))

    def wait_registered(self, node_ids: set[int], timeout: float = 60.0) -> None:
        """Until every broker in ``node_ids`` appears in another broker's Metadata answer."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node_ids <= set(self.registered_brokers()):
                return
            time.sleep(0.1)
        raise TimeoutError(f"brokers {sorted(node_ids)} did not all register within {timeout}s")

    def registered_brokers(self) -> list[int]:
        """Broker ids in the Metadata answer of the first live broker."""
        for node in self.nodes.values():
            if not node.alive:
                continue
            try:
                if self.security is not None:
                    return self.security.metadata_broker_ids(node.host, node.port)
                return metadata_broker_ids(node.host, node.port)
            except OSError:
                continue
        return []

    def restart_brokers(self, timeout: float = 90.0) -> None:
        """Stop every broker (controlled), then start them all again together."""
        for node in self.nodes.values():
            node.stop()
        self._start_brokers(timeout)

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.alive:
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes.values():
            node.stop()
        self.stop_etcd()

    def kill(self) -> None:
        for node in self.nodes.values():
            node.resume()
            node.kill9()
        for member in self.etcd_members.values():
            member.resume()
            member.kill9()


class SecureSetup:
    """The CA, certificate, users and broker settings of a ``--security`` cluster."""

    SCRAM_USER = "alice"

    def __init__(self, directory: str, node_hosts: dict[int, str] | None = None, etcd_host: str = "127.0.0.1",
                 member_hosts: set[str] = frozenset()) -> None:
        import secrets

        from tools.dev_ca import DevCA

        self.dir = directory
        hosts = sorted({"127.0.0.1", "localhost", *(node_hosts or {}).values()})
        self.ca = DevCA(Path(directory))
        self.broker_cert = self.ca.issue("broker", cn="kbroker", hosts=tuple(hosts))
        # etcd over TLS, and only for holders of a certificate from this CA: the brokers' client
        # certificate, and the members' own (they authenticate each other with it as peers).
        self.etcd_cert = self.ca.issue("etcd", cn="etcd",
                                       hosts=tuple(sorted({"127.0.0.1", "localhost", etcd_host, *member_hosts})))
        self.etcd_client_cert = self.ca.issue("etcd-client", cn="kbroker-broker")
        self.passwords = {u: secrets.token_urlsafe(12) for u in ("broker", "admin", self.SCRAM_USER)}

    def broker_properties(self) -> dict[str, str]:
        pw = self.passwords
        jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                f'username="broker" password="{pw["broker"]}" user_broker="{pw["broker"]}" '
                f'user_admin="{pw["admin"]}";')
        return {
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.broker_cert.bundle),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca.pem),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:broker;User:admin",
            "metadata.etcd.tls.ca.file": str(self.ca.pem),
            "metadata.etcd.tls.cert.file": str(self.etcd_client_cert.cert),
            "metadata.etcd.tls.key.file": str(self.etcd_client_cert.key),
        }

    def etcd_flags(self) -> list[str]:
        """Clients and peers alike on TLS, each with a certificate from this CA."""
        cert, key, ca = str(self.etcd_cert.cert), str(self.etcd_cert.key), str(self.ca.pem)
        return ["--cert-file", cert, "--key-file", key, "--trusted-ca-file", ca, "--client-cert-auth",
                "--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", ca,
                "--peer-client-cert-auth"]

    def etcd_client_context(self):
        import ssl

        context = ssl.create_default_context(cafile=str(self.ca.pem))
        context.load_cert_chain(str(self.etcd_client_cert.cert), str(self.etcd_client_cert.key))
        return context

    def client_config(self, bootstrap: str, user: str = "admin") -> dict[str, str]:
        """librdkafka's settings (confluent-kafka, kcat) for ``user``."""
        mechanism = "SCRAM-SHA-512" if user == self.SCRAM_USER else "PLAIN"
        return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                "sasl.username": user, "sasl.password": self.passwords[user], "ssl.ca.location": str(self.ca.pem)}

    def java_properties(self, bootstrap: str, user: str = "admin") -> str:
        """The Java client's (and Kafka's tools' --command-config) settings for ``user``."""
        mechanism = "SCRAM-SHA-512" if user == self.SCRAM_USER else "PLAIN"
        module = ("org.apache.kafka.common.security.scram.ScramLoginModule" if user == self.SCRAM_USER
                  else "org.apache.kafka.common.security.plain.PlainLoginModule")
        return (f"bootstrap.servers={bootstrap}\nsecurity.protocol=SASL_SSL\nsasl.mechanism={mechanism}\n"
                f'sasl.jaas.config={module} required username="{user}" password="{self.passwords[user]}";\n'
                f"ssl.truststore.type=PEM\nssl.truststore.location={self.ca.pem}\n")

    def _client(self, host: str, port: int, timeout: float):
        from broker.network_client import NetworkClient
        from security.sasl import SaslClient
        from security.ssl_factory import client_context, ssl_settings

        tls = client_context(ssl_settings({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca.pem)}))
        return NetworkClient("devcluster", lambda _n: (host, port), timeout, tls,
                             SaslClient("PLAIN", "admin", self.passwords["admin"]))

    def call(self, host: str, port: int, api_key: int, version: int, body: dict, timeout: float = 5.0):
        """One request as ``admin`` over the SASL_SSL listener (the decoded response)."""
        import asyncio

        async def call():
            client = self._client(host, port, timeout)
            try:
                return await client.send_request(0, api_key, version, body)
            finally:
                client.close()
        try:
            return asyncio.run(call())
        except (ConnectionError, TimeoutError) as exc:
            raise OSError(str(exc)) from exc

    def metadata_broker_ids(self, host: str, port: int) -> list[int]:
        response = self.call(host, port, 3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                    "include_topic_authorized_operations": False})
        return sorted(b.node_id for b in response.brokers)

    def create_scram_user(self, host: str, port: int) -> None:
        """``alice`` with a SCRAM-SHA-512 credential, created as ``admin`` (AlterUserScramCredentials)."""
        import secrets

        from security.scram import ScramMechanism, salted_password

        salt, iterations = secrets.token_bytes(16), 8192
        salted = salted_password(ScramMechanism.SCRAM_SHA_512, self.passwords[self.SCRAM_USER], salt, iterations)
        response = self.call(host, port, 51, 0, {"deletions": [], "upsertions": [{
            "name": self.SCRAM_USER, "mechanism": int(ScramMechanism.SCRAM_SHA_512), "iterations": iterations, "salt": salt,
            "salted_password": salted}]}, timeout=15)
        errors = [r for r in response.results if r.error_code]
        if errors:
            raise RuntimeError(f"creating the SCRAM user {self.SCRAM_USER} failed: {errors[0].error_message}")

    def write_client_files(self, bootstrap: str) -> dict[str, str]:
        out = {}
        for user in ("admin", self.SCRAM_USER):
            path = os.path.join(os.path.dirname(self.dir), f"client-{user}.properties")
            with open(path, "w") as f:
                f.write(self.java_properties(bootstrap, user))
            os.chmod(path, 0o600)
            out[user] = path
        return out


def metadata_broker_ids(host: str, port: int, timeout: float = 2.0) -> list[int]:
    """The brokers a Metadata request (no topics) lists. The probe uses the standard library
    only, so that ``kbroker.cluster`` can run this module inside other projects' processes."""
    from kbroker.wire import metadata_broker_ids as probe

    return probe(host, port, timeout, client_id="devcluster")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.devcluster",
                                description="etcd and N brokers on loopback, one Kafka cluster.")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--data-dir", default="kbroker-cluster")
    p.add_argument("--base-port", type=int, default=9092,
                   help="first broker port (node i listens on base+i-1); 0 picks free ports")
    p.add_argument("--etcd-port", type=int, default=0, help="the first etcd member's client port (default: a free port)")
    p.add_argument("--etcd-members", type=int, default=None,
                   help=f"etcd members, one beside each node (default: one per node, at most {MAX_DEFAULT_MEMBERS}); "
                        "1 is a single point of failure, fine for a laptop")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker property for every node (repeatable)")
    p.add_argument("--security", action="store_true",
                   help="SASL_SSL for clients and between brokers, ACLs on, throwaway CA and users")
    args = p.parse_args(argv)
    if args.nodes < 1:
        p.error("--nodes must be at least 1")
    if args.etcd_members is not None and args.etcd_members < 1:
        p.error("--etcd-members must be at least 1")
    overrides = dict(o.split("=", 1) for o in args.override)
    cluster = DevCluster(args.data_dir, args.nodes, args.base_port, args.etcd_port, overrides,
                         security=args.security, etcd_members=args.etcd_members)
    stopping = False

    def on_signal(signum, _frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        cluster.start()
    except (RuntimeError, TimeoutError) as exc:
        print(f"devcluster: {exc}; logs in {cluster.data_dir}", file=sys.stderr)
        cluster.kill()
        return 1
    print(f"bootstrap.servers={cluster.bootstrap}", flush=True)
    print(json.dumps({"etcd": cluster.etcd_endpoints, "logs": cluster.data_dir,
                      "nodes": {n.node_id: n.address for n in cluster.nodes.values()}}), flush=True)
    if cluster.security is not None:
        files = cluster.security.write_client_files(cluster.bootstrap)
        for user in ("admin", SecureSetup.SCRAM_USER):
            print(f"# {user}, librdkafka (confluent-kafka, kcat):", flush=True)
            for k, v in cluster.security.client_config(cluster.bootstrap, user).items():
                print(f"{k}={v}", flush=True)
            print(f"# {user}, Java client and Kafka's tools (--command-config {files[user]}):", flush=True)
            print(cluster.security.java_properties(cluster.bootstrap, user), flush=True)
    try:
        while not stopping:
            for node in cluster.nodes.values():
                if node.proc is not None and node.proc.poll() is not None and not stopping:
                    print(f"devcluster: broker {node.node_id} exited with {node.proc.returncode}; "
                          f"see {node.log_path}", file=sys.stderr, flush=True)
                    node.proc = None
            time.sleep(0.2)
    finally:
        cluster.stop()
    print("devcluster: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
