"""The nemesis: faults a verification run injects, each started, then undone by ``stop()``.

Owns which node a fault hits and the undoing of it; the per-node primitives are the
target's (:mod:`.targets`). Every ``start``/``stop`` returns a dict for the history (the
runner records it as a ``nemesis`` operation's value): the phase, the node, the pid or
container, what was done.

Faults: ``kill9``, ``pause``, ``term``, ``partition`` (a node's link cut: on the devcluster
its broker and the etcd member beside it, the history naming both), ``etcd`` (every etcd member
killed: the metadata store down), ``coordinator`` (kill -9 of a transaction or group
coordinator), ``coordinator-pause`` (SIGSTOP of one), ``proxy`` (delay, duplicate or reorder
through :mod:`.proxy`) and ``proxy-delay``, ``proxy-duplicate``, ``proxy-reorder``, and for a
node and the metadata store's members:

- ``machine``: a whole node lost, its broker and its etcd member killed -9 together; ``stop()``
  restarts the member, then the broker (waiting until it listens). On Apache Kafka, whose
  combined node is one process, it is ``kill9`` (its ``restart`` as the stop).
- ``etcd-member``: one etcd member killed -9 or paused, which chosen at random per start and
  recorded as ``action``; ``stop()`` restarts it on its data, or resumes it.
- ``etcd-leader``: the same on the member that leads etcd's Raft when the fault starts (the
  history has ``leader``; a random member, said so, if no member names a leader in time).

Killing a client is the runner's (it owns them).

Where it knowingly differs from Jepsen: one fault instance hits one node at a time (Jepsen's
``:one`` targets; no majority/minority partitions or clock skew), and a pause always lasts
past the target's session timeout: ``stop()`` waits out the rest before SIGCONT, so the
broker loses its lease, which is the interesting case. A paused etcd member is held as long
(past etcd's 1 s election timeout too, so a paused leader is deposed): a broker whose store
client waits on it must move to another member before its own lease lapses. Jepsen's etcd
tests kill and pause members as these do; ``machine`` is Jepsen's kill of a whole node, here
where a node runs two processes.
"""

from __future__ import annotations

import random
import time
from typing import Any

import structlog

from .targets import Target

log = structlog.get_logger("kbroker.verify.nemesis")

TXN_KEY, GROUP_KEY = "txn", "group"


class Nemesis:
    """One fault. ``start`` injects it (no-op if already active), ``stop`` undoes it."""

    name = "nemesis"
    capability = ""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.active: dict | None = None  # what start() did, until stop()
        self.started_at = 0.0

    def start(self, rng: random.Random) -> dict:
        if self.active is not None:
            return {"phase": "start", "skipped": "already active", **self.active}
        done = self._start(rng)
        self.active = done
        self.started_at = time.monotonic()
        log.debug("nemesis start", fault=self.name, **_loggable(done))
        return {"phase": "start", **done}

    def stop(self) -> dict:
        if self.active is None:
            return {"phase": "stop", "skipped": "not active"}
        done = self._stop(self.active)
        self.active = None
        log.debug("nemesis stop", fault=self.name, **_loggable(done))
        return {"phase": "stop", **done}

    def _start(self, rng: random.Random) -> dict:
        raise NotImplementedError

    def _stop(self, active: dict) -> dict:
        raise NotImplementedError

    def pick_node(self, rng: random.Random) -> int:
        """A random broker that is up (else any broker)."""
        nodes = self.target.node_ids()
        up = [n for n in nodes if _safe(lambda n=n: self.target.is_up(n))]
        return rng.choice(up or nodes)


def _safe(fn) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001
        return False


def _loggable(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in ("phase", "event")}


class Kill9(Nemesis):
    name, capability = "kill9", "kill9"

    def _start(self, rng):
        return self.target.kill9(self.pick_node(rng))

    def _stop(self, active):
        return self.target.restart(active["node"])


class Term(Nemesis):
    name, capability = "term", "term"

    def _start(self, rng):
        return self.target.terminate(self.pick_node(rng))

    def _stop(self, active):
        return self.target.restart(active["node"])


class Pause(Nemesis):
    """SIGSTOP a broker; ``stop()`` sends SIGCONT no sooner than the session timeout plus
    ``margin_s`` after the pause began."""

    name, capability = "pause", "pause"
    margin_s = 1.0

    def hold_s(self) -> float:
        return self.target.session_timeout_s + self.margin_s

    def _start(self, rng):
        return {**self.target.pause(self.pick_node(rng)), "hold_s": self.hold_s()}

    def _stop(self, active):
        remaining = self.started_at + active["hold_s"] - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)  # the pause must outlast the broker's lease
        return {**self.target.resume(active["node"]), "paused_s": round(time.monotonic() - self.started_at, 3)}


class Partition(Nemesis):
    name, capability = "partition", "partition"

    def _start(self, rng):
        return self.target.partition(self.pick_node(rng))

    def _stop(self, active):
        return self.target.heal(active["node"])


class Etcd(Nemesis):
    name, capability = "etcd", "etcd"

    def _start(self, rng):
        return self.target.kill_etcd()

    def _stop(self, active):
        return self.target.restart_etcd()


class Machine(Nemesis):
    """A whole node lost: the target's ``kill_machine`` (broker and etcd member killed -9
    together); ``stop()`` is its ``restart_machine`` (member first, then the broker)."""

    name, capability = "machine", "machine"

    def _start(self, rng):
        return self.target.kill_machine(self.pick_node(rng))

    def _stop(self, active):
        return self.target.restart_machine(active["node"])


class EtcdMember(Nemesis):
    """kill -9 or SIGSTOP (one of ``actions``, at random) of one etcd member that is up; a pause
    is held past the session timeout, as a broker's."""

    name, capability = "etcd-member", "etcd-member"
    actions = ("kill9", "pause")

    def hold_s(self) -> float:
        return self.target.session_timeout_s + Pause.margin_s

    def pick_member(self, rng: random.Random) -> int:
        """A random member that is up (else any member)."""
        members = self.target.etcd_member_ids()
        if not members:
            raise RuntimeError(f"target {self.target.name} has no etcd members")
        up = [m for m in members if _safe(lambda m=m: self.target.etcd_member_up(m))]
        return rng.choice(up or members)

    def choose(self, rng: random.Random) -> tuple[int, dict]:
        """The member to hit, and what the history should say about the choice."""
        return self.pick_member(rng), {}

    def _start(self, rng):
        member, found = self.choose(rng)
        action = rng.choice(self.actions)
        if action == "pause":
            return {**found, "action": action, **self.target.pause_etcd_member(member), "hold_s": self.hold_s()}
        return {**found, "action": action, **self.target.kill_etcd_member(member)}

    def _stop(self, active):
        if active["action"] == "pause":
            remaining = self.started_at + active["hold_s"] - time.monotonic()
            if remaining > 0:
                time.sleep(remaining)  # past the brokers' leases, as a broker's pause
            paused_s = round(time.monotonic() - self.started_at, 3)  # resume waits for /health after SIGCONT
            return {**self.target.resume_etcd_member(active["member"]), "paused_s": paused_s}
        return self.target.restart_etcd_member(active["member"])


class EtcdLeader(EtcdMember):
    """:class:`EtcdMember` on the member leading etcd's Raft when it starts (the target's
    ``etcd_leader``, asked for at most ``find_timeout_s``)."""

    name, capability = "etcd-leader", "etcd-leader"
    find_timeout_s = 5.0

    def choose(self, rng):
        try:
            leader = self.target.etcd_leader(self.find_timeout_s)
        except Exception as exc:  # noqa: BLE001 - a fault still starts, on a random member
            log.debug("etcd leader", error=str(exc))
            leader = None
        if leader is None:
            return self.pick_member(rng), {"leader": "not found: a random member"}
        return leader, {"leader": leader}


class Coordinator(Nemesis):
    """kill -9 (or pause) the coordinator of a random transactional id or group among the keys
    the runner gives (``set_keys``), found with FindCoordinator; a random broker if there are
    no keys or no coordinator answers within ``find_timeout_s``."""

    name, capability = "coordinator", "coordinator"
    find_timeout_s = 10.0

    def __init__(self, target: Target, keys: dict[str, list[str]] | None = None, pause: bool = False) -> None:
        super().__init__(target)
        self.keys: dict[str, list[str]] = {}
        self.set_keys(**(keys or {}))
        self.pause = pause
        if pause:
            self.name = "coordinator-pause"

    def set_keys(self, txn: list[str] | None = None, group: list[str] | None = None) -> None:
        if txn is not None:
            self.keys[TXN_KEY] = list(txn)
        if group is not None:
            self.keys[GROUP_KEY] = list(group)

    def _start(self, rng):
        found = self.find(rng)
        node = found.get("node")
        if node is None:
            node = self.pick_node(rng)
        if self.pause:
            done = {**self.target.pause(node), "hold_s": self.target.session_timeout_s + Pause.margin_s}
        else:
            done = self.target.kill9(node)
        return {**found, **done}

    def _stop(self, active):
        if self.pause:
            remaining = self.started_at + active["hold_s"] - time.monotonic()
            if remaining > 0:
                time.sleep(remaining)
            return self.target.resume(active["node"])
        return self.target.restart(active["node"])

    def find(self, rng: random.Random) -> dict:
        """{"key_type", "key", "node"} of a random key's coordinator, or a reason it has none."""
        choices = [(kind, key) for kind, keys in sorted(self.keys.items()) for key in keys]
        if not choices:
            return {"coordinator": "no keys given: a random broker"}
        kind, key = rng.choice(choices)
        node = find_coordinator(self.target, key, kind, self.find_timeout_s)
        if node is None:
            return {"key_type": kind, "key": key, "coordinator": "not found: a random broker"}
        return {"key_type": kind, "key": key, "node": node}


def find_coordinator(target: Target, key: str, kind: str, timeout: float) -> int | None:
    """The node FindCoordinator names for ``key`` (a ``txn`` id or a ``group``), asking the
    target's live brokers directly (never through the proxy), retrying until ``timeout``."""
    from tools import kafka_client as kc

    key_type = kc.TRANSACTION_KEY if kind == TXN_KEY else kc.GROUP_KEY
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node in target.node_ids():
            if not _safe(lambda node=node: target.is_up(node)):
                continue
            host, port = target.broker_address(node)
            try:
                with kc.KafkaClient(f"{host}:{port}", client_id="kbroker-verify-nemesis",
                                 request_timeout=3) as client:
                    answer = client.find_coordinators([key], key_type).get(key)
            except (kc.KafkaClientError, OSError) as exc:
                log.debug("find coordinator", node=node, error=str(exc))
                continue
            if isinstance(answer, int) and answer in target.node_ids():
                return answer
        time.sleep(0.2)
    return None


class Proxy(Nemesis):
    """Switch the proxy to a fault mode for the interval: ``delay`` (20-300 ms a request),
    ``duplicate`` (p=0.3) or ``reorder`` (p=0.3); a random one of them for plain ``proxy``.
    ``stop()`` restores the mode the proxy had before (normal, unless the runner set one)."""

    name, capability = "proxy", "proxy"
    MODES = ("delay", "duplicate", "reorder")

    def __init__(self, target: Target, proxy, mode: str | None = None,
                 delay_ms: tuple[float, float] = (20.0, 300.0), probability: float = 0.3) -> None:
        super().__init__(target)
        self.proxy = proxy
        self.mode = mode
        self.delay_ms = delay_ms
        self.probability = probability
        self.previous = None
        if mode:
            self.name = f"proxy-{mode}"

    def _start(self, rng):
        self.previous = self.proxy.mode  # restored at stop (the runner may run the proxy in a mode)
        mode = self.mode or rng.choice(self.MODES)
        if mode == "delay":
            self.proxy.delay(self.delay_ms)
            return {"mode": mode, "delay_ms": list(self.delay_ms)}
        getattr(self.proxy, mode)(self.probability)
        return {"mode": mode, "probability": self.probability}

    def _stop(self, active):
        self.proxy.mode = self.previous
        return {"mode": self.previous.name, "stats": self.proxy.stats.as_dict()}


SIMPLE = {"kill9": Kill9, "term": Term, "pause": Pause, "partition": Partition, "etcd": Etcd, "machine": Machine,
          "etcd-member": EtcdMember, "etcd-leader": EtcdLeader}
NAMES = (*SIMPLE, "coordinator", "coordinator-pause", "proxy", *(f"proxy-{m}" for m in Proxy.MODES))
# Where a target cannot do a fault, what it has instead (the error says so).
INSTEAD = {"partition": {"devcluster": "partition needs devcluster:netns: network namespaces, root and iproute2",
                         "kafka": "partition needs kafka made for a run with the partition fault (make_target "
                                  "faults=): network namespaces, root and iproute2"},
           "etcd": {"kafka": "Kafka's metadata quorum is its own nodes: kill9 or machine covers it"},
           "etcd-member": {"kafka": "Kafka's metadata quorum is its own nodes: kill9 or machine covers it"},
           "etcd-leader": {"kafka": "Kafka's metadata quorum is its own nodes: kill9 or machine covers it",
                           "compose": "the compose target does not ask etcd for its leader"}}


def capability(name: str) -> str:
    """The target capability a fault name needs: its own, or its family's for a variant
    (``proxy-delay``: ``proxy``; ``coordinator-pause``: ``coordinator``)."""
    name = name.strip()
    if name.startswith("proxy-"):
        return "proxy"
    if name == "coordinator-pause":
        return "coordinator"
    return name


def make_nemeses(names: list[str], target: Target, proxy=None,
                 coordinator_keys: dict[str, list[str]] | None = None) -> list[Nemesis]:
    """One nemesis per name. ValueError (a clear message) for an unknown name, one the target
    cannot do, or a proxy fault without a proxy."""
    out: list[Nemesis] = []
    for name in names:
        nemesis = _make(name.strip(), target, proxy, coordinator_keys)
        if nemesis.capability not in target.capabilities:
            raise ValueError(unsupported_message(target, name))
        out.append(nemesis)
    return out


def unsupported_message(target: Target, name: str) -> str:
    """One line: the target cannot do the fault, what it can, and what it has instead if any."""
    can = ", ".join(sorted(target.capabilities)) or "none"
    instead = INSTEAD.get(capability(name), {}).get(target.name)
    return f"target {target.name} cannot do the {name} fault (it can: {can})" + (f"; {instead}" if instead else "")


def _make(name: str, target: Target, proxy, coordinator_keys) -> Nemesis:
    if name in SIMPLE:
        return SIMPLE[name](target)
    if name in ("coordinator", "coordinator-pause"):
        return Coordinator(target, coordinator_keys, pause=name.endswith("-pause"))
    if name == "proxy" or name.startswith("proxy-"):
        mode = name.partition("-")[2] or None
        if mode is not None and mode not in Proxy.MODES:
            raise ValueError(f"unknown proxy fault {name!r}: expected one of "
                             + ", ".join(f"proxy-{m}" for m in Proxy.MODES))
        if proxy is None:
            raise ValueError(f"the {name} fault needs the proxy (run with the proxy on)")
        return Proxy(target, proxy, mode)
    raise ValueError(f"unknown fault {name!r}: expected one of {', '.join(NAMES)}")


def set_coordinator_keys(nemeses: list[Nemesis], txn: list[str] | None = None,
                         group: list[str] | None = None) -> None:
    """Give the coordinator faults the transactional ids / groups the workload uses."""
    for n in nemeses:
        if isinstance(n, Coordinator):
            n.set_keys(txn=txn, group=group)


def heal_all(nemeses: list[Nemesis]) -> list[dict]:
    """Undo every fault still active (for finally blocks); never raises. Returns what each
    stop did, with ``error`` where undoing failed."""
    out = []
    for n in nemeses:
        if n.active is None:
            continue
        try:
            out.append({"f": n.name, **n.stop()})
        except Exception as exc:  # noqa: BLE001 - heal the others anyway
            log.error("nemesis heal failed", fault=n.name, error=str(exc))
            n.active = None
            out.append({"f": n.name, "phase": "stop", "error": str(exc)})
    return out
