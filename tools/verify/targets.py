"""What a verification run checks: a cluster it starts and breaks, or one it only connects to.

Owns the targets and their per-node fault primitives (kill -9, SIGSTOP/SIGCONT, SIGTERM,
restart, network cut; for the metadata store: the whole of etcd killed, one member killed,
paused or restarted, the Raft leader found; a whole node, broker and member, lost), each done by
pid (or by container for ``compose``), and which faults each target can do (``capabilities``):

- ``devcluster``: :class:`tools.devcluster.DevCluster` (three nodes, each a broker and an etcd
  member) with short failover timeouts; ``devcluster:netns`` (or ``devcluster`` when the run
  asks for the ``partition`` fault) puts each node, broker and member, in its own network
  namespace behind a bridge, as the partition tests do (:class:`Topology`; needs root and
  iproute2);
- ``kafka``: Apache Kafka 4.3.1, three combined KRaft nodes (``compat/kafka/kraft_cluster.py``),
  in namespaces the same way when the run asks for the ``partition`` fault (a cut node loses the
  controller quorum, the other brokers and the clients); a node's broker and controller are one
  process, so its ``machine`` fault is its ``kill9``, and it has no etcd faults;
- ``compose``: the docker-compose stack (``compose/stack.sh``), faults through ``docker``
  (services ``brokerN`` and ``etcdN``; no ``etcd-leader``: the leader is not asked for there);
- ``HOST:PORT,...``: an external cluster; no faults (only the proxy, which the runner owns).

Where it knowingly differs from Jepsen: Jepsen runs each node on its own machine and cuts
links with iptables; here the nodes share a host, so a partition is a bridge port set down
(the cut node, its broker and its etcd member, loses the other members, the other brokers and
the clients at once: Jepsen's ``isolated`` one-node partition, not a majority/minority split of
clients), and a pause is a signal to one process rather than to a whole machine (``machine``
kills a node's two processes together, but never pauses both). For ``compose`` a pause is
``docker pause`` (the cgroup freezer), because with ``init: true`` a SIGSTOP sent by
``docker kill -s STOP`` would only stop the container's init, not the broker.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import structlog

log = structlog.get_logger("kbroker.verify.targets")

REPO = Path(__file__).resolve().parents[2]

# Short lease and lag settings so failover happens in seconds (as tests/support/cluster.py).
DEVCLUSTER_DEFAULTS = {
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.backoff.ms": "100",
    "replica.fetch.wait.max.ms": "200",
    "leader.imbalance.check.interval.seconds": "2",
    "controlled.shutdown.timeout.ms": "10000",
}
KAFKA_DEFAULTS = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "4000",
    "transaction.state.log.num.partitions": "10",
    "offsets.topic.num.partitions": "10",
}
ALL_FAULTS = frozenset({"kill9", "pause", "term", "partition", "etcd", "proxy", "coordinator", "machine",
                        "etcd-member", "etcd-leader"})
# What any target of broker processes can do; ``machine`` is kill9 where a node is one process.
PROCESS_FAULTS = frozenset({"kill9", "pause", "term", "proxy", "coordinator", "machine"})
KAFKA_FAULTS = PROCESS_FAULTS  # plus partition when made with namespaces
COMPOSE_FAULTS = PROCESS_FAULTS | {"etcd-member"}
ETCD_REJOIN_S = 20.0  # how long a restarted, resumed or reconnected member may take to answer /health


def spec_capabilities(spec: str) -> frozenset[str] | None:
    """The faults a target spec can do when made for them (``partition`` included where it makes
    network namespaces), without making it: the matrix marks the others n/a. None: unknown."""
    return {"devcluster": ALL_FAULTS, "devcluster:netns": ALL_FAULTS, "kafka": KAFKA_FAULTS | {"partition"},
            "compose": COMPOSE_FAULTS}.get(spec.strip())


class TargetUnavailable(RuntimeError):
    """The target cannot be had on this machine; ``str`` is one line saying why."""


class Target:
    """The base: an external cluster with no faults. Subclasses own processes."""

    name = "external"
    capabilities: frozenset[str] = frozenset()

    def __init__(self, bootstrap: str = "") -> None:
        self.bootstrap = bootstrap
        self._addresses = [_split(a) for a in bootstrap.split(",") if a.strip()]

    # -- life cycle
    def start(self) -> None:
        """Idempotent; starts what this target owns."""

    def stop(self) -> None:
        """Stops everything it started, by pid; safe to call twice."""

    def __enter__(self) -> Target:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- nodes
    def node_ids(self) -> list[int]:
        return list(range(1, len(self._addresses) + 1))

    def broker_address(self, node_id: int) -> tuple[str, int]:
        return self._addresses[node_id - 1]

    @property
    def session_timeout_s(self) -> float:
        """How long a silent broker keeps its lease (a pause must last longer)."""
        return 10.0

    def is_up(self, node_id: int) -> bool:
        return _listening(*self.broker_address(node_id))

    def wait_healthy(self, timeout: float) -> bool:
        return _poll(lambda: all(self.is_up(n) for n in self.node_ids()), timeout)

    def logs(self) -> dict[str, str]:
        return {}

    def describe(self) -> dict:
        return {"target": self.name, "bootstrap": self.bootstrap, "capabilities": sorted(self.capabilities)}

    # -- faults: none here
    def _unsupported(self, what: str):
        raise NotImplementedError(f"target {self.name} cannot {what}")

    def kill9(self, node_id: int) -> dict:
        self._unsupported("kill -9 a broker")

    def restart(self, node_id: int) -> dict:
        self._unsupported("restart a broker")

    def pause(self, node_id: int) -> dict:
        self._unsupported("pause a broker")

    def resume(self, node_id: int) -> dict:
        self._unsupported("resume a broker")

    def terminate(self, node_id: int) -> dict:
        self._unsupported("terminate a broker")

    def partition(self, node_id: int) -> dict:
        self._unsupported("partition a broker")

    def heal(self, node_id: int) -> dict:
        self._unsupported("heal a partition")

    def kill_etcd(self) -> dict:
        self._unsupported("kill etcd")

    def restart_etcd(self) -> dict:
        self._unsupported("restart etcd")

    def kill_machine(self, node_id: int) -> dict:
        self._unsupported("kill a whole node")

    def restart_machine(self, node_id: int) -> dict:
        self._unsupported("restart a whole node")

    def etcd_member_ids(self) -> list[int]:
        return []

    def etcd_member_up(self, member_id: int) -> bool:
        return False

    def kill_etcd_member(self, member_id: int) -> dict:
        self._unsupported("kill -9 an etcd member")

    def pause_etcd_member(self, member_id: int) -> dict:
        self._unsupported("pause an etcd member")

    def resume_etcd_member(self, member_id: int) -> dict:
        self._unsupported("resume an etcd member")

    def restart_etcd_member(self, member_id: int) -> dict:
        self._unsupported("restart an etcd member")

    def etcd_leader(self, timeout: float = 10.0) -> int | None:
        self._unsupported("find etcd's leader")


# --------------------------------------------------------------------------- helpers
def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"invalid address {address!r}: expected host:port")
    return host.strip("[]"), int(port)


def _listening(host: str, port: int, timeout: float = 0.5) -> bool:
    import socket
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _poll(condition, timeout: float, interval: float = 0.2) -> bool:
    """Bounded polling: True as soon as ``condition()`` is true, False at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return True
        except Exception as exc:  # noqa: BLE001 - a node may be down while we poll
            log.debug("poll", error=str(exc))
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def _signal(proc: subprocess.Popen | None, sig: int) -> int | None:
    """Send ``sig`` to a live process by pid; returns the pid (None if it is not running)."""
    if proc is None or proc.poll() is not None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)
    return proc.pid


def _metadata_brokers(host: str, port: int, timeout: float = 2.0) -> list[int]:
    from tools.kafka_client import KafkaClient

    with KafkaClient(f"{host}:{port}", client_id="kbroker-verify", request_timeout=timeout) as client:
        return sorted(client.metadata([]).brokers)


# --------------------------------------------------------------------------- network namespaces
def netns_unavailable() -> str | None:
    """None when network namespaces can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    return None


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *args] if netns is None else ["ip", "netns", "exec", netns, "ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=10)


class Topology:
    """A bridge in the root namespace (the address the clients use) and, per node, a namespace
    whose veth peer is attached to the bridge. Cutting a node off sets its bridge-side link
    down: what runs in it (a broker, and on the devcluster its etcd member) reaches neither the
    other members nor the other brokers, and only a client inside its own namespace reaches
    it. Needs root and iproute2.

    Where dockerd runs, the FORWARD chain's policy is DROP and bridged frames pass through
    iptables (br_netfilter): the topology accepts its own bridge's traffic first, and takes
    that rule away with the bridge."""

    def __init__(self, nodes: int, subnet: int | None = None) -> None:
        self.tag = f"{os.getpid() % 10000:04d}"
        self.subnet = subnet if subnet is not None else 100 + os.getpid() % 100
        self.bridge = f"kbbr{self.tag}"
        self.host_ip = f"10.213.{self.subnet}.1"
        self.node_ids = list(range(1, nodes + 1))

    def netns(self, node_id: int) -> str:
        return f"kbns{self.tag}n{node_id}"

    def host_link(self, node_id: int) -> str:
        return f"kbv{self.tag}h{node_id}"

    def node_ip(self, node_id: int) -> str:
        return f"10.213.{self.subnet}.{10 + node_id}"

    def prefix(self, node_id: int) -> list[str]:
        return ["ip", "netns", "exec", self.netns(node_id)]

    def create(self) -> Topology:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.host_ip}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        self._forwarding("-I")
        for n in self.node_ids:
            ns, host, peer = self.netns(n), self.host_link(n), f"kbv{self.tag}n{n}"
            _ip("netns", "add", ns)
            _ip("link", "add", host, "type", "veth", "peer", "name", peer)
            _ip("link", "set", peer, "netns", ns)
            _ip("link", "set", host, "master", self.bridge, "up")
            _ip("addr", "add", f"{self.node_ip(n)}/24", "dev", peer, netns=ns)
            _ip("link", "set", peer, "up", netns=ns)
            _ip("link", "set", "lo", "up", netns=ns)
        return self

    def _forwarding(self, action: str) -> None:
        """Insert (-I) or delete (-D) the FORWARD rule that accepts this bridge's own traffic."""
        if shutil.which("iptables") is not None:
            subprocess.run(["iptables", action, "FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"],
                           capture_output=True, timeout=10)

    def cut(self, node_id: int) -> None:
        _ip("link", "set", self.host_link(node_id), "down")

    def heal(self, node_id: int) -> None:
        _ip("link", "set", self.host_link(node_id), "up")

    def destroy(self) -> None:
        for n in self.node_ids:
            subprocess.run(["ip", "netns", "del", self.netns(n)], capture_output=True, timeout=10)
            subprocess.run(["ip", "link", "del", self.host_link(n)], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=10)
        self._forwarding("-D")


# --------------------------------------------------------------------------- devcluster
class ProcessTarget(Target):
    """Brokers that are local processes this run started: faults by signal to their pids.

    Subclasses give ``_node(node_id)``, an object with ``proc`` (its Popen), ``alive``,
    ``kill9()``, ``stop(timeout)`` and ``start(wait=, timeout=)``, and keep ``paused``."""

    term_timeout_s = 40.0
    restart_timeout_s = 60.0

    def __init__(self, bootstrap: str = "") -> None:
        super().__init__(bootstrap)
        self.paused: set[int] = set()

    def _node(self, node_id: int):
        raise NotImplementedError

    def pid(self, node_id: int) -> int | None:
        node = self._node(node_id)
        return node.proc.pid if node.alive else None

    def kill9(self, node_id: int) -> dict:
        node = self._node(node_id)
        pid = self.pid(node_id)
        _signal(node.proc, signal.SIGCONT)  # a stopped process dies only once continued
        node.kill9()
        self.paused.discard(node_id)
        return {"node": node_id, "pid": pid, "signal": "KILL"}

    def terminate(self, node_id: int, timeout: float | None = None) -> dict:
        node = self._node(node_id)
        pid = self.pid(node_id)
        _signal(node.proc, signal.SIGCONT)
        self.paused.discard(node_id)
        node.stop(self.term_timeout_s if timeout is None else timeout)
        return {"node": node_id, "pid": pid, "signal": "TERM",
                "exit": node.proc.returncode if node.proc else None}

    def restart(self, node_id: int, timeout: float | None = None) -> dict:
        """Bring the node back (SIGCONT if paused, start it if it is down); waits until it listens."""
        node = self._node(node_id)
        if node.alive:
            self.resume(node_id)
            return {"node": node_id, "pid": node.proc.pid, "started": False}
        node.start(wait=True, timeout=self.restart_timeout_s if timeout is None else timeout)
        return {"node": node_id, "pid": node.proc.pid, "started": True}

    def pause(self, node_id: int) -> dict:
        pid = _signal(self._node(node_id).proc, signal.SIGSTOP)
        if pid is not None:
            self.paused.add(node_id)
        return {"node": node_id, "pid": pid, "signal": "STOP"}

    def resume(self, node_id: int) -> dict:
        pid = _signal(self._node(node_id).proc, signal.SIGCONT)
        self.paused.discard(node_id)
        return {"node": node_id, "pid": pid, "signal": "CONT"}


class NetnsNodes:
    """Nodes in network namespaces of a :class:`Topology` (when the target was made with
    ``netns``): the partition fault sets a node's bridge-side link down, cutting it off from
    every other process at once. Mixed into the process targets that can run that way."""

    cut_label = "everything"  # what a cut node loses, for the history
    topology: Topology | None = None
    cut: set[int]
    paused: set[int]

    def _create_topology(self, nodes: int) -> Topology:
        self.topology = Topology(nodes).create()
        return self.topology

    def _heal_cut_links(self) -> None:
        """Before a clean shutdown, so that a controlled shutdown can reach the others."""
        if self.topology is not None:
            for n in list(self.cut):
                with contextlib.suppress(Exception):
                    self.topology.heal(n)

    def _destroy_topology(self) -> None:
        self.cut.clear()
        if self.topology is not None:
            self.topology.destroy()
            self.topology = None

    def is_up(self, node_id: int) -> bool:
        """Running, not paused and not cut off."""
        return self._node(node_id).alive and node_id not in self.paused and node_id not in self.cut

    def partition(self, node_id: int) -> dict:
        if self.topology is None:
            self._unsupported(f"partition a node without network namespaces (use {self.name}:netns)")
        self.topology.cut(node_id)
        self.cut.add(node_id)
        return {"node": node_id, "link": self.topology.host_link(node_id), "cut": self.cut_label}

    def heal(self, node_id: int) -> dict:
        if self.topology is None:
            self._unsupported("heal a partition without network namespaces")
        self.topology.heal(node_id)
        self.cut.discard(node_id)
        return {"node": node_id, "link": self.topology.host_link(node_id)}


class DevClusterTarget(NetnsNodes, ProcessTarget):
    """Three kbroker nodes (``tools.devcluster``), each a broker and the etcd member beside it,
    optionally in namespaces (member i then runs in node i's: a cut node loses its member too).

    The etcd primitives work on one member (``etcd_members``, ids as the nodes'); a member is up
    when it runs, is not paused and not cut off, and etcd is up when every member is up and
    answers ``/health``."""

    cut_label = "etcd+brokers+clients"

    name = "devcluster"

    def __init__(self, work_dir: str, overrides: dict[str, str] | None = None, netns: bool = False,
                 nodes: int = 3) -> None:
        super().__init__("")
        from tools.devcluster import etcd_binary

        if etcd_binary() is None:
            raise TargetUnavailable("devcluster: etcd is not installed (Debian package etcd-server; "
                                    "`make tools` installs it)")
        if netns and (reason := netns_unavailable()):
            raise TargetUnavailable(f"devcluster:netns: {reason}")
        self.work_dir = os.path.abspath(work_dir)
        self.overrides = {**DEVCLUSTER_DEFAULTS, **(overrides or {})}
        self.netns = netns
        self.n_nodes = nodes
        self.capabilities = frozenset(ALL_FAULTS if netns else ALL_FAULTS - {"partition"})
        self.name = "devcluster:netns" if netns else "devcluster"
        self.cluster = None
        self.cut: set[int] = set()
        self.etcd_paused: set[int] = set()

    @property
    def session_timeout_s(self) -> float:
        return int(self.overrides.get("broker.session.timeout.ms", "9000")) / 1000

    def start(self) -> None:
        if self.cluster is not None:
            return
        from tools.devcluster import DevCluster

        kwargs = {}
        if self.netns:
            t = self._create_topology(self.n_nodes)
            kwargs = dict(base_port=9092, etcd_host=t.host_ip,
                          node_hosts={n: t.node_ip(n) for n in t.node_ids},
                          command_prefixes={n: t.prefix(n) for n in t.node_ids})
        data_dir = os.path.join(self.work_dir, "devcluster")
        shutil.rmtree(data_dir, ignore_errors=True)  # a fresh cluster, etcd included
        cluster = DevCluster(data_dir, self.n_nodes,
                             overrides=self.overrides, **kwargs)
        self.cluster = cluster
        try:
            cluster.start()
        except BaseException:
            self.stop()
            raise
        self.bootstrap = cluster.bootstrap
        log.info("devcluster started", bootstrap=self.bootstrap, netns=self.netns,
                 pids={n: node.proc.pid for n, node in cluster.nodes.items()},
                 etcd_pids={m.name: m.proc.pid for m in cluster.etcd_members.values()})

    def stop(self) -> None:
        cluster, self.cluster = self.cluster, None
        if cluster is not None:
            for node in cluster.nodes.values():
                node.resume()
            self._heal_cut_links()
            try:
                cluster.stop()  # resumes paused members itself
            finally:
                cluster.kill()
        self.paused.clear()
        self.etcd_paused.clear()
        self._destroy_topology()

    def _cluster(self):
        if self.cluster is None:
            raise RuntimeError("devcluster target is not started")
        return self.cluster

    def _node(self, node_id: int):
        return self._cluster().node(node_id)

    def node_ids(self) -> list[int]:
        return list(range(1, self.n_nodes + 1))

    def broker_address(self, node_id: int) -> tuple[str, int]:
        node = self._node(node_id)
        return node.host, node.port

    # -- the network: a node's member is in its namespace, and is cut with it
    def _member_beside(self, node_id: int):
        return self.cluster.etcd_members.get(node_id) if self.cluster is not None else None

    def partition(self, node_id: int) -> dict:
        done = super().partition(node_id)
        member = self._member_beside(node_id)
        return {**done, "etcd_member": member.name} if member is not None else done

    def heal(self, node_id: int) -> dict:
        """The link up again; waits (bounded) until the node's member has rejoined (answers
        ``/health``), so that the next fault does not find the store a member short."""
        done = super().heal(node_id)
        member = self._member_beside(node_id)
        if member is None:
            return done
        return {**done, "etcd_member": member.name,
                "etcd_healthy": member.alive and _poll(member.health, ETCD_REJOIN_S)}

    # -- the whole store
    def kill_etcd(self) -> dict:
        """Every etcd member killed: the metadata store is down."""
        members = self.cluster.etcd_members.values() if self.cluster else ()
        pids = {m.name: m.proc.pid for m in members if m.alive}
        for member in members:
            member.resume()
            member.kill9()
        self.etcd_paused.clear()
        return {"etcd_pids": pids, "signal": "KILL"}

    def restart_etcd(self) -> dict:
        cluster = self._cluster()
        for member_id in list(self.etcd_paused):
            self.resume_etcd_member(member_id)
        down = [m.name for m in cluster.etcd_members.values() if not m.alive]
        if down:
            cluster.start_etcd()
        return {"etcd_pids": {m.name: m.proc.pid for m in cluster.etcd_members.values() if m.alive},
                "started": down}

    def etcd_up(self) -> bool:
        """Every member running, neither paused nor cut off, and answering ``/health``."""
        if self.cluster is None:
            return False
        ids = self.etcd_member_ids()
        return all(self.etcd_member_up(i) for i in ids) and all(self.cluster.etcd_members[i].health() for i in ids)

    # -- one member
    def _member(self, member_id: int):
        return self._cluster().etcd_members[member_id]

    def etcd_member_ids(self) -> list[int]:
        return sorted(self.cluster.etcd_members) if self.cluster is not None else []

    def etcd_member_up(self, member_id: int) -> bool:
        cut = self.topology is not None and member_id in self.cut  # member i is in node i's namespace
        return self._member(member_id).alive and member_id not in self.etcd_paused and not cut

    def _member_entry(self, member_id: int) -> dict:
        member = self._member(member_id)
        return {"member": member_id, "etcd_member": member.name, "pid": member.proc.pid if member.alive else None}

    def kill_etcd_member(self, member_id: int) -> dict:
        member = self._member(member_id)
        done = self._member_entry(member_id)
        _signal(member.proc, signal.SIGCONT)  # a stopped process dies only once continued
        member.kill9()
        self.etcd_paused.discard(member_id)
        return {**done, "signal": "KILL"}

    def pause_etcd_member(self, member_id: int) -> dict:
        pid = _signal(self._member(member_id).proc, signal.SIGSTOP)
        if pid is not None:
            self.etcd_paused.add(member_id)
        return {**self._member_entry(member_id), "signal": "STOP"}

    def resume_etcd_member(self, member_id: int) -> dict:
        member = self._member(member_id)
        _signal(member.proc, signal.SIGCONT)
        self.etcd_paused.discard(member_id)
        return {**self._member_entry(member_id), "signal": "CONT",
                "healthy": member.alive and _poll(member.health, ETCD_REJOIN_S)}

    def restart_etcd_member(self, member_id: int, timeout: float = ETCD_REJOIN_S) -> dict:
        """Bring the member back (SIGCONT if paused, start it on its data if it is down); waits
        until it answers ``/health`` (it has a leader again), at most ``timeout``."""
        member = self._member(member_id)
        if member.alive:
            return {**self.resume_etcd_member(member_id), "started": False}
        member.start(wait=True, timeout=timeout)
        return {**self._member_entry(member_id), "started": True, "healthy": _poll(member.health, timeout)}

    def etcd_leader(self, timeout: float = 10.0) -> int | None:
        """The id of the member leading etcd's Raft now (None: no member named one)."""
        cluster = self._cluster()
        up = [i for i in self.etcd_member_ids() if self.etcd_member_up(i)]
        if len(up) == len(cluster.etcd_members):
            return cluster.etcd_leader(timeout)
        # DevCluster.etcd_leader asks every running member, a paused or cut one included, which
        # would hold the answer up for a call timeout: ask the members that are up.
        from tools.etcd_admin import leader

        found = leader(",".join(cluster.etcd_members[i].address for i in up), None, timeout) if up else None
        return int(found.name.rsplit("-", 1)[1]) if found is not None and found.name else None

    # -- a whole node
    def kill_machine(self, node_id: int) -> dict:
        """kill -9 of node ``node_id``'s broker and its etcd member at once: both signalled
        before either is waited for, as a machine's power cut."""
        node, member = self._node(node_id), self._member_beside(node_id)
        pid = self.pid(node_id)
        etcd_pid = member.proc.pid if member is not None and member.alive else None
        procs = [node.proc, member.proc if member is not None else None]
        for proc in procs:
            _signal(proc, signal.SIGCONT)  # a stopped process dies only once continued
        for proc in procs:
            _signal(proc, signal.SIGKILL)
        node.kill9()  # reaps it
        self.paused.discard(node_id)
        done = {"node": node_id, "pid": pid, "signal": "KILL"}
        if member is not None:
            member.kill9()
            self.etcd_paused.discard(node_id)
            done.update(etcd_member=member.name, etcd_pid=etcd_pid)
        return done

    def restart_machine(self, node_id: int) -> dict:
        """The node back: its member first (the broker's own member is among the ones it may
        use), then the broker, waiting until it listens."""
        out = {}
        if self._member_beside(node_id) is not None:
            m = self.restart_etcd_member(node_id)
            out = {"etcd_member": m["etcd_member"], "etcd_pid": m["pid"], "etcd_started": m["started"],
                   "etcd_healthy": m["healthy"]}
        return {**self.restart(node_id), **out}

    def wait_healthy(self, timeout: float) -> bool:
        """Every etcd member up and healthy, every broker alive and unpaused, and every
        broker's Metadata lists all."""
        if self.cluster is None:
            return False
        want = set(self.node_ids())

        def healthy() -> bool:
            if not self.etcd_up():
                return False
            if not all(self.is_up(n) for n in want):
                return False
            return all(want <= set(_metadata_brokers(*self.broker_address(n))) for n in want)
        return _poll(healthy, timeout)

    def logs(self) -> dict[str, str]:
        base = os.path.join(self.work_dir, "devcluster")
        out = {f"broker-{n}": os.path.join(base, f"broker-{n}.log") for n in self.node_ids()}
        if self.cluster is not None:
            out.update({m.name: m.log_path for m in self.cluster.etcd_members.values()})
        return out


# --------------------------------------------------------------------------- Apache Kafka
def _import_kraft_cluster():
    """``compat/`` is not an installed package: import it from the source tree."""
    try:
        from compat.kafka import kraft_cluster
    except ImportError:
        if not (REPO / "compat" / "kafka" / "kraft_cluster.py").exists():
            raise TargetUnavailable("kafka: compat/kafka is not available (run from the kbroker "
                                    "source tree)") from None
        sys.path.insert(0, str(REPO))
        from compat.kafka import kraft_cluster
    return kraft_cluster


class KafkaTarget(NetnsNodes, ProcessTarget):
    """Apache Kafka 4.3.1, three combined broker+controller KRaft nodes, faults by pid.

    With ``netns=True`` (``make_target`` sets it when the run asks for the ``partition`` fault)
    each node runs in its own network namespace of a :class:`Topology`, as ``devcluster:netns``
    does, its listeners and the quorum voters on the namespace's address; the clients reach the
    nodes over the bridge. A partition sets the node's bridge-side link down: it loses the
    controller quorum, the other brokers and the clients at once."""

    name = "kafka"
    capabilities = KAFKA_FAULTS
    cut_label = "quorum+brokers+clients"
    term_timeout_s = 60.0
    restart_timeout_s = 120.0

    def __init__(self, work_dir: str, overrides: dict[str, str] | None = None, nodes: int = 3,
                 netns: bool = False) -> None:
        super().__init__("")
        if shutil.which("java") is None:
            raise TargetUnavailable("kafka: java is not installed (openjdk-17-jre-headless)")
        if netns and (reason := netns_unavailable()):
            raise TargetUnavailable(f"kafka:netns: {reason}")
        self._kc_module = _import_kraft_cluster()
        self.work_dir = os.path.abspath(work_dir)
        self.overrides = {**KAFKA_DEFAULTS, **(overrides or {})}
        self.n_nodes = nodes
        self.netns = netns
        self.capabilities = frozenset(KAFKA_FAULTS | {"partition"} if netns else KAFKA_FAULTS)
        self.name = "kafka:netns" if netns else "kafka"
        self.cluster = None
        self.cut: set[int] = set()

    @property
    def session_timeout_s(self) -> float:
        return int(self.overrides.get("broker.session.timeout.ms", "9000")) / 1000

    def start(self) -> None:
        if self.cluster is not None:
            return
        workdir = Path(self.work_dir) / "kafka"
        shutil.rmtree(workdir, ignore_errors=True)  # a fresh cluster: kafka-storage format refuses old data
        try:
            kwargs = {}
            if self.netns:
                t = self._create_topology(self.n_nodes)
                kwargs = dict(node_hosts={n: t.node_ip(n) for n in t.node_ids},
                              command_prefixes={n: t.prefix(n) for n in t.node_ids})
            kc = self._kc_module.KafkaCluster(n_nodes=self.n_nodes, workdir=workdir,
                                              keep=True, extra_config=dict(self.overrides), **kwargs)
            self.cluster = kc
            kc.start()  # stops its nodes itself if start-up fails
        except BaseException:
            self.stop()  # and takes the namespaces away
            raise
        self.bootstrap = kc.bootstrap
        log.info("kafka started", bootstrap=self.bootstrap, netns=self.netns, pids=kc.pids)

    def stop(self) -> None:
        kc, self.cluster = self.cluster, None
        if kc is not None:
            for node in kc.nodes.values():
                _signal(node.proc, signal.SIGCONT)
            self._heal_cut_links()
            kc.stop()
        self.paused.clear()
        self._destroy_topology()

    def _node(self, node_id: int):
        if self.cluster is None:
            raise RuntimeError("kafka target is not started")
        return self.cluster.nodes[node_id]

    def node_ids(self) -> list[int]:
        return list(range(1, self.n_nodes + 1))

    def broker_address(self, node_id: int) -> tuple[str, int]:
        return _split(self._node(node_id).address)

    def kill_machine(self, node_id: int) -> dict:
        """A combined node's broker and controller are one process: its kill -9."""
        return {**self.kill9(node_id), "machine": "broker+controller (one process)"}

    def restart_machine(self, node_id: int) -> dict:
        return self.restart(node_id)

    def wait_healthy(self, timeout: float) -> bool:
        if self.cluster is None:
            return False
        want = set(self.node_ids())
        return _poll(lambda: all(self.is_up(n) for n in want)
                     and all(want <= set(_metadata_brokers(*self.broker_address(n))) for n in want), timeout)

    def logs(self) -> dict[str, str]:
        base = Path(self.work_dir) / "kafka"
        return {f"node-{n}": str(base / f"node-{n}" / "server.log") for n in self.node_ids()}


# --------------------------------------------------------------------------- docker compose
def _docker(*args: str, timeout: float = 60.0, check: bool = True) -> str:
    out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {(out.stderr or out.stdout).strip()}")
    return out.stdout.strip()


def docker_unavailable() -> str | None:
    if shutil.which("docker") is None:
        return "docker is not installed"
    try:
        out = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                             text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker info failed ({exc})"
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        return f"no docker daemon answers ({lines[-1] if lines else 'docker info failed'})"
    return None


COMPOSE_PROPERTIES = REPO / "compose" / "broker.properties"
COMPOSE_SERVER_PROPERTIES = "/etc/kbroker/server.properties"  # where the Dockerfile puts it


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def _session_timeout_ms(properties: str, default: int = 9000) -> int:
    """``broker.session.timeout.ms`` of a server.properties text (the broker's default if unset)."""
    value = default
    for line in properties.splitlines():
        key, sep, raw = line.strip().partition("=")
        if sep and not key.startswith(("#", "!")) and key.strip() == "broker.session.timeout.ms":
            with contextlib.suppress(ValueError):
                value = int(raw.strip())
    return value


class ComposeTarget(Target):
    """The docker-compose stack: three nodes, each a broker and an etcd member container, faults via ``docker``.

    ``start()`` runs ``compose/stack.sh up`` unless the stack's brokers already run, and reads
    the brokers' ``broker.session.timeout.ms`` (a pause is held past it); ``stop()`` writes the
    containers' ``docker logs`` under ``<work_dir>/compose/`` and takes the stack down only if
    this target brought it up."""

    name = "compose"
    capabilities = COMPOSE_FAULTS

    def __init__(self, work_dir: str, overrides: dict[str, str] | None = None) -> None:
        reason = docker_unavailable()
        if reason:
            raise TargetUnavailable(f"compose: {reason}; start one with `compose/stack.sh engine` "
                                    "(root) or use another target")
        self.work_dir = os.path.abspath(work_dir)
        self.project = os.environ.get("COMPOSE_PROJECT_NAME", "kbroker")
        ports = [os.environ.get(f"KBROKER_PORT{n}", str(19091 + n)) for n in (1, 2, 3)]
        super().__init__(",".join(f"127.0.0.1:{p}" for p in ports))
        if overrides:
            log.warning("compose target ignores broker overrides (set them in the image's "
                        "server.properties)", overrides=sorted(overrides))
        self.started_stack = False
        self.paused: set[int] = set()
        self.etcd_paused: set[int] = set()
        self._session_timeout_s: float | None = None

    @property
    def session_timeout_s(self) -> float:
        """``broker.session.timeout.ms`` of the running brokers' server.properties (read at
        ``start()``), else of compose/broker.properties, else the broker's default (9 s)."""
        if self._session_timeout_s is None:
            self._session_timeout_s = _session_timeout_ms(_read_text(COMPOSE_PROPERTIES)) / 1000
        return self._session_timeout_s

    def _read_session_timeout(self) -> None:
        try:
            text = _docker("exec", self.container(1, running_only=True), "cat", COMPOSE_SERVER_PROPERTIES,
                           timeout=15)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            log.warning("compose: cannot read the brokers' server.properties; using the source tree's",
                        error=str(exc))
            text = _read_text(COMPOSE_PROPERTIES)
        self._session_timeout_s = _session_timeout_ms(text) / 1000

    def container(self, node_id: int, running_only: bool = False, service: str = "broker") -> str:
        """The container of service ``brokerN`` (or ``etcdN`` with ``service="etcd"``)."""
        args = ["ps", "-q", "--filter", f"label=com.docker.compose.project={self.project}",
                "--filter", f"label=com.docker.compose.service={service}{node_id}"]
        if not running_only:
            args.insert(1, "-a")
        ids = _docker(*args).split()
        if not ids:
            raise RuntimeError(f"compose: no container for {service}{node_id} in project {self.project}")
        return ids[0]

    def start(self) -> None:
        if not all(self._running(n) for n in self.node_ids()):
            out = subprocess.run([str(REPO / "compose" / "stack.sh"), "up"], capture_output=True, text=True,
                                 timeout=1800)
            if out.returncode != 0:
                raise TargetUnavailable(f"compose: stack.sh up failed ({out.returncode}): "
                                        f"{(out.stderr or out.stdout).strip().splitlines()[-1:]}")
            self.started_stack = True
        self._read_session_timeout()
        log.info("compose stack", project=self.project, bootstrap=self.bootstrap,
                 started=self.started_stack, session_timeout_s=self.session_timeout_s)

    def stop(self) -> None:
        for n in list(self.paused):
            with contextlib.suppress(Exception):
                self.resume(n)
        for n in list(self.etcd_paused):
            with contextlib.suppress(Exception):
                self.resume_etcd_member(n)
        with contextlib.suppress(Exception):
            self.logs()  # the containers' logs, before a down removes them
        if self.started_stack:
            subprocess.run([str(REPO / "compose" / "stack.sh"), "down"], capture_output=True, timeout=300)
            self.started_stack = False

    def _running(self, node_id: int, service: str = "broker") -> bool:
        try:
            return bool(_docker("ps", "-q", "--filter", f"label=com.docker.compose.project={self.project}",
                                "--filter", f"label=com.docker.compose.service={service}{node_id}"))
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            return False

    def is_up(self, node_id: int) -> bool:
        return self._running(node_id) and node_id not in self.paused

    def kill9(self, node_id: int) -> dict:
        cid = self.container(node_id)
        if node_id in self.paused:
            self.resume(node_id)
        _docker("kill", "-s", "KILL", cid, check=False)
        return {"node": node_id, "container": cid, "signal": "KILL"}

    def terminate(self, node_id: int, timeout: float = 60.0) -> dict:
        cid = self.container(node_id)
        if node_id in self.paused:
            self.resume(node_id)
        _docker("kill", "-s", "TERM", cid, check=False)
        exited = _poll(lambda: not self._running(node_id), timeout)
        if not exited:
            _docker("kill", "-s", "KILL", cid, check=False)
        return {"node": node_id, "container": cid, "signal": "TERM", "exited": exited}

    def restart(self, node_id: int, timeout: float = 60.0) -> dict:
        cid = self.container(node_id)
        if node_id in self.paused:
            self.resume(node_id)
            return {"node": node_id, "container": cid, "started": False}
        if not self._running(node_id):
            _docker("start", cid)
        # The published port is docker-proxy's, which accepts as soon as the container runs:
        # the broker is back when it answers a Metadata request.
        listening = _poll(lambda: bool(_metadata_brokers(*self.broker_address(node_id))), timeout)
        return {"node": node_id, "container": cid, "started": True, "listening": listening}

    def pause(self, node_id: int) -> dict:
        cid = self.container(node_id)
        _docker("pause", cid)
        self.paused.add(node_id)
        return {"node": node_id, "container": cid, "signal": "freeze"}

    def resume(self, node_id: int) -> dict:
        cid = self.container(node_id)
        _docker("unpause", cid, check=False)
        self.paused.discard(node_id)
        return {"node": node_id, "container": cid, "signal": "thaw"}

    # -- etcd members (service etcdN, node N's): docker kill, pause and start, as for the brokers
    def etcd_member_ids(self) -> list[int]:
        return self.node_ids()

    def etcd_member_up(self, member_id: int) -> bool:
        return self._running(member_id, "etcd") and member_id not in self.etcd_paused

    def _etcd_healthy(self, member_id: int) -> bool:
        """Its compose health check passes (/health answers: it has a leader)."""
        cid = self.container(member_id, service="etcd")
        return _docker("inspect", "-f", "{{.State.Health.Status}}", cid, check=False) == "healthy"

    def kill_etcd_member(self, member_id: int) -> dict:
        cid = self.container(member_id, service="etcd")
        if member_id in self.etcd_paused:
            self.resume_etcd_member(member_id)  # docker refuses to kill a paused container
        _docker("kill", "-s", "KILL", cid, check=False)
        return {"member": member_id, "etcd_member": f"etcd{member_id}", "container": cid, "signal": "KILL"}

    def pause_etcd_member(self, member_id: int) -> dict:
        cid = self.container(member_id, service="etcd")
        _docker("pause", cid)
        self.etcd_paused.add(member_id)
        return {"member": member_id, "etcd_member": f"etcd{member_id}", "container": cid, "signal": "freeze"}

    def resume_etcd_member(self, member_id: int) -> dict:
        cid = self.container(member_id, service="etcd")
        _docker("unpause", cid, check=False)
        self.etcd_paused.discard(member_id)
        return {"member": member_id, "etcd_member": f"etcd{member_id}", "container": cid, "signal": "thaw",
                "healthy": _poll(lambda: self._etcd_healthy(member_id), ETCD_REJOIN_S, interval=1.0)}

    def restart_etcd_member(self, member_id: int, timeout: float = ETCD_REJOIN_S + 10) -> dict:
        cid = self.container(member_id, service="etcd")
        if member_id in self.etcd_paused:
            return {**self.resume_etcd_member(member_id), "started": False}
        if not self._running(member_id, "etcd"):
            _docker("start", cid)
        # the health check runs every 2 s: "healthy" once the member answers /health again
        healthy = _poll(lambda: self._etcd_healthy(member_id), timeout, interval=1.0)
        return {"member": member_id, "etcd_member": f"etcd{member_id}", "container": cid, "started": True,
                "healthy": healthy}

    def kill_machine(self, node_id: int) -> dict:
        """``brokerN`` and ``etcdN`` killed -9, one right after the other."""
        member = self.kill_etcd_member(node_id)
        return {**self.kill9(node_id), "etcd_member": member["etcd_member"], "etcd_container": member["container"]}

    def restart_machine(self, node_id: int) -> dict:
        member = self.restart_etcd_member(node_id)
        return {**self.restart(node_id), "etcd_member": member["etcd_member"], "etcd_healthy": member["healthy"]}

    def wait_healthy(self, timeout: float) -> bool:
        want = set(self.node_ids())
        return _poll(lambda: all(self.etcd_member_up(n) for n in want) and all(self.is_up(n) for n in want)
                     and all(want <= set(_metadata_brokers(*self.broker_address(n))) for n in want), timeout)

    def logs(self) -> dict[str, str]:
        """``docker logs`` of each container (every incarnation: a killed container is
        started again, not made anew) written to ``<work_dir>/compose/<service>.log``."""
        base = Path(self.work_dir) / "compose"
        base.mkdir(parents=True, exist_ok=True)
        out = {}
        for service in [*(f"etcd{n}" for n in self.node_ids()), *(f"broker{n}" for n in self.node_ids())]:
            ids = _docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={self.project}",
                          "--filter", f"label=com.docker.compose.service={service}", check=False).split()
            if not ids:
                continue
            path = base / f"{service}.log"
            with open(path, "w", encoding="utf-8") as f:
                subprocess.run(["docker", "logs", "--timestamps", ids[0]], stdout=f, stderr=subprocess.STDOUT,
                               timeout=60)
            out[service] = str(path)
        return out


# --------------------------------------------------------------------------- factory
class ExternalTarget(Target):
    """A cluster someone else runs: no faults, only the proxy."""

    name = "external"
    capabilities = frozenset({"proxy"})


def make_target(spec: str, work_dir: str, overrides: dict[str, str] | None = None, *,
                faults=()) -> Target:
    """``devcluster`` | ``devcluster:netns`` | ``kafka`` | ``compose`` | ``HOST:PORT,...``.

    ``overrides`` are broker properties (devcluster, kafka). ``faults`` (the nemesis names of
    the run): ``partition`` among them makes a ``devcluster`` use network namespaces. Raises
    :class:`TargetUnavailable` (one line) where the target cannot run here, ValueError for an
    unknown spec."""
    spec = spec.strip()
    if spec in ("devcluster", "devcluster:netns"):
        netns = spec.endswith(":netns") or "partition" in set(faults)
        return DevClusterTarget(work_dir, overrides, netns=netns)
    if spec == "kafka":
        return KafkaTarget(work_dir, overrides, netns="partition" in set(faults))
    if spec == "compose":
        return ComposeTarget(work_dir, overrides)
    if ":" in spec:
        try:
            target = ExternalTarget(spec)
        except ValueError as exc:
            raise ValueError(f"target {spec!r}: {exc}") from None
        if overrides:
            log.warning("external target ignores broker overrides", overrides=sorted(overrides))
        return target
    raise ValueError(f"unknown target {spec!r}: expected devcluster, devcluster:netns, kafka, compose "
                     "or HOST:PORT[,HOST:PORT...]")
