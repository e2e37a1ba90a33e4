#!/usr/bin/env python3
"""Start a real 3-node Apache Kafka KRaft cluster (combined broker+controller) on loopback.

This module owns the multi-node Apache Kafka launcher: config, storage format, start,
readiness, per-node kill -9 / restart, and finding the active KRaft controller.  Each node
is a broker and a controller voter (static quorum, ``controller.quorum.voters`` naming all
nodes), with its own PLAINTEXT and CONTROLLER port on 127.0.0.1 and its own data dir.
``KafkaCluster(node_hosts=, command_prefixes=)`` put a node on another address and run its JVM
under a command prefix instead (``ip netns exec NS``: each node in its own network namespace,
as kbroker-verify's partition fault does; its listeners and the quorum voters use that address).

Usage from Python (run from the repo root)::

    from compat.kafka.kraft_cluster import kraft_cluster
    with kraft_cluster(nodes=3) as kc:
        kc.bootstrap                 # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
        kc.nodes[1].pid              # the JVM of node 1 (for /proc/PID/stat)
        kc.active_controller()       # LeaderId of the KRaft quorum (kafka-metadata-quorum)
        kc.nodes[2].kill9(); kc.nodes[2].start()

or from a shell (prints the bootstrap list, runs until Ctrl-C / SIGTERM)::

    python compat/kafka/kraft_cluster.py [--nodes 3] [--heap "-Xmx512M -Xms512M"] [--keep]

Every JVM gets ``--heap`` (default ``-Xmx512M -Xms512M``) and Kafka's own G1 flags.  Nodes
log at INFO to ``<workdir>/node-<id>/server.log``.  On exit every node is sent SIGTERM by
pid, then SIGKILL after ``stop_timeout``; the temp dir is removed unless ``keep=True``.
Only the standard library is used.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import hashlib
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `compat.kafka` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from compat.kafka.kraft import (  # noqa: E402
    DEFAULT_JVM_OPTS,
    KAFKA_RUN,
    _request,
    fetch_kafka,
    free_port,
    random_cluster_id,
    run_until_signal,
)

DEFAULT_CLUSTER_HEAP = "-Xmx512M -Xms512M"
HOST = "127.0.0.1"


def metadata_brokers(host: str, port: int, timeout: float = 2.0) -> list[int]:
    """Broker ids in a Metadata v1 answer (topics = empty list); raises OSError if down."""
    import socket

    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        body = _request(s, 3, 1, 1, struct.pack(">i", 0))
    pos = 0
    (n,) = struct.unpack_from(">i", body, pos)
    pos += 4
    ids = []
    for _ in range(n):
        (node_id,) = struct.unpack_from(">i", body, pos)
        pos += 4
        (hl,) = struct.unpack_from(">h", body, pos)
        pos += 2 + hl + 4
        (rl,) = struct.unpack_from(">h", body, pos)
        pos += 2 + max(rl, 0)
        ids.append(node_id)
    return ids


@dataclass
class KafkaNode:
    """One JVM of the cluster: a broker and a controller voter."""

    cluster: KafkaCluster
    node_id: int
    port: int
    controller_port: int
    internal_port: int = 0  # the INTERNAL listener, used only under an authorizer
    proc: subprocess.Popen | None = None
    host: str = HOST  # the address every listener of this node binds and advertises
    command_prefix: list[str] = field(default_factory=list)  # e.g. ["ip", "netns", "exec", NS]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def dir(self) -> Path:
        assert self.cluster.workdir is not None
        return self.cluster.workdir / f"node-{self.node_id}"

    @property
    def props_file(self) -> Path:
        return self.dir / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.dir / "server.log"

    def config(self) -> dict[str, str]:
        c = self.cluster
        rf = str(min(3, len(c.nodes)))
        cfg = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": c.voters,
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port},"
                                    f"CONTROLLER://{self.host}:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.dir / "data"),
            "num.partitions": "1",
            "default.replication.factor": rf,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "50",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": str(min(2, len(c.nodes))),
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": str(min(2, len(c.nodes))),
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
        }
        cfg.update(c.extra_config)
        if "authorizer.class.name" in cfg:
            cfg.update(_node_principal_config(cfg, self.port, self.controller_port, self.internal_port,
                                              host=self.host))
        return cfg

    def start(self, wait: bool = True, timeout: float | None = None) -> KafkaNode:
        """Start (or restart after kill9/stop) this node's JVM on its existing data dir."""
        assert not self.alive, f"node {self.node_id} is running"
        env = dict(os.environ)
        env.update(KAFKA_HEAP_OPTS=self.cluster.heap_opts, KAFKA_JVM_OPTS=self.cluster.jvm_opts,
                   KAFKA_LOG_LEVEL=self.cluster.log_level)
        env.update(self.cluster.extra_env())
        with open(self.log_file, "ab") as log:
            log.write(f"\n==== start {time.strftime('%H:%M:%S')} ====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [*self.command_prefix, str(KAFKA_RUN), "kafka.Kafka", str(self.props_file)],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if wait:
            self.wait_ready(timeout or self.cluster.start_timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        """Until this node answers Metadata and lists every node of the cluster."""
        want = set(self.cluster.nodes)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is None or self.proc.poll() is not None:
                rc = self.proc.returncode if self.proc else None
                raise RuntimeError(f"Kafka node {self.node_id} exited with {rc}; log tail:\n{self.log_tail()}")
            with contextlib.suppress(OSError, struct.error, ConnectionError):
                if want <= set(metadata_brokers(self.host, self.port)):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kafka node {self.node_id} not ready on {self.address} "
                                   f"within {timeout}s; log tail:\n{self.log_tail()}")
            time.sleep(0.2)

    def kill9(self) -> None:
        """SIGKILL the JVM by pid and reap it."""
        if self.alive:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM (controlled shutdown) by pid, SIGKILL if it has not exited in time."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout or self.cluster.stop_timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


def _node_principal_config(cfg: dict[str, str], port: int, controller_port: int,
                           internal_port: int, host: str = HOST) -> dict[str, str]:
    """Under an authorizer the nodes reach each other on CONTROLLER and INTERNAL listeners as the
    super user ``User:kafka-node`` (:func:`node_principal_builder`); clients keep PLAINTEXT as
    ``User:ANONYMOUS``, so their ACLs apply. Without it, StandardAuthorizer refuses the quorum's
    own requests (AuthorizerNotReady) unless ANONYMOUS is a super user, which bypasses ACLs."""
    supers = [s for s in cfg.get("super.users", "").split(";") if s]
    listeners = f"PLAINTEXT://{host}:{port},INTERNAL://{host}:{internal_port},CONTROLLER://{host}:{controller_port}"
    return {
        "listeners": listeners, "advertised.listeners": listeners,
        "inter.broker.listener.name": "INTERNAL",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "principal.builder.class": "NodePrincipalBuilder",
        "super.users": ";".join([*supers, "User:kafka-node"]),
    }


def node_principal_builder() -> Path:
    """Compile compat/kafka/NodePrincipalBuilder.java against Kafka's jars (cached by content)."""
    source = Path(__file__).with_name("NodePrincipalBuilder.java")
    out = Path.home() / ".cache" / "kbroker" / "node-principal-builder" / hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    if not (out / "NodePrincipalBuilder.class").exists():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-d", str(out), "-cp", f"{fetch_kafka()}/*", str(source)], check=True,
                       capture_output=True, timeout=300)
    return out


@dataclass
class KafkaCluster:
    """A running N-node KRaft Apache Kafka. Use via :func:`kraft_cluster`."""

    n_nodes: int = 3
    workdir: Path | None = None
    keep: bool = False
    extra_config: dict[str, str] = field(default_factory=dict)
    heap_opts: str = DEFAULT_CLUSTER_HEAP
    jvm_opts: str = DEFAULT_JVM_OPTS
    log_level: str = "INFO"
    start_timeout: float = 120.0
    stop_timeout: float = 30.0

    nodes: dict[int, KafkaNode] = field(default_factory=dict)
    cluster_id: str = ""
    _own_workdir: bool = False
    # per node id: the address it listens on (default 127.0.0.1) and a prefix for its JVM's
    # command (e.g. ``ip netns exec NS``), as tools.devcluster.DevCluster takes them
    node_hosts: dict[int, str] = field(default_factory=dict)
    command_prefixes: dict[int, list[str]] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes.values())

    @property
    def voters(self) -> str:
        return ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in self.nodes.values())

    @property
    def pids(self) -> dict[int, int | None]:
        return {i: n.pid for i, n in self.nodes.items()}

    def extra_env(self) -> dict[str, str]:
        """The principal builder's classpath when the nodes run under an authorizer."""
        if "authorizer.class.name" in self.extra_config:
            return {"KAFKA_EXTRA_CLASSPATH": str(node_principal_builder())}
        return {}

    def start(self) -> KafkaCluster:
        fetch_kafka()
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="kraft-cluster-"))
            self._own_workdir = True
        else:
            self.workdir = Path(self.workdir)
            self.workdir.mkdir(parents=True, exist_ok=True)
        used: set[int] = set()

        def port() -> int:
            while True:
                p = free_port()
                if p not in used:
                    used.add(p)
                    return p

        self.nodes = {i: KafkaNode(self, i, port(), port(), port(), host=self.node_hosts.get(i, HOST),
                                   command_prefix=list(self.command_prefixes.get(i, [])))
                      for i in range(1, self.n_nodes + 1)}
        self.cluster_id = random_cluster_id()
        for node in self.nodes.values():
            node.dir.mkdir(parents=True, exist_ok=True)
            node.props_file.write_text("".join(f"{k}={v}\n" for k, v in node.config().items()))
        # format every node with the same cluster id (static quorum: the voters are in the config)
        fmts = [subprocess.Popen(
            [str(KAFKA_RUN), "kafka-storage", "format", "-t", self.cluster_id, "-c", str(n.props_file)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **self.extra_env()})
            for n in self.nodes.values()]
        for node, f in zip(self.nodes.values(), fmts):
            out, _ = f.communicate(timeout=120)
            if f.returncode != 0:
                raise RuntimeError(f"kafka-storage format failed for node {node.node_id} "
                                   f"({f.returncode}):\n{out}")
        atexit.register(self.stop)
        try:
            for node in self.nodes.values():
                node.start(wait=False)
            deadline = time.monotonic() + self.start_timeout
            for node in self.nodes.values():
                node.wait_ready(max(deadline - time.monotonic(), 1.0))
        except BaseException:
            self.stop()
            raise
        return self

    def active_controller(self, timeout: float = 60.0) -> int:
        """LeaderId of the KRaft quorum, from `kafka-metadata-quorum describe --status`."""
        alive = [n for n in self.nodes.values() if n.alive]
        if not alive:
            raise RuntimeError("no live node")
        out = subprocess.run(
            [str(KAFKA_RUN), "org.apache.kafka.tools.MetadataQuorumCommand",
             "--bootstrap-server", ",".join(n.address for n in alive), "describe", "--status"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False,
        ).stdout
        m = re.search(r"^LeaderId:\s*(-?\d+)", out, re.M)
        if not m:
            raise RuntimeError(f"kafka-metadata-quorum gave no LeaderId:\n{out}")
        return int(m.group(1))

    def stop(self) -> None:
        """SIGTERM every node by pid (in parallel), SIGKILL stragglers; remove our temp dir."""
        for node in self.nodes.values():
            if node.alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.proc.pid, signal.SIGTERM)
        for node in self.nodes.values():
            node.stop()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if self._own_workdir and not self.keep and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def kraft_cluster(nodes: int = 3, **kwargs) -> Iterator[KafkaCluster]:
    """Context manager: start an N-node KRaft Kafka, yield it, stop it by pid at exit.

    Keyword args are :class:`KafkaCluster` fields, e.g. ``heap_opts=``, ``extra_config={...}``,
    ``keep=True`` (keep the temp dir with the logs and data).
    """
    kc = KafkaCluster(n_nodes=nodes, **kwargs)
    try:
        kc.start()
        yield kc
    finally:
        kc.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--heap", default=DEFAULT_CLUSTER_HEAP, help="KAFKA_HEAP_OPTS for every JVM")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs + data) on exit")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra config for every node, repeatable")
    args = ap.parse_args(argv)
    extra = dict(kv.split("=", 1) for kv in args.set)
    with kraft_cluster(nodes=args.nodes, heap_opts=args.heap, keep=args.keep, extra_config=extra) as kc:
        print(kc.bootstrap, flush=True)
        print(f"# pids {kc.pids}, workdir {kc.workdir}", file=sys.stderr, flush=True)
        run_until_signal(lambda: any(n.alive for n in kc.nodes.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
