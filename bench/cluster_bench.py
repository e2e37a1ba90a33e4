#!/usr/bin/env python3
"""3-node cluster benchmark: our broker vs. Apache Kafka, RF 3, acks=all, one confluent-kafka client.

This module owns the cluster benchmark: it starts a 3-node cluster per target, runs the
phases below against a replication-factor-3 topic, and reports figures and ours/kafka ratios.

    python bench/cluster_bench.py --target both             # ours, then Apache Kafka, ratios
    python bench/cluster_bench.py --target ours --quick     # smoke run
    python bench/cluster_bench.py --target kafka --rate-mb 10 --failover-trials 3
    python bench/cluster_bench.py --target both --phases eos   # transactions, coordinators
    python bench/cluster_bench.py --target both --phases machine,etcd-leader,controller,leader --failover-trials 5
    python bench/cluster_bench.py --target both --phases metadata-writes   # 100 x 100 partitions, RF 3

Phases (``--phases``, default max,rate,leader,controller; ``eos`` = txn,txn-failover,group-failover):

  max         1 KB records, acks=all, linger.ms=5, as fast as one producer goes; ``--runs``
              runs of ``--mb`` MB (median): MB/s, p50/p99, broker CPU-s/GB
  rate        paced at ``--rate-mb`` MB/s (default 20) for ``--rate-seconds``: p50/p99/p99.9,
              broker CPU-s/GB
  leader      kill -9 of a partition leader (not the controller) while a producer sends one
              small acks=all record every 5 ms to that partition; time from the kill to the
              first acknowledgement of a record the new leader appended (the first ack after
              the kill whose offset is past every offset acknowledged before it)
  controller  kill -9 of the controller; CreateTopics with a fresh name every 100 ms; time from
              the kill until a create succeeded and every partition of that topic is led by a
              live broker (``applied_s``: until any probe topic was, its create answered in
              time or not)
  etcd-leader ours only (Kafka's counterpart is ``controller``: its active controller leads its
              metadata quorum): kill -9 of the etcd member leading etcd's Raft, every broker
              left up; the same CreateTopics probe: time to the next metadata write
  machine     a whole node lost: kill -9 of node N's broker and (ours) the etcd member beside
              it, left down for the trial, while an idempotent acks=all producer sends one small
              record to each partition of an RF-3, min.insync.replicas=2 topic every 5 ms; from
              the kill: ``acks_s`` (every partition acknowledged a record sent after the kill),
              ``create_s`` (CreateTopics at RF 3 of ``--machine-probe-partitions``, a fresh name,
              one attempt at a time, again 100 ms after each failed one started, until one
              succeeds and then until every partition of it is led by a live broker),
              ``group_s`` (a new group's consumer read a record and had a synchronous commit
              accepted), ``txn_s`` (a new transactional producer initialized, produced and
              committed), ``failover_s`` (the last of the four). The node is the metadata
              quorum leader's (ours: etcd's Raft leader; Kafka: the active controller) in trials
              1, 3, ... and another node in trials 2, 4, ...; the group's and the producer's
              coordinator is the lost node. Then the node is restarted and every topic waits for
              a full ISR.
  txn         txn_bench's loop on an RF-3 topic: begin, ``--txn-records`` (10) x 1 KB, commit;
              ``--txn-runs`` runs of ``--txns`` transactions after ``--txn-warmup``: txn/s,
              commit p50/p99 (commit_transaction() call to return), broker CPU-ms/txn
  java-txn    the same loop with Kafka's Java client (kafka-clients 4.3.1), with
              ``transaction.version`` finalized at 1 and then at 2 (UpdateFeatures): what
              transaction version 2 (an epoch bump per commit, no AddPartitionsToTxn) costs
  txn-failover    a transactional producer commits one-record transactions back to back to a
              partition its coordinator does not lead; kill -9 of its transaction coordinator
              (FindCoordinator); time from the kill to the return of the first successful
              commit_transaction() that was called after the kill
  group-failover  three consumers (classic protocol) in a group on a 6-partition topic, each
              committing its partitions synchronously every 200 ms; kill -9 of the group's
              coordinator and, right after, a fourth consumer subscribes; time from the kill until
              every member has an assignment from a rebalance after the kill (``rebalance_s``)
              and until each of the three has had an OffsetCommit accepted (``served_s``)
  After each coordinator kill the node is restarted and the failover topic, __transaction_state
  and __consumer_offsets wait for a full ISR; ``--coordinator-trials`` (3) kills per phase.
  metadata-writes ``--metadata-topics`` (100) topics of ``--metadata-partitions`` (100) at RF 3,
              CreateTopics in requests of ``--metadata-batch`` (50) topics, one after the other:
              seconds until every request was answered and until every partition is led with a
              full ISR, broker and etcd CPU meanwhile; then DeleteTopics until none is listed.
              It runs last (its partitions stay for no other phase).

Broker CPU = utime+stime from /proc/PID/stat, summed over the three broker processes (and
their children).  For ours, etcd's CPU is reported on its own line, because Kafka's
controllers run inside the broker JVMs (combined mode).  MB = 10^6 bytes, GB = 10^9 bytes.

Targets: ``ours`` = ``tools.devcluster.DevCluster`` (an etcd member beside each of 3 ``python -m
broker`` processes run with this interpreter; ``--etcd-members`` for another count);
``kafka`` = Apache Kafka 4.3.1, 3 combined broker+controller nodes started by
compat/kafka/kraft_cluster.py (``--kafka-heap``, default -Xmx512M -Xms512M).
The targets run one after the other, never at the same time.  A table goes to stdout,
progress to stderr, everything to a JSON file (``--json``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import os
import platform
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import produce_bench as pb  # noqa: E402  (same directory; helpers shared with it)
import txn_bench as tb  # noqa: E402  (same directory: its transactions loop)

from compat.kafka import kraft_cluster  # noqa: E402  (stdlib only)

ck, AdminClient, NewTopic = pb.ck, pb.AdminClient, pb.NewTopic

# Broker properties for every node of our cluster unless --ours-override says otherwise:
# the defaults, as Kafka runs with its own.
OURS_DEFAULT_OVERRIDES: dict[str, str] = {}
log, cpu_seconds, _f, _pct = pb.log, pb.cpu_seconds, pb._f, pb._pct
MB, GB = pb.MB, pb.GB


# Settings of the internal topics and coordinators, reported with each target's failover settings.
COORDINATOR_SETTINGS = ("transaction.state.log.replication.factor", "transaction.state.log.min.isr",
                        "transaction.state.log.num.partitions", "offsets.topic.replication.factor",
                        "offsets.topic.num.partitions", "group.initial.rebalance.delay.ms")


# =========================================================================== clusters
class Cluster:
    """A 3-node cluster under test."""

    name = "?"
    version = ""
    bootstrap = ""
    # what leads the metadata quorum: the node whose loss costs an election
    metadata_leader_name = "?"

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def broker_pids(self) -> dict[int, int]: ...
    def extra_pids(self) -> dict[str, int]:
        return {}
    def kill9(self, node_id: int) -> None: ...
    def restart(self, node_id: int) -> None: ...
    def alive(self) -> set[int]: ...
    def controller_id(self) -> int: ...
    def metadata_leader(self) -> int: ...
    def governing_settings(self) -> dict[str, str]:
        return {}

    def kill_machine(self, node_id: int) -> None:
        """kill -9 of everything that runs on node `node_id`."""
        self.kill9(node_id)

    def kill_etcd_member(self, member_id: int) -> None:
        raise NotImplementedError(f"{self.name} has no etcd")

    def restart_etcd_members(self) -> None: ...


class OursCluster(Cluster):
    name = "ours"
    metadata_leader_name = "etcd leader"

    def __init__(self, overrides: dict[str, str], keep: bool, etcd_members: int | None = None):
        self.overrides, self.keep, self.etcd_members = overrides, keep, etcd_members
        self.version = _git_rev()
        self.dc = None
        self.tmp: Path | None = None

    def start(self) -> None:
        from tools.devcluster import DevCluster  # our package; imported only for this target

        self.tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-ours-"))
        # etcd_members None: DevCluster's default (one member per node); a tree from before the
        # etcd cluster (one etcd process, `dc.etcd`) takes no such argument
        extra = {} if self.etcd_members is None else {"etcd_members": self.etcd_members}
        self.dc = DevCluster(str(self.tmp), nodes=3, base_port=0, overrides=self.overrides, **extra)
        log(f"ours: starting {self._members_text()} + 3 brokers ({sys.executable} -m broker, "
            f"overrides {self.overrides}), logs in {self.tmp}")
        try:
            self.dc.start()
        except Exception:
            self.dc.kill()
            raise
        self.bootstrap = self.dc.bootstrap

    def stop(self) -> None:
        if self.dc is not None:
            try:
                self.dc.stop()
            finally:
                self.dc.kill()  # whatever did not stop (by pid, our own processes only)
        if self.tmp is not None and not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def broker_pids(self) -> dict[int, int]:
        return {i: n.proc.pid for i, n in self.dc.nodes.items() if n.alive}

    def _members_text(self) -> str:
        members = getattr(self.dc, "etcd_members", None)
        return "etcd (one process)" if members is None else f"etcd ({len(members)} members)"

    def extra_pids(self) -> dict[str, int]:
        members = getattr(self.dc, "etcd_members", None)
        if members is None:  # a tree from before the etcd cluster (A/B runs): one process
            e = self.dc.etcd
            return {"etcd": e.pid} if e is not None and e.poll() is None else {}
        return {m.name: m.proc.pid for m in members.values() if m.alive}

    def kill9(self, node_id: int) -> None:
        self.dc.nodes[node_id].kill9()

    def restart(self, node_id: int) -> None:
        self.dc.nodes[node_id].start()
        self.dc.wait_registered(set(self.dc.nodes), 120)

    def metadata_leader(self) -> int:
        """The node whose etcd member leads etcd's Raft (member i runs beside broker i)."""
        deadline = time.monotonic() + 30
        while (found := self.dc.etcd_leader()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no etcd member reports a leader")
            time.sleep(0.2)
        return found

    def kill_etcd_member(self, member_id: int) -> None:
        self.dc.etcd_members[member_id].kill9()

    def restart_etcd_members(self) -> None:
        """Start every member that is down (on its data: it rejoins), until all are healthy."""
        self.dc.start_etcd()

    def kill_machine(self, node_id: int) -> None:
        """kill -9 of the node's broker, then of the etcd member beside it."""
        self.dc.nodes[node_id].kill9()
        if node_id in self.dc.etcd_members:
            self.dc.etcd_members[node_id].kill9()

    def alive(self) -> set[int]:
        return {i for i, n in self.dc.nodes.items() if n.alive}

    def controller_id(self) -> int:
        """DescribeQuorum's leader (Metadata and DescribeCluster name the answering broker)."""
        from tools.kafka_client import KafkaClient

        with KafkaClient(",".join(n.address for n in self.dc.nodes.values() if n.alive),
                         request_timeout=10) as client:
            resp = client.bootstrap().request(55, 1, {"topics": [{
                "topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]})
        return resp.topics[0].partitions[0].leader_id

    def governing_settings(self) -> dict[str, str]:
        """From the first node's `effective_config` start-up log line."""
        text = self.dc.nodes[1].output()
        out = {}
        for key in ("broker.session.timeout.ms", "controller.quorum.fetch.timeout.ms", "replica.lag.time.max.ms",
                    "request.timeout.ms", "transaction.partition.verification.enable", *COORDINATOR_SETTINGS):
            m = re.search(rf"\b{re.escape(key.replace('.', '_'))}=(\S+)", text)
            out[key] = m.group(1).strip(",'\"") if m else self.overrides.get(key, "?")
        # etcd's own timers (DevCluster's flags) and how many members vote
        members = getattr(self.dc, "etcd_members", None)
        out["etcd members"] = str(len(members)) if members is not None else "1"
        for key, attr in (("etcd --election-timeout", "etcd_election_ms"),
                          ("etcd --heartbeat-interval", "etcd_heartbeat_ms")):
            out[key] = str(getattr(self.dc, attr, "?"))
        return out


class KafkaCluster(Cluster):
    name = "kafka"
    metadata_leader_name = "active controller"

    def __init__(self, heap: str, keep: bool):
        self.kc = kraft_cluster.KafkaCluster(n_nodes=3, heap_opts=heap, keep=keep)
        self.version = os.environ.get("KAFKA_VERSION", "4.3.1")

    def start(self) -> None:
        log(f"kafka: resolving jars and starting 3 KRaft nodes (broker+controller, {self.kc.heap_opts})")
        self.kc.start()
        self.bootstrap = self.kc.bootstrap
        log(f"kafka: up on {self.bootstrap}, pids {self.kc.pids}, workdir {self.kc.workdir}")

    def stop(self) -> None:
        self.kc.stop()

    def broker_pids(self) -> dict[int, int]:
        return {i: n.pid for i, n in self.kc.nodes.items() if n.alive}

    def kill9(self, node_id: int) -> None:
        self.kc.nodes[node_id].kill9()

    def restart(self, node_id: int) -> None:
        self.kc.nodes[node_id].start()

    def alive(self) -> set[int]:
        return {i for i, n in self.kc.nodes.items() if n.alive}

    def controller_id(self) -> int:
        return self.kc.active_controller()

    def metadata_leader(self) -> int:
        """The KRaft quorum's leader: the active controller (combined nodes: one process)."""
        return self.kc.active_controller()

    def governing_settings(self) -> dict[str, str]:
        """From node 1's `KafkaConfig values:` start-up dump."""
        text = self.kc.nodes[1].log_file.read_text(errors="replace")
        out = {}
        for key in ("broker.session.timeout.ms", "broker.heartbeat.interval.ms",
                    "replica.lag.time.max.ms", "controller.quorum.fetch.timeout.ms",
                    "controller.quorum.election.timeout.ms", *COORDINATOR_SETTINGS):
            m = re.search(rf"^\s*{re.escape(key)} = (\S+)", text, re.M)
            out[key] = m.group(1) if m else "?"
        return out


def _git_rev() -> str:
    return pb._git_rev()


# =========================================================================== helpers
def cluster_cpu(c: Cluster) -> tuple[float, float]:
    """(CPU-s of the three brokers, CPU-s of the other processes, e.g. etcd)."""
    brokers = sum(cpu_seconds(p) or 0.0 for p in c.broker_pids().values())
    extra = sum(cpu_seconds(p) or 0.0 for p in c.extra_pids().values())
    return brokers, extra


def create_topic(bootstrap: str, name: str, partitions: int, rf: int, timeout: float = 60.0,
                 config: dict[str, str] | None = None) -> float:
    """Create a topic and wait until every partition has a leader and a full ISR."""
    t0 = time.monotonic()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, rf, config=config or {})],
                        operation_timeout=timeout)[name].result(timeout)
    wait_isr(bootstrap, name, partitions, rf, timeout)
    return time.monotonic() - t0


def wait_isr(bootstrap: str, topic: str, partitions: int | None, rf: int, timeout: float) -> None:
    """Until every partition of `topic` has a leader and `rf` replicas in its ISR (partitions
    None: however many it has, e.g. an internal topic)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        with contextlib.suppress(ck.KafkaException):
            t = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
            last = t
            want = partitions or len(t.partitions) if t else 0
            if t and not t.error and want and len(t.partitions) == want and all(
                    p.leader >= 0 and len(p.isrs) >= rf for p in t.partitions.values()):
                return
        time.sleep(0.2)
    state = {p.id: (p.leader, p.isrs) for p in last.partitions.values()} if last else None
    raise TimeoutError(f"topic {topic}: no full ISR after {timeout}s: {state}")


def wait_all_isr(bootstrap: str, timeout: float) -> None:
    """Until every partition of every topic (internal ones too) has a leader and every replica
    in its ISR."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    short: dict = {}
    while time.monotonic() < deadline:
        with contextlib.suppress(ck.KafkaException):
            md = admin.list_topics(timeout=10)
            short = {f"{t.topic}-{p.id}": (p.leader, p.replicas, p.isrs) for t in md.topics.values()
                     for p in t.partitions.values() if p.leader < 0 or sorted(p.isrs) != sorted(p.replicas)}
            if not short and not any(t.error for t in md.topics.values()):
                return
        time.sleep(0.2)
    raise TimeoutError(f"{len(short)} partitions without a full ISR after {timeout}s, e.g. "
                       f"{dict(list(short.items())[:5])}")


def elect_preferred(bootstrap: str, timeout: float) -> None:
    """ElectLeaders (preferred) for every partition, until each is led by its first replica: a
    restarted node leads its share again (its coordinators too) without waiting for
    ``leader.imbalance.check.interval.seconds``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    off: dict = {}
    while time.monotonic() < deadline:
        with contextlib.suppress(ck.KafkaException):
            # no timeout arguments: confluent-kafka 2.16's elect_leaders() raises SystemError on them
            admin.elect_leaders(ck.ElectionType.PREFERRED, None).result(60)
        with contextlib.suppress(ck.KafkaException):
            md = admin.list_topics(timeout=10)
            off = {f"{t.topic}-{p.id}": (p.leader, p.replicas) for t in md.topics.values()
                   for p in t.partitions.values() if p.replicas and p.leader != p.replicas[0]}
            if not off:
                return
        time.sleep(1)
    raise TimeoutError(f"{len(off)} partitions not led by their preferred replica after {timeout}s, e.g. "
                       f"{dict(list(off.items())[:5])}")


def delete_prefixed(bootstrap: str, prefix: str, timeout: float = 60.0) -> int:
    """Delete every topic whose name starts with `prefix` (a failover probe's); how many."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
    for i in range(0, len(names), 100):
        for f in admin.delete_topics(names[i:i + 100], operation_timeout=timeout,
                                     request_timeout=timeout).values():
            with contextlib.suppress(ck.KafkaException):  # e.g. gone already
                f.result(timeout + 10)
    return len(names)


def create_many(bootstrap: str, names: list[str], partitions: int, rf: int, batch: int = 50,
                timeout: float = 180.0) -> float:
    """CreateTopics for `names` (`partitions` each, RF `rf`) in requests of `batch` topics, one
    after the other; seconds until every request was answered."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    t0 = time.monotonic()
    for i in range(0, len(names), batch):
        futures = admin.create_topics([NewTopic(n, partitions, rf) for n in names[i:i + batch]],
                                      operation_timeout=timeout, request_timeout=timeout)
        for f in futures.values():
            f.result(timeout + 60)
    return time.monotonic() - t0


def topics_complete(bootstrap: str, names: set[str], partitions: int) -> bool:
    """Every topic of `names` listed with `partitions` partitions, each led with a full ISR."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    for name in names:
        t = md.topics.get(name)
        if t is None or t.error is not None or len(t.partitions) != partitions:
            return False
        for p in t.partitions.values():
            if p.leader < 0 or sorted(p.isrs) != sorted(p.replicas):
                return False
    return True


def partition_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    t = admin.list_topics(topic=topic, timeout=10).topics[topic]
    return {p.id: p.leader for p in t.partitions.values()}


def produce(c: Cluster, topic: str, n: int, args, rate: float | None = None, skip_s: float = 0.0) -> dict:
    """One produce_bench run (acks=all), with CPU summed over the cluster's processes."""
    b0, e0 = cluster_cpu(c)
    run = pb.produce_run(c.bootstrap, topic, n, args.record_size, "all", args.linger_ms, None,
                         rate=rate, timeout=args.timeout, queue_kb=args.queue_kb, skip_s=skip_s)
    b1, e1 = cluster_cpu(c)
    gb = run["bytes"] / GB
    run["broker_cpu_s"] = round(b1 - b0, 3)
    run["broker_cpu_s_per_gb"] = (b1 - b0) / gb
    if c.extra_pids():
        run["etcd_cpu_s_per_gb"] = (e1 - e0) / gb
    run["client_cores"] = run["client_cpu_s"] / run["seconds"] if run["seconds"] else None
    return run


SECTION_KEYS = {
    "max": ("mb_s", "msgs_s", "p50_ms", "p99_ms", "broker_cpu_s_per_gb", "etcd_cpu_s_per_gb", "client_cores"),
    "rate": ("mb_s", "p50_ms", "p99_ms", "p999_ms", "broker_cpu_s_per_gb", "etcd_cpu_s_per_gb", "client_cores"),
    "leader_failover": ("failover_s",),
    "controller_failover": ("failover_s", "create_ok_s"),
    "etcd_leader_failover": ("failover_s", "create_ok_s"),
    "machine_failover": ("acks_s", "create_s", "group_s", "txn_s", "failover_s"),
    "metadata_writes": ("created_s", "isr_full_s", "deleted_s", "broker_cpu_s", "etcd_cpu_s"),
    "txn": ("txn_s", "commit_p50_ms", "commit_p99_ms", "txn_p50_ms", "txn_p99_ms",
            "broker_cpu_ms_per_txn", "etcd_cpu_ms_per_txn"),
    "txn_failover": ("failover_s", "first_return_s"),
    "group_failover": ("failover_s", "served_s", "rebalance_s"),
}


def _median(runs: list[dict], keys, with_max: bool = False) -> dict:
    out = {}
    for k in keys:
        vals = [r[k] for r in runs if r.get(k) is not None]
        if vals:
            out[k] = statistics.median(vals)
            if with_max:
                out[f"{k}_max"] = max(vals)
    out["runs"] = runs
    return out


def measured_runs(c: Cluster, prefix: str, n_runs: int, args, what: str, run_fn, summary) -> list[dict]:
    """`n_runs` runs of run_fn(topic), each on a fresh RF-3 topic `<prefix>-r<i>`, logged."""
    runs = []
    for r in range(n_runs):
        topic = f"{prefix}-r{r}"
        create_topic(c.bootstrap, topic, args.partitions, 3)
        log(f"{c.name}: {what}, run {r + 1}/{n_runs} into {topic}")
        run = run_fn(topic)
        log(f"{c.name}:   {summary(run)}")
        runs.append(run)
    return runs


# =========================================================================== failover phases
def leader_failover(c: Cluster, topic: str, args) -> dict:
    """kill -9 the leader of one partition (not the controller) under a 5 ms acks=all trickle."""
    controller = c.controller_id()
    leaders = partition_leaders(c.bootstrap, topic)
    part = next((p for p, lead in sorted(leaders.items()) if lead != controller and lead in c.alive()), None)
    if part is None:  # every partition led by the controller: take partition 0 anyway
        part = 0
    victim = leaders[part]
    events: list[tuple[int, int, str | None]] = []  # (t_ns, offset, error)

    def on_delivery(err, msg):
        events.append((time.perf_counter_ns(), -1 if err else msg.offset(), str(err) if err else None))

    p = ck.Producer({
        "bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0,
        "enable.idempotence": False, "message.timeout.ms": int(args.failover_timeout * 1000),
        "on_delivery": on_delivery,
    })
    p.list_topics(topic=topic, timeout=30)
    payload = os.urandom(args.failover_record_size)
    period_ns = int(args.failover_interval_ms * 1e6)
    now = time.perf_counter_ns

    def trickle(until_ns: int, stop_when=None) -> None:
        nxt = now()
        while now() < until_ns:
            if now() >= nxt:
                p.produce(topic, payload, partition=part)
                nxt += period_ns
            p.poll(0.001)
            if stop_when is not None and stop_when():
                return

    trickle(now() + int(args.failover_warm_s * 1e9))
    ok_before = [e for e in events if e[2] is None]
    log(f"{c.name}:   partition {part}: leader {victim} (controller {controller}); "
        f"{len(ok_before)} acks in {args.failover_warm_s:.0f} s warm trickle; kill -9 {victim}")
    t_kill = now()
    c.kill9(victim)
    p.poll(0)  # callbacks for answers already received before the kill
    n_pre = len(events)
    max_pre = max((e[1] for e in events if e[2] is None), default=-1)
    found: dict = {}

    def check() -> bool:
        for t, off, err in events[n_pre:]:
            if err is None and off > max_pre:
                found.update(t=t, offset=off)
                return True
        return False

    trickle(t_kill + int(args.failover_timeout * 1e9), stop_when=check)
    if not found:
        check()
    trickle(now() + int(0.5 * 1e9))  # a little more, then drain
    left = p.flush(args.failover_timeout)
    errs = [e for e in events if e[2] is not None]
    res = {"partition": part, "killed": victim, "controller": controller,
           "acks_before_kill": len(ok_before), "max_offset_before_kill": max_pre,
           "delivery_errors": len(errs), "first_error": errs[0][2] if errs else None,
           "undelivered": left}
    if found:
        res["failover_s"] = (found["t"] - t_kill) / 1e9
        res["first_new_offset"] = found["offset"]
        with contextlib.suppress(Exception):
            res["new_leader"] = partition_leaders(c.bootstrap, topic)[part]
        log(f"{c.name}:   first ack from the new leader (offset {found['offset']}, leader now "
            f"{res.get('new_leader')}) {res['failover_s']:.2f} s after the kill; "
            f"{len(errs)} delivery errors")
    else:
        log(f"{c.name}:   no ack within {args.failover_timeout} s after the kill")
    return res


def create_probe(c: Cluster, t_kill: float, args, partitions: int, rf: int, prefix: str) -> dict:
    """CreateTopics with a fresh name every 100 ms from `t_kill` on, until a created topic has
    every partition led by a broker alive now (or --failover-timeout): ``failover_s`` (that
    topic's creation), ``create_ok_s`` (the first successful create), attempts and errors."""
    tag = uuid.uuid4().hex[:6]
    attempts = errors = 0
    first_err = last_err = None
    created: list[str] = []
    res: dict = {"probe_prefix": f"{prefix}-{tag}-"}  # the probe topics, deleted after the trial
    live = c.alive()
    deadline = t_kill + args.failover_timeout
    stop = threading.Event()

    def watch_applied() -> None:
        """For the record, ``applied_s``: the first probe topic listed with every partition led
        by a live broker, whether or not its CreateTopics was answered within the probe timeout."""
        watcher = AdminClient({"bootstrap.servers": c.bootstrap})
        while not stop.is_set() and time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                for tn, t in watcher.list_topics(timeout=2).topics.items():
                    if tn.startswith(res["probe_prefix"]) and not t.error and len(t.partitions) == partitions \
                            and all(pm.leader in live for pm in t.partitions.values()):
                        res["applied_s"] = time.monotonic() - t_kill
                        return
            stop.wait(0.2)
    watcher = threading.Thread(target=watch_applied, daemon=True)
    watcher.start()
    inflight: list[tuple[str, object, object, float]] = []  # (name, client, future, started)
    while time.monotonic() < deadline:
        tick = time.monotonic()
        # a new attempt every 100 ms, each on a fresh client like a new `kafka-topics --create`
        # (a long-lived librdkafka admin client keeps waiting for the controller id it
        # cached: the dead one); attempts overlap when one takes longer than 100 ms
        name = f"{prefix}-{tag}-{attempts}"
        attempts += 1
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        fut = admin.create_topics([NewTopic(name, partitions, rf)],
                                  request_timeout=args.probe_timeout,
                                  operation_timeout=args.probe_timeout)[name]
        inflight.append((name, admin, fut, tick))
        still = []
        for name_, admin_, fut_, t_start in inflight:
            if not fut_.done():
                if time.monotonic() - t_start < args.probe_timeout + 2:
                    still.append((name_, admin_, fut_, t_start))
                else:
                    errors += 1
                    last_err = "no answer"
                    first_err = first_err or last_err
                continue
            try:
                fut_.result(timeout=0)
                created.append(name_)
                res.setdefault("create_ok_s", time.monotonic() - t_kill)
            except Exception as e:  # noqa: BLE001  (any failure = not yet)
                errors += 1
                last_err = f"{type(e).__name__}: {e}"
                first_err = first_err or last_err
        inflight = still
        # is any created topic usable: every partition led by a live broker?
        if created:
            with contextlib.suppress(Exception):
                md = admin.list_topics(timeout=1)
                for tn in created:
                    t = md.topics.get(tn)
                    if t and not t.error and len(t.partitions) == partitions and all(
                            pm.leader in live for pm in t.partitions.values()):
                        res.update(failover_s=time.monotonic() - t_kill, topic=tn)
                        break
        if "failover_s" in res:
            break
        time.sleep(max(0.0, tick + 0.1 - time.monotonic()))
    stop.set()
    watcher.join(5)
    res.update(attempts=attempts, failed_attempts=errors, first_error=first_err, last_error=last_err,
               topics_created=len(created))
    # let go of the probe clients now (each holds librdkafka threads and connections)
    inflight.clear()
    admin = fut = None
    gc.collect()
    return res


def create_until_led(c: Cluster, t_kill: float, args, partitions: int, rf: int, prefix: str) -> dict:
    """CreateTopics with a fresh name, one attempt at a time (each on a fresh client, waiting up
    to --machine-probe-timeout for its answer), the next one 100 ms after the last one started,
    until one succeeds (``create_ok_s``); then until every partition of that topic is led by a
    broker alive now (``failover_s``). One request in flight: a slow controller is not sent
    more topics to create while it catches up."""
    tag = uuid.uuid4().hex[:6]
    res: dict = {"probe_prefix": f"{prefix}-{tag}-", "attempts": 0, "failed_attempts": 0}
    errors: list[str] = []
    live = c.alive()
    deadline = t_kill + args.failover_timeout
    created = None
    while time.monotonic() < deadline and created is None:
        t_start = time.monotonic()
        name = f"{prefix}-{tag}-{res['attempts']}"
        res["attempts"] += 1
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        timeout = max(1.0, min(args.machine_probe_timeout, deadline - t_start))
        try:
            admin.create_topics([NewTopic(name, partitions, rf)], request_timeout=timeout,
                                operation_timeout=timeout)[name].result(timeout + 5)
            created = name
            res["create_ok_s"] = time.monotonic() - t_kill
        except Exception as e:  # noqa: BLE001  (any failure = not yet)
            res["failed_attempts"] += 1
            if f"{type(e).__name__}: {e}" not in errors:
                errors.append(f"{type(e).__name__}: {e}")
            time.sleep(max(0.0, t_start + 0.1 - time.monotonic()))
    res["errors"] = errors
    while created is not None and time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            t = admin.list_topics(topic=created, timeout=2).topics.get(created)
            if t and not t.error and len(t.partitions) == partitions and all(
                    pm.leader in live for pm in t.partitions.values()):
                res.update(failover_s=time.monotonic() - t_kill, topic=created)
                break
        time.sleep(0.1)
    return res


def controller_failover(c: Cluster, topic: str, args) -> dict:
    """kill -9 the controller; CreateTopics with a fresh name every 100 ms until one is usable."""
    controller = c.controller_id()
    log(f"{c.name}:   controller is {controller}; kill -9 {controller}")
    t_kill = time.monotonic()
    c.kill9(controller)
    res: dict = {"killed": controller,
                 **create_probe(c, t_kill, args, args.probe_partitions, args.probe_rf, "cb-ctl")}
    with contextlib.suppress(Exception):
        res["new_controller"] = c.controller_id()
    if "failover_s" in res:
        log(f"{c.name}:   topic {res['topic']} created and led by live brokers "
            f"{res['failover_s']:.2f} s after the kill (first create ok at "
            f"{res.get('create_ok_s', float('nan')):.2f} s; {res['attempts']} attempts, new controller "
            f"{res.get('new_controller')})")
    else:
        log(f"{c.name}:   no usable topic within {args.failover_timeout} s; first error {res['first_error']}")
    return res


def etcd_leader_failover(c: Cluster, topic: str, args) -> dict:
    """Ours: kill -9 the etcd member leading etcd's Raft (every broker stays up); CreateTopics
    with a fresh name every 100 ms until one is usable: the next metadata write."""
    member = c.metadata_leader()
    controller = c.controller_id()
    log(f"{c.name}:   etcd leader is etcd-{member} (beside broker {member}; controller {controller}); "
        f"kill -9 etcd-{member}")
    t_kill = time.monotonic()
    c.kill_etcd_member(member)
    res: dict = {"killed_etcd_member": member, "controller": controller,
                 **create_probe(c, t_kill, args, args.probe_partitions, args.probe_rf, "cb-etcd")}
    with contextlib.suppress(Exception):
        res["new_etcd_leader"] = c.metadata_leader()
    if "failover_s" in res:
        log(f"{c.name}:   topic {res['topic']} created and led {res['failover_s']:.2f} s after the kill "
            f"(first create ok at {res.get('create_ok_s', float('nan')):.2f} s; {res['attempts']} attempts, "
            f"{res['failed_attempts']} failed, first error {res['first_error']}; new etcd leader "
            f"etcd-{res.get('new_etcd_leader')})")
    else:
        log(f"{c.name}:   no usable topic within {args.failover_timeout} s; first error {res['first_error']}")
    return res


def restart_and_heal(c: Cluster, trial: dict, topic: str, args, internal: tuple[str, ...] = (),
                     every_topic: bool = False) -> float:
    """Restart what the trial killed (etcd members first, then the broker `killed`); wait until
    `topic` (and those of the `internal` topics that exist; with `every_topic`, every topic) have
    a full ISR again. Returns seconds."""
    t0 = time.monotonic()
    restarted = []
    if trial.get("killed_etcd_member") is not None:
        c.restart_etcd_members()
        restarted.append(f"etcd-{trial['killed_etcd_member']} restarted")
    if trial.get("killed") is not None:
        c.restart(trial["killed"])
        restarted.append(f"node {trial['killed']} restarted")
    wait_isr(c.bootstrap, topic, args.partitions, 3, args.heal_timeout)
    probes = [trial.get("probe_prefix"), trial.get("create", {}).get("probe_prefix")]
    deleted = sum(delete_prefixed(c.bootstrap, prefix) for prefix in probes if prefix)
    if deleted:
        restarted.append(f"{deleted} probe topics deleted")
    if every_topic:
        wait_all_isr(c.bootstrap, max(1.0, t0 + args.heal_timeout - time.monotonic()))
        elect_preferred(c.bootstrap, max(1.0, t0 + args.heal_timeout - time.monotonic()))
        internal = ("every topic (preferred leaders elected)",)
    else:
        existing = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(timeout=10).topics
        internal = tuple(name for name in internal if name in existing)
        for name in internal:
            wait_isr(c.bootstrap, name, None, 3, max(1.0, t0 + args.heal_timeout - time.monotonic()))
    secs = time.monotonic() - t0
    log(f"{c.name}:   {', '.join(restarted)}; {', '.join((topic, *internal))} back to full ISR "
        f"in {secs:.1f} s (client threads: {len(os.listdir('/proc/self/task'))})")
    return secs


def failover_trials(c: Cluster, kind: str, fn, topic: str, args, res: dict,
                    internal: tuple[str, ...] = (), n_trials: int | None = None,
                    every_topic: bool = False) -> bool:
    """Run the trials of one failover phase into res[kind]; False if the cluster did not heal.

    A trial that fails, or a killed node that does not rejoin every ISR of `topic`, ends the
    failover phases: the trials measured so far are kept and the error is reported.
    """
    trials = []
    healthy = True
    n_trials = n_trials or args.failover_trials
    for r in range(n_trials):
        log(f"{c.name}: {kind} trial {r + 1}/{n_trials} on {topic}")
        try:
            trial = fn(c, topic, args)
        except Exception as e:  # noqa: BLE001
            res.setdefault("errors", []).append(f"{kind} trial {r + 1}: {type(e).__name__}: {e}")
            log(f"{c.name}:   FAILED: {type(e).__name__}: {e}")
            healthy = False
            break
        trials.append(trial)
        try:
            trial["heal_s"] = restart_and_heal(c, trial, topic, args, internal, every_topic)
        except Exception as e:  # noqa: BLE001
            trial["heal_error"] = f"{type(e).__name__}: {e}"
            res.setdefault("errors", []).append(f"{kind} trial {r + 1}, after the kill: {trial['heal_error']}")
            log(f"{c.name}:   {trial.get('killed', trial.get('killed_etcd_member'))} did not rejoin: "
                f"{trial['heal_error']}")
            healthy = False
            break
    if trials:
        res[kind] = _median(trials, SECTION_KEYS[kind], with_max=True)
        if kind == "machine_failover":
            res[kind]["by_role"] = machine_by_role(trials)
    return healthy


# =========================================================================== transactions and coordinators
TXN_STATE, OFFSETS = "__transaction_state", "__consumer_offsets"


def find_coordinator(bootstrap: str, key: str, key_type: int, timeout: float = 60.0) -> int:
    """The broker id FindCoordinator names for a group (GROUP_KEY) or transactional id
    (TRANSACTION_KEY), asking the first reachable bootstrap server; retried until `timeout`."""
    from tools.kafka_client import KafkaClient  # the project's synchronous client (kio codec)

    deadline = time.monotonic() + timeout
    while True:
        try:
            with KafkaClient(bootstrap, client_id="cluster-bench", request_timeout=5) as kc:
                found = kc.find_coordinators([key], key_type)[key]
            if isinstance(found, int):
                return found
            last: object = found
        except Exception as e:  # noqa: BLE001  (a broker may be down: ask again)
            last = e
        if time.monotonic() > deadline:
            raise TimeoutError(f"no coordinator for {key!r} within {timeout}s: {last}")
        time.sleep(0.2)


def txn_phase(c: Cluster, tag: str, args) -> dict:
    """txn_bench's measuring loop (begin, 10 x 1 KB, commit) on an RF-3 topic, with cluster CPU."""
    if args.txn_warmup:
        topic = f"cb-{tag}-txn-warmup"
        create_topic(c.bootstrap, topic, args.partitions, 3)
        log(f"{c.name}: transactions warm-up (not measured): {args.txn_warmup} into {topic}")
        tb.txn_run(c.bootstrap, topic, args.txn_warmup, args.txn_records, args.record_size, None)
    def one(topic: str) -> dict:
        b0, e0 = cluster_cpu(c)
        run = tb.txn_run(c.bootstrap, topic, args.txns, args.txn_records, args.record_size, None)
        b1, e1 = cluster_cpu(c)
        run["broker_cpu_ms_per_txn"] = (b1 - b0) * 1000 / args.txns
        if c.extra_pids():
            run["etcd_cpu_ms_per_txn"] = (e1 - e0) * 1000 / args.txns
        return run

    runs = measured_runs(
        c, f"cb-{tag}-txn", args.txn_runs, args,
        f"transactions: {args.txns} x ({args.txn_records} x {args.record_size} B, commit)", one,
        lambda run: f"{run['txn_s']:.0f} txn/s  commit p50 {run['commit_p50_ms']:.1f} ms  "
                    f"p99 {run['commit_p99_ms']:.1f} ms  brokers {run['broker_cpu_ms_per_txn']:.1f} CPU-ms/txn")
    return _median(runs, SECTION_KEYS["txn"])


def java_txn_phase(c: Cluster, tag: str, args) -> dict:
    """The Java client's transactions on an RF-3 topic at transaction version 1, then 2."""
    out = {}
    for level in (1, 2):
        tb.set_transaction_version(c.bootstrap.split(",")[0], level)

        def one(topic: str) -> dict:
            b0, _ = cluster_cpu(c)
            run = tb.java_txn_run(c.bootstrap, topic, args.txns, args.txn_records, args.record_size, None)
            b1, _ = cluster_cpu(c)
            run["broker_cpu_ms_per_txn"] = (b1 - b0) * 1000 / args.txns
            return run

        runs = measured_runs(
            c, f"cb-{tag}-java-tv{level}", args.txn_runs, args,
            f"Java client, transaction version {level}: {args.txns} x ({args.txn_records} x {args.record_size} B, "
            f"commit)", one,
            lambda run: f"{run['txn_s']:.0f} txn/s  commit p50 {run['commit_p50_ms']:.1f} ms  "
                        f"p99 {run['commit_p99_ms']:.1f} ms  brokers {run['broker_cpu_ms_per_txn']:.1f} CPU-ms/txn")
        out[f"tv{level}"] = _median(runs, SECTION_KEYS["txn"])
    return out


def _wait(cond, timeout: float, step: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


class TxnLoop(threading.Thread):
    """One transactional producer committing small transactions (one record each) to one
    partition, back to back, until stopped; it records every commit and every error, and
    carries on as an application would: retriable -> call again, abortable -> abort,
    fatal -> a new producer with the same transactional.id."""

    def __init__(self, bootstrap: str, txid: str, topic: str, partition: int, args):
        super().__init__(daemon=True, name=f"txn-{txid}")
        self.bootstrap, self.txid, self.topic, self.partition = bootstrap, txid, topic, partition
        self.payload = os.urandom(args.failover_record_size)
        self.period = args.txn_failover_interval_ms / 1000
        self.call_timeout = args.txn_call_timeout
        self.stop = threading.Event()
        self.commits: list[tuple[float, float]] = []        # (commit_transaction() called, returned)
        self.errors: list[tuple[float, str, str, str]] = []  # (time, call, error name, kind)
        self.producers = 0
        self.in_commit: float | None = None  # when the commit_transaction() under way was called

    def _new_producer(self):
        p = ck.Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.txid,
                         "linger.ms": 0, "acks": "all"})
        self.producers += 1
        while not self.stop.is_set():
            try:
                p.init_transactions(self.call_timeout)
                return p
            except ck.KafkaException as e:
                if self._note("init_transactions", e) == "fatal":
                    return self._new_producer()
        return None

    def _note(self, call: str, e: ck.KafkaException) -> str:
        err = e.args[0]
        kind = ("fatal" if err.fatal() else "abort" if err.txn_requires_abort()
                else "retriable" if err.retriable() else "other")
        self.errors.append((time.monotonic(), call, err.name(), kind))
        return kind

    def _call(self, call: str, fn) -> str | None:
        """fn(timeout) until it succeeds (None) or fails for good ('abort', 'fatal')."""
        while not self.stop.is_set():
            try:
                fn(self.call_timeout)
                return None
            except ck.KafkaException as e:
                kind = self._note(call, e)
                if kind in ("abort", "fatal"):
                    return kind
                time.sleep(0.01)  # retriable (or unclassified): call again
        return "stopped"

    def run(self) -> None:
        p = self._new_producer()
        while p is not None and not self.stop.is_set():
            t_begin = time.monotonic()
            try:
                p.begin_transaction()
                p.produce(self.topic, self.payload, partition=self.partition)
            except ck.KafkaException as e:
                outcome = self._note("begin/produce", e)
            else:
                t0 = self.in_commit = time.monotonic()
                outcome = self._call("commit_transaction", p.commit_transaction)
                self.in_commit = None
                if outcome is None:
                    self.commits.append((t0, time.monotonic()))
            if outcome == "abort":
                outcome = self._call("abort_transaction", p.abort_transaction)
            if outcome in ("fatal", "other"):
                p = self._new_producer()
            time.sleep(max(0.0, t_begin + self.period - time.monotonic()))

    def first_commit_after(self, t: float) -> tuple[float, float] | None:
        return next(((c0, c1) for c0, c1 in list(self.commits) if c0 > t), None)


def txn_failover(c: Cluster, topic: str, args) -> dict:
    """kill -9 the transaction coordinator of a producer committing small transactions; the
    time to its first commit_transaction() called after the kill that succeeded."""
    from tools.kafka_client import TRANSACTION_KEY

    txid = f"cb-txn-fo-{uuid.uuid4().hex[:8]}"
    coord = find_coordinator(c.bootstrap, txid, TRANSACTION_KEY)
    leaders = partition_leaders(c.bootstrap, topic)
    # the records go to a partition the coordinator does not lead: only the coordinator moves
    part = next((p for p, lead in sorted(leaders.items()) if lead != coord and lead in c.alive()), 0)
    loop = TxnLoop(c.bootstrap, txid, topic, part, args)
    loop.start()
    try:
        if not _wait(lambda: len(loop.commits) >= 3, 60):
            raise RuntimeError(f"transactional producer {txid}: no commits in 60 s: {loop.errors[-3:]}")
        time.sleep(args.failover_warm_s)
        before = len(loop.commits)
        coord = find_coordinator(c.bootstrap, txid, TRANSACTION_KEY)  # still the same, normally
        log(f"{c.name}:   {txid}: coordinator {coord}, records to partition {part} (leader "
            f"{leaders[part]}); {before} commits in the warm-up; kill -9 {coord}")
        t_kill = time.monotonic()
        c.kill9(coord)
        in_commit = loop.in_commit
        _wait(lambda: loop.first_commit_after(t_kill) is not None, args.failover_timeout, 0.005)
    finally:
        loop.stop.set()
        loop.join(loop.call_timeout * 3)
    first = loop.first_commit_after(t_kill)
    errs = [e for e in loop.errors if e[0] > t_kill]
    res = {"transactional_id": txid, "killed": coord, "partition": part, "partition_leader": leaders[part],
           "commits_before_kill": before, "producers": loop.producers,
           # a commit_transaction() was under way at the kill (its EndTxn may be in the dead broker)
           "commit_in_flight_at_kill": in_commit is not None,
           "errors_after_kill": len(errs),
           "error_kinds": sorted({f"{call}: {name} ({kind})" for _, call, name, kind in errs})}
    any_ok = next((c1 for c0, c1 in loop.commits if c1 > t_kill), None)
    if any_ok is not None:
        res["first_return_s"] = any_ok - t_kill  # may be a commit the old coordinator had decided
    if first is None:
        log(f"{c.name}:   no commit within {args.failover_timeout} s after the kill; errors {res['error_kinds']}")
        return res
    res["failover_s"] = first[1] - t_kill
    res["commit_call_s"] = first[1] - first[0]
    with contextlib.suppress(Exception):
        res["new_coordinator"] = find_coordinator(c.bootstrap, txid, TRANSACTION_KEY, 10)
    log(f"{c.name}:   first commit after the kill returned {res['failover_s']:.2f} s after it "
        f"(new coordinator {res.get('new_coordinator')}); errors meanwhile: {res['error_kinds']}")
    return res


class GroupMember(threading.Thread):
    """A confluent-kafka consumer (classic protocol, librdkafka's defaults) in a group: it
    records its assignments and commits its assigned partitions' offsets synchronously every
    `commit_every` seconds (an OffsetCommit to the group coordinator with its member id and
    generation), recording each outcome."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, commit_every: float = 0.2):
        super().__init__(daemon=True, name=name)
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"}
        self.topic, self.commit_every = topic, commit_every
        self.stop = threading.Event()
        self.assigns: list[tuple[float, list[int]]] = []
        self.revokes: list[float] = []
        self.commits: list[tuple[float, str | None]] = []  # (returned, error name or None)
        self.assignment: list[int] = []

    def run(self) -> None:
        cons = ck.Consumer(self.conf)

        def on_assign(_c, parts):
            self.assignment = sorted(p.partition for p in parts)
            self.assigns.append((time.monotonic(), self.assignment))

        def on_revoke(_c, _parts):
            self.assignment = []
            if not self.stop.is_set():  # close() revokes too: not a rebalance
                self.revokes.append(time.monotonic())

        cons.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        nxt = time.monotonic()
        try:
            while not self.stop.is_set():
                cons.poll(0.05)
                if self.assignment and time.monotonic() >= nxt:
                    nxt = time.monotonic() + self.commit_every
                    offs = [ck.TopicPartition(self.topic, p, 0) for p in self.assignment]
                    try:
                        cons.commit(offsets=offs, asynchronous=False)
                        self.commits.append((time.monotonic(), None))
                    except ck.KafkaException as e:
                        self.commits.append((time.monotonic(), e.args[0].name()))
        finally:
            cons.close()

    def assigned_after(self, t: float) -> float | None:
        return next((ta for ta, _ in list(self.assigns) if ta > t), None)

    def revoked_after(self, t: float) -> float | None:
        return next((tr for tr in list(self.revokes) if tr > t), None)

    def committed_after(self, t: float) -> float | None:
        return next((tc for tc, err in list(self.commits) if tc > t and err is None), None)


def group_failover(c: Cluster, topic: str, args) -> dict:
    """kill -9 the group coordinator of a steady 3-member group; the time until the group is
    served again (every member's OffsetCommit accepted) and until a rebalance completed."""
    from tools.kafka_client import GROUP_KEY

    group = f"cb-grp-{uuid.uuid4().hex[:8]}"
    members = [GroupMember(c.bootstrap, group, topic, f"{group}-m{i}") for i in range(args.group_members)]
    for m in members:
        m.start()
    everything = list(range(args.partitions))

    def settled(ms) -> bool:  # the members' assignments split the topic, each has one
        return all(m.assignment for m in ms) and sorted(p for m in ms for p in m.assignment) == everything

    joiner = None
    try:
        if not _wait(lambda: settled(members) and all(m.committed_after(max(t for t, _ in m.assigns))
                                                      for m in members), 90):
            raise RuntimeError(f"group {group}: members not assigned and committing in 90 s: "
                               f"{[(m.assignment, m.commits[-1:]) for m in members]}")
        time.sleep(args.failover_warm_s)
        coord = find_coordinator(c.bootstrap, group, GROUP_KEY)
        log(f"{c.name}:   group {group}: {len(members)} members "
            f"{[m.assignment for m in members]}, coordinator {coord}; kill -9 {coord}")
        t_kill = time.monotonic()
        c.kill9(coord)
        if args.group_joiner:
            joiner = GroupMember(c.bootstrap, group, topic, f"{group}-joiner")
            joiner.start()
            members.append(joiner)

        def done() -> bool:
            served = all(m.committed_after(t_kill) for m in members)
            rebalanced = all(m.assigned_after(t_kill) for m in members) and settled(members)
            # without a joiner the group need not rebalance: served is the end; with one, both
            return served and (rebalanced or not args.group_joiner)
        _wait(done, args.failover_timeout, 0.01)
        if not args.group_joiner:  # a rebalance the move itself started: wait for its end too
            _wait(lambda: not any(m.revoked_after(t_kill) for m in members)
                  or (all(m.assigned_after(t_kill) for m in members) and settled(members)), 30)
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(30)
    res: dict = {"group": group, "killed": coord, "members": len(members), "joiner": bool(joiner)}
    served = [m.committed_after(t_kill) for m in members if m is not joiner]
    assigned = [m.assigned_after(t_kill) for m in members]
    res["revoked_after_kill"] = sum(m.revoked_after(t_kill) is not None for m in members)

    def rel(t):
        return None if t is None else round(t - t_kill, 3)
    # per member, seconds after the kill: first revoke, assignment, accepted commit; commit errors
    res["timeline"] = {m.name: {"revoked": rel(m.revoked_after(t_kill)), "assigned": rel(m.assigned_after(t_kill)),
                                "commit_ok": rel(m.committed_after(t_kill)),
                                "commit_errors": [(rel(t), e) for t, e in m.commits if t > t_kill and e]}
                       for m in members}
    res["commit_errors_after_kill"] = sorted({e for m in members for t, e in m.commits if t > t_kill and e})
    if all(served):
        res["served_s"] = max(served) - t_kill
    if all(assigned):
        res["rebalance_s"] = max(assigned) - t_kill
    res["failover_s"] = res.get("rebalance_s") if args.group_joiner else res.get("served_s")
    with contextlib.suppress(Exception):
        res["new_coordinator"] = find_coordinator(c.bootstrap, group, GROUP_KEY, 10)
    log(f"{c.name}:   every member's commit accepted {_f(res.get('served_s'), 2)} s after the kill; "
        f"rebalance completed {_f(res.get('rebalance_s'), 2)} s ({res['revoked_after_kill']} members "
        f"revoked); new coordinator {res.get('new_coordinator')}; commit errors "
        f"{res['commit_errors_after_kill']}")
    return res


# =========================================================================== a whole node lost
MACHINE_KEYS = ("acks_s", "create_s", "group_s", "txn_s", "failover_s")


def machine_by_role(trials: list[dict]) -> dict:
    """Medians of the machine-loss trials per role of the node lost ("leader": it ran the
    metadata quorum's leader; "follower": it did not)."""
    out = {}
    for role in sorted({t["role"] for t in trials if "role" in t}):
        med = _median([t for t in trials if t.get("role") == role], MACHINE_KEYS)
        med["trials"] = len(med.pop("runs"))
        out[role] = med
    return out


def ensure_coordinator_topics(c: Cluster, timeout: float = 120.0) -> None:
    """__consumer_offsets and __transaction_state made (a first FindCoordinator creates each)
    and in full ISR, so that no trial pays for their creation."""
    from tools.kafka_client import GROUP_KEY, TRANSACTION_KEY

    for key_type in (GROUP_KEY, TRANSACTION_KEY):
        find_coordinator(c.bootstrap, f"cb-first-{uuid.uuid4().hex[:6]}", key_type, timeout)
    for name in (OFFSETS, TXN_STATE):
        wait_isr(c.bootstrap, name, None, 3, timeout)


def coordinated_id(c: Cluster, prefix: str, key_type: int, node: int, tries: int = 60) -> tuple[str, bool]:
    """A fresh group or transactional id whose coordinator (FindCoordinator) is `node`, and
    whether one was found in `tries` names: a new group or producer whose coordinator is on the
    lost node, the case where the coordinator itself must move."""
    tag = uuid.uuid4().hex[:6]
    key = f"{prefix}-{tag}"
    for i in range(tries):
        key = f"{prefix}-{tag}-{i}"
        if find_coordinator(c.bootstrap, key, key_type) == node:
            return key, True
    return key, False


def new_group_served(bootstrap: str, group: str, topic: str, t0: float, timeout: float, out: dict) -> None:
    """One consumer of a new group subscribes to `topic`, reads a record and commits its
    position synchronously, the commit called again until accepted; into `out`: ``read_s`` and
    ``group_s`` (the accepted commit), seconds after `t0`."""
    errors: list[str] = []
    out["commit_errors"] = errors
    cons = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": group,
                        "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        cons.subscribe([topic])
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            msg = cons.poll(0.05)
            if msg is not None and msg.error() is None and "read_s" not in out:
                out["read_s"] = time.monotonic() - t0
            if "read_s" not in out:
                continue
            try:
                cons.commit(asynchronous=False)
            except ck.KafkaException as e:
                if e.args[0].name() not in errors:
                    errors.append(e.args[0].name())
                time.sleep(0.1)
                continue
            out["group_s"] = time.monotonic() - t0
            break
    finally:
        cons.close()


def machine_failover(c: Cluster, topic: str, args, trial: int) -> dict:
    """kill -9 of a whole node (ours: its broker and the etcd member beside it; Kafka: its
    combined broker+controller JVM) under an idempotent acks=all trickle to every partition of
    an RF-3, min.insync.replicas=2 topic; from the kill: acks on every partition, a new RF-3
    topic, a new group served, a new transaction committed.

    Trials 1, 3, ... (`trial` 0, 2, ...) lose the node leading the metadata quorum (ours: etcd's
    Raft leader; Kafka: the active controller), trials 2, 4, ... a node that does not (preferring
    one that is not our controller either). The new group's and producer's coordinator is on the
    lost node."""
    from tools.kafka_client import GROUP_KEY, TRANSACTION_KEY

    leader, controller = c.metadata_leader(), c.controller_id()
    role = "leader" if trial % 2 == 0 else "follower"
    if role == "leader":
        victim = leader
    else:
        others = sorted(n for n in c.alive() if n != leader)
        victim = next((n for n in others if n != controller), others[0])
    group, group_on_victim = coordinated_id(c, "cb-mach-grp", GROUP_KEY, victim)
    txid, txn_on_victim = coordinated_id(c, "cb-mach-txn", TRANSACTION_KEY, victim)
    leaders = partition_leaders(c.bootstrap, topic)
    # the transaction's record goes to a partition the lost node did not lead: acks_s has those
    txn_part = next((p for p, lead in sorted(leaders.items()) if lead != victim), 0)

    kill: dict[str, float] = {}
    acked_after: dict[int, float] = {}  # partition -> first ack of a record sent after the kill
    delivery_errors: list[tuple[float, str]] = []
    acks = 0

    def delivered(err, msg, sent: float) -> None:
        nonlocal acks
        if err is not None:
            delivery_errors.append((time.monotonic(), str(err)))
            return
        acks += 1
        if "t" in kill and sent > kill["t"] and msg.partition() not in acked_after:
            acked_after[msg.partition()] = time.monotonic()

    p = ck.Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 0, "message.timeout.ms": int(args.failover_timeout * 1000),
                     "queue.buffering.max.messages": 1_000_000})
    p.list_topics(topic=topic, timeout=30)
    payload = os.urandom(args.failover_record_size)
    period = args.failover_interval_ms / 1000
    nxt = time.monotonic()

    def trickle(until: float, stop_when=None) -> None:
        nonlocal nxt
        while time.monotonic() < until:
            if time.monotonic() >= nxt:
                sent = time.monotonic()
                for part in leaders:
                    p.produce(topic, payload, partition=part,
                              on_delivery=lambda e, m, s=sent: delivered(e, m, s))
                nxt += period
            p.poll(0.001)
            if stop_when is not None and stop_when():
                return

    trickle(time.monotonic() + args.failover_warm_s)
    acks_before = acks
    what = (f"{c.metadata_leader_name} {leader}" + (f", controller {controller}" if controller != leader else ""))
    log(f"{c.name}:   trial {trial + 1}: losing node {victim} ({role}: {what}); group {group} and "
        f"transactional id {txid} coordinated by node {victim}: {group_on_victim}/{txn_on_victim}; "
        f"{acks_before} acks in the {args.failover_warm_s:g} s warm trickle; kill -9")
    t_kill = kill["t"] = time.monotonic()
    c.kill_machine(victim)
    found: dict = {}
    workers = [
        threading.Thread(target=lambda: found.update(
            create=create_until_led(c, t_kill, args, args.machine_probe_partitions, 3, "cb-mach")), daemon=True),
        threading.Thread(target=new_group_served, daemon=True, args=(
            c.bootstrap, group, topic, t_kill, args.failover_timeout, found.setdefault("group", {}))),
    ]
    txn = TxnLoop(c.bootstrap, txid, topic, txn_part, args)
    for w in [*workers, txn]:
        w.start()

    def done() -> bool:
        return len(acked_after) == len(leaders) and bool(txn.commits) and not any(w.is_alive() for w in workers)

    try:
        trickle(t_kill + args.failover_timeout, stop_when=done)
    finally:
        txn.stop.set()
        for w in workers:
            w.join(10)
        txn.join(txn.call_timeout * 3)
        left = p.flush(args.failover_timeout)
    res: dict = {"role": role, "killed": victim, "metadata_leader": leader, "controller": controller,
                 "group_coordinator_on_killed": group_on_victim, "txn_coordinator_on_killed": txn_on_victim,
                 "acks_before_kill": acks_before, "delivery_errors": len(delivery_errors),
                 "first_error": delivery_errors[0][1] if delivery_errors else None, "undelivered": left,
                 "acks_by_partition": {part: {"leader": leaders[part],
                                              "acks_s": round(acked_after[part] - t_kill, 3)
                                              if part in acked_after else None} for part in leaders}}
    if c.name == "ours":
        res["killed_etcd_member"] = victim
    if len(acked_after) == len(leaders):
        res["acks_s"] = max(acked_after.values()) - t_kill
    create = found.get("create", {})
    if "failover_s" in create:
        res["create_s"] = create["failover_s"]
    res["create"] = create
    group_out = found.get("group", {})
    if "group_s" in group_out:
        res["group_s"] = group_out["group_s"]
    res["group"] = {"id": group, **group_out}
    if txn.commits:
        res["txn_s"] = txn.commits[0][1] - t_kill
    res["txn"] = {"transactional_id": txid, "partition": txn_part, "producers": txn.producers,
                  "errors": sorted({f"{call}: {name} ({kind})" for _, call, name, kind in txn.errors})}
    if all(k in res for k in MACHINE_KEYS[:4]):
        res["failover_s"] = max(res[k] for k in MACHINE_KEYS[:4])
    with contextlib.suppress(Exception):
        res["new_metadata_leader"] = c.metadata_leader()
    log(f"{c.name}:   acks on every partition {_f(res.get('acks_s'), 2)} s, topic created and led "
        f"{_f(res.get('create_s'), 2)} s, new group read and committed {_f(res.get('group_s'), 2)} s, "
        f"new transaction committed {_f(res.get('txn_s'), 2)} s after the kill; new {c.metadata_leader_name} "
        f"{res.get('new_metadata_leader')}; {len(delivery_errors)} delivery errors; commit errors "
        f"{group_out.get('commit_errors')}; txn errors {res['txn']['errors']}")
    return res


# =========================================================================== metadata writes
def metadata_writes(c: Cluster, tag: str, args) -> dict:
    """--metadata-topics topics of --metadata-partitions partitions at RF 3, CreateTopics in
    requests of --metadata-batch topics one after the other: seconds until every request was
    answered and until every partition is led with a full ISR, the CPU meanwhile; then the
    topics deleted (DeleteTopics, same batches) until none is listed."""
    runs = []
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    total = args.metadata_topics * args.metadata_partitions
    for r in range(args.metadata_runs):
        names = [f"cb-{tag}-mw{r}-{i:04d}" for i in range(args.metadata_topics)]
        log(f"{c.name}: metadata writes, run {r + 1}/{args.metadata_runs}: {args.metadata_topics} topics x "
            f"{args.metadata_partitions} partitions, RF 3, in requests of {args.metadata_batch} topics")
        b0, e0 = cluster_cpu(c)
        t0 = time.monotonic()
        run: dict = {"topics": args.metadata_topics, "partitions": total,
                     "created_s": create_many(c.bootstrap, names, args.metadata_partitions, 3, args.metadata_batch)}
        while not topics_complete(c.bootstrap, set(names), args.metadata_partitions):
            if time.monotonic() - t0 > args.metadata_timeout:
                raise TimeoutError(f"{total} partitions not all led with a full ISR {args.metadata_timeout} s "
                                   f"after the first CreateTopics")
            time.sleep(0.5)
        run["isr_full_s"] = time.monotonic() - t0
        b1, e1 = cluster_cpu(c)
        run["broker_cpu_s"] = b1 - b0
        if c.extra_pids():
            run["etcd_cpu_s"] = e1 - e0
        t1 = time.monotonic()
        for i in range(0, len(names), args.metadata_batch):
            for f in admin.delete_topics(names[i:i + args.metadata_batch], operation_timeout=180,
                                         request_timeout=180).values():
                f.result(240)
        while set(names) & set(admin.list_topics(timeout=10).topics):
            if time.monotonic() - t1 > args.metadata_timeout:
                raise TimeoutError(f"topics still listed {args.metadata_timeout} s after DeleteTopics")
            time.sleep(0.5)
        run["deleted_s"] = time.monotonic() - t1
        log(f"{c.name}:   every request answered {run['created_s']:.1f} s, every ISR full {run['isr_full_s']:.1f} s "
            f"after the first CreateTopics (brokers {run['broker_cpu_s']:.1f} CPU-s"
            + (f", etcd {run['etcd_cpu_s']:.1f} CPU-s" if "etcd_cpu_s" in run else "")
            + f"); deleted in {run['deleted_s']:.1f} s")
        runs.append(run)
    return _median(runs, SECTION_KEYS["metadata_writes"])


# =========================================================================== one target
def bench_target(c: Cluster, args) -> dict:
    res: dict = {"target": c.name, "version": c.version, "loadavg_before": os.getloadavg()}
    t0 = time.monotonic()
    c.start()
    res["startup_s"] = round(time.monotonic() - t0, 2)
    res["bootstrap"] = c.bootstrap
    res["pids"] = c.broker_pids()
    res["governing_settings"] = c.governing_settings()
    log(f"{c.name}: ready in {res['startup_s']} s; {res['governing_settings']}")
    try:
        tag = uuid.uuid4().hex[:6]
        n = max(1, int(args.mb * MB) // args.record_size)
        if args.idle_seconds:
            # background CPU of the idle cluster (heartbeats, fetchers, timers): it is part of
            # every CPU-s/GB figure, most of all in the paced phase
            b0, e0 = cluster_cpu(c)
            time.sleep(args.idle_seconds)
            b1, e1 = cluster_cpu(c)
            res["idle_broker_cores"] = (b1 - b0) / args.idle_seconds
            if c.extra_pids():
                res["idle_etcd_cores"] = (e1 - e0) / args.idle_seconds
            log(f"{c.name}: idle for {args.idle_seconds:g} s: brokers {res['idle_broker_cores']:.3f} cores")
        if args.warmup_mb and {"max", "rate"} & args.phases:
            topic = f"cb-{tag}-warmup"
            create_topic(c.bootstrap, topic, args.partitions, 3)
            nw = max(1, int(args.warmup_mb * MB) // args.record_size)
            log(f"{c.name}: warm-up (not measured): {nw} records into {topic}")
            pb.produce_run(c.bootstrap, topic, nw, args.record_size, "all", args.linger_ms, None,
                           timeout=args.timeout, queue_kb=args.queue_kb)

        if "max" in args.phases:
            runs = measured_runs(
                c, f"cb-{tag}-max", args.runs, args,
                f"max rate: {n} x {args.record_size} B, acks=all ({args.partitions} partitions, RF 3)",
                lambda topic: produce(c, topic, n, args),
                lambda run: f"{run['mb_s']:.1f} MB/s  p50 {run['p50_ms']:.1f} ms  p99 {run['p99_ms']:.1f} ms  "
                            f"brokers {run['broker_cpu_s_per_gb']:.1f} CPU-s/GB  "
                            f"client {run['client_cores']:.2f} cores")
            res["max"] = _median(runs, SECTION_KEYS["max"])

        if "rate" in args.phases:
            rate = args.rate_mb * MB / args.record_size
            n_rate = max(1, int(rate * (args.rate_seconds + args.rate_skip)))
            runs = measured_runs(
                c, f"cb-{tag}-rate", args.rate_runs, args,
                f"paced: {args.rate_mb:g} MB/s for {args.rate_seconds:g} s "
                f"(+{args.rate_skip:g} s start-up, not in percentiles)",
                lambda topic: produce(c, topic, n_rate, args, rate=rate, skip_s=args.rate_skip),
                lambda run: f"achieved {run['mb_s']:.1f} MB/s  p50 {run['p50_ms']:.1f} ms  "
                            f"p99 {run['p99_ms']:.1f} ms  p99.9 {run['p999_ms']:.1f} ms  "
                            f"brokers {run['broker_cpu_s_per_gb']:.1f} CPU-s/GB")
            res["rate"] = _median(runs, SECTION_KEYS["rate"])
            res["rate"]["target_mb_s"] = args.rate_mb

        if "txn" in args.phases:
            res["txn"] = txn_phase(c, tag, args)
        if "java-txn" in args.phases:
            res["java_txn"] = java_txn_phase(c, tag, args)

        if {"leader", "controller", "etcd-leader", "txn-failover", "group-failover"} & args.phases:
            fo_topic = f"cb-{tag}-failover"
            create_topic(c.bootstrap, fo_topic, args.partitions, 3)
        healthy = True
        if "leader" in args.phases:
            healthy = failover_trials(c, "leader_failover", leader_failover, fo_topic, args, res)
        if "controller" in args.phases and healthy:
            healthy = failover_trials(c, "controller_failover", controller_failover, fo_topic, args, res)
        if "etcd-leader" in args.phases and healthy:
            if isinstance(c, OursCluster) and len(c.extra_pids()) > 1:
                healthy = failover_trials(c, "etcd_leader_failover", etcd_leader_failover, fo_topic, args, res)
            else:  # Kafka's metadata quorum leader is its active controller: the controller phase
                log(f"{c.name}: etcd-leader phase skipped (ours with more than one etcd member only)")
        if "machine" in args.phases and healthy:
            m_topic = f"cb-{tag}-machine"
            create_topic(c.bootstrap, m_topic, args.partitions, 3, config={"min.insync.replicas": "2"})
            ensure_coordinator_topics(c)
            trial_no = itertools.count()
            healthy = failover_trials(c, "machine_failover",
                                      lambda c_, t_, a_: machine_failover(c_, t_, a_, next(trial_no)),
                                      m_topic, args, res, every_topic=True)
        if "txn-failover" in args.phases and healthy:
            healthy = failover_trials(c, "txn_failover", txn_failover, fo_topic, args, res,
                                      (TXN_STATE, OFFSETS), args.coordinator_trials)
        if "group-failover" in args.phases and healthy:
            healthy = failover_trials(c, "group_failover", group_failover, fo_topic, args, res,
                                      (TXN_STATE, OFFSETS), args.coordinator_trials)
        if "metadata-writes" in args.phases and healthy:
            res["metadata_writes"] = metadata_writes(c, tag, args)
        res["loadavg_after"] = os.getloadavg()
    finally:
        log(f"{c.name}: stopping (pids {c.broker_pids()})")
        c.stop()
    return res


def merge_rounds(rounds: list[dict]) -> dict:
    """One result per target: the medians over the runs/trials of every round."""
    if len(rounds) == 1:
        return rounds[0]
    ok = [r for r in rounds if "error" not in r]
    if not ok:
        return rounds[-1]
    out: dict = {"target": ok[0]["target"], "version": ok[0]["version"],
                 "governing_settings": ok[0].get("governing_settings"),
                 "startup_s": statistics.median(r["startup_s"] for r in ok)}
    for k in ("idle_broker_cores", "idle_etcd_cores"):
        vals = [r[k] for r in ok if r.get(k) is not None]
        if vals:
            out[k] = statistics.median(vals)
    for sec, keys in SECTION_KEYS.items():
        runs = [run for r in ok for run in r.get(sec, {}).get("runs", [])]
        if runs:
            out[sec] = _median(runs, keys, with_max=sec.endswith("_failover"))
    if "rate" in out:
        out["rate"]["target_mb_s"] = ok[0]["rate"]["target_mb_s"]
    if "machine_failover" in out:
        out["machine_failover"]["by_role"] = machine_by_role(out["machine_failover"]["runs"])
    errors = [r["error"] for r in rounds if "error" in r]
    if errors:
        out["round_errors"] = errors
    phase_errors = [f"round {i + 1}: {e}" for i, r in enumerate(rounds) for e in r.get("errors", [])]
    if phase_errors:
        out["errors"] = phase_errors
    # per-round figures without the runs (those are in the merged sections above)
    out["rounds"] = [{k: ({kk: vv for kk, vv in v.items() if kk != "runs"} if isinstance(v, dict) else v)
                      for k, v in r.items()} for r in rounds]
    return out


# =========================================================================== report
def metric_rows(res: dict) -> list[tuple[str, object]]:
    m, r = res.get("max", {}), res.get("rate", {})
    lf, cf = res.get("leader_failover", {}), res.get("controller_failover", {})
    tx, tf, gf = res.get("txn", {}), res.get("txn_failover", {}), res.get("group_failover", {})
    ef, mf, mw = res.get("etcd_leader_failover", {}), res.get("machine_failover", {}), res.get("metadata_writes", {})
    roles = mf.get("by_role", {})
    # the metadata quorum's leader: ours etcd's Raft leader, Kafka's the active controller
    quorum = ef if res.get("target") == "ours" else cf
    mw_run = (mw.get("runs") or [{}])[0]
    mw_what = f"{mw_run.get('topics')} topics, {mw_run.get('partitions')} partitions RF 3"
    rows = [
        ("startup s", res.get("startup_s")),
        ("idle broker CPU cores (3 brokers)", res.get("idle_broker_cores")),
        ("idle etcd CPU cores", res.get("idle_etcd_cores")),
        ("max MB/s (acks=all)", m.get("mb_s")),
        ("max p50 ms", m.get("p50_ms")),
        ("max p99 ms", m.get("p99_ms")),
        ("max broker CPU s/GB (3 brokers)", m.get("broker_cpu_s_per_gb")),
        ("max etcd CPU s/GB", m.get("etcd_cpu_s_per_gb")),
        ("max client CPU cores", m.get("client_cores")),
        (f"paced {_f(r.get('target_mb_s'), 0)} MB/s: achieved MB/s", r.get("mb_s")),
        ("paced p50 ms", r.get("p50_ms")),
        ("paced p99 ms", r.get("p99_ms")),
        ("paced p99.9 ms", r.get("p999_ms")),
        ("paced broker CPU s/GB (3 brokers)", r.get("broker_cpu_s_per_gb")),
        ("paced etcd CPU s/GB", r.get("etcd_cpu_s_per_gb")),
        ("leader kill -9 -> first new-leader ack s", lf.get("failover_s")),
        ("controller kill -9 -> topic created s", cf.get("failover_s")),
        ("etcd leader kill -9 -> topic created s", ef.get("failover_s")),
        ("quorum leader kill -9 -> topic created s (ours etcd, kafka controller)", quorum.get("failover_s")),
        ("node kill -9 -> acks on every partition s", mf.get("acks_s")),
        ("node kill -9 -> RF-3 topic created and led s", mf.get("create_s")),
        ("node kill -9 -> new group read and committed s", mf.get("group_s")),
        ("node kill -9 -> new transaction committed s", mf.get("txn_s")),
        ("node kill -9 -> all four s", mf.get("failover_s")),
        ("node kill -9 -> all four s, quorum leader's node", roles.get("leader", {}).get("failover_s")),
        ("node kill -9 -> all four s, a follower's node", roles.get("follower", {}).get("failover_s")),
        (f"{mw_what}: CreateTopics answered s", mw.get("created_s")),
        (f"{mw_what}: every ISR full s", mw.get("isr_full_s")),
        (f"{mw_what}: broker CPU s (3 brokers)", mw.get("broker_cpu_s")),
        (f"{mw_what}: etcd CPU s", mw.get("etcd_cpu_s")),
        (f"{mw_what}: deleted s", mw.get("deleted_s")),
        ("txn/s (10 x 1 KB, RF 3)", tx.get("txn_s")),
        ("txn commit p50 ms", tx.get("commit_p50_ms")),
        ("txn commit p99 ms", tx.get("commit_p99_ms")),
        ("txn broker CPU ms/txn (3 brokers)", tx.get("broker_cpu_ms_per_txn")),
        ("txn etcd CPU ms/txn", tx.get("etcd_cpu_ms_per_txn")),
        *[(f"Java TV{v} {label}", res.get("java_txn", {}).get(f"tv{v}", {}).get(key)) for v in (1, 2)
          for label, key in (("txn/s", "txn_s"), ("commit p50 ms", "commit_p50_ms"),
                             ("commit p99 ms", "commit_p99_ms"), ("broker CPU ms/txn", "broker_cpu_ms_per_txn"))],
        ("txn coordinator kill -9 -> first commit s", tf.get("failover_s")),
        ("group coordinator kill -9 -> all commits ok s", gf.get("served_s")),
        ("group coordinator kill -9 -> rebalance done s", gf.get("rebalance_s")),
    ]
    return [(k, v) for k, v in rows if v is not None]


def render(results: dict) -> tuple[str, dict]:
    names = [n for n in ("ours", "kafka") if n in results]
    ok = {n: results[n] for n in names if "error" not in results[n]}
    out, ratios = pb.ratio_table({n: metric_rows(r) for n, r in ok.items()}, digits=2)
    if any("machine_failover" in r for r in ok.values()):
        out.append("node kill -9: trials 1, 3, ... lose the node of the metadata quorum's leader (ours: the etcd "
                   "member leading etcd's Raft, with its broker; kafka: the active controller's JVM), trials 2, 4, "
                   "... a node without it; the new group's and transactional id's coordinator was on the lost node")
    for n in ok:
        out.append(f"{n} failover settings: " + ", ".join(
            f"{k}={v}" for k, v in (ok[n].get("governing_settings") or {}).items()))
        for err in ok[n].get("round_errors", []):
            out.append(f"{n}: a round FAILED: {err}")
        for err in ok[n].get("errors", []):
            out.append(f"{n}: {err}")
    return "\n".join(out + pb.failures(results, names)), ratios


# =========================================================================== main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=["ours", "kafka", "both"], default="both")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 8 MB per run, 1 run, 2 s paced phase, 1 failover trial each")
    ap.add_argument("--phases", default="max,rate,leader,controller",
                    help="comma list of max,rate,leader,controller,etcd-leader,machine,txn,java-txn,txn-failover,"
                         "group-failover,metadata-writes (or 'eos' for txn,txn-failover,group-failover)")
    ap.add_argument("--idle-seconds", type=float, default=None,
                    help="CPU of the idle cluster measured over this long after start-up (default 5; quick 2)")
    ap.add_argument("--mb", type=float, default=None, help="MB per max-rate run (default 128)")
    ap.add_argument("--runs", type=int, default=None, help="max-rate runs (default 2)")
    ap.add_argument("--warmup-mb", type=float, default=None, help="unmeasured warm-up (default 64; quick 4)")
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--queue-kb", type=int, default=32768)
    ap.add_argument("--rate-mb", type=float, default=20.0, help="paced phase rate, MB/s (default 20)")
    ap.add_argument("--rate-seconds", type=float, default=None, help="paced phase length (default 10)")
    ap.add_argument("--rate-skip", type=float, default=None,
                    help="paced phase: start-up seconds left out of the percentiles (default 1)")
    ap.add_argument("--rate-runs", type=int, default=None, help="paced runs (default 1)")
    ap.add_argument("--failover-trials", type=int, default=None,
                    help="kills per failover phase (default 2; quick 1); the median is reported")
    ap.add_argument("--failover-interval-ms", type=float, default=5.0, help="trickle producer period")
    ap.add_argument("--failover-record-size", type=int, default=100)
    ap.add_argument("--failover-warm-s", type=float, default=2.0, help="trickle before the kill")
    ap.add_argument("--failover-timeout", type=float, default=120.0)
    ap.add_argument("--probe-partitions", type=int, default=1, help="partitions of each CreateTopics probe")
    ap.add_argument("--probe-rf", type=int, default=2,
                    help="RF of each CreateTopics probe (default 2: two brokers are left alive)")
    ap.add_argument("--probe-timeout", type=float, default=3.0,
                    help="request/operation timeout of each CreateTopics probe (probes overlap)")
    ap.add_argument("--machine-probe-partitions", type=int, default=3,
                    help="machine: partitions of each CreateTopics attempt (RF 3)")
    ap.add_argument("--machine-probe-timeout", type=float, default=30.0,
                    help="machine: request/operation timeout of each CreateTopics attempt (one at a time)")
    ap.add_argument("--metadata-topics", type=int, default=None, help="metadata-writes: topics (default 100; quick 10)")
    ap.add_argument("--metadata-partitions", type=int, default=None,
                    help="metadata-writes: partitions per topic (default 100; quick 10)")
    ap.add_argument("--metadata-batch", type=int, default=50, help="metadata-writes: topics per CreateTopics")
    ap.add_argument("--metadata-runs", type=int, default=1, help="metadata-writes: runs (median)")
    ap.add_argument("--metadata-timeout", type=float, default=900.0,
                    help="metadata-writes: seconds for every ISR to fill, and for the topics to go")
    ap.add_argument("--txns", type=int, default=None, help="transactions per txn run (default 1000; quick 50)")
    ap.add_argument("--txn-runs", type=int, default=None, help="txn runs (default 2; quick 1)")
    ap.add_argument("--txn-warmup", type=int, default=None,
                    help="unmeasured transactions before the txn runs (default 200; quick 0)")
    ap.add_argument("--txn-records", type=int, default=10, help="records per transaction (txn phase)")
    ap.add_argument("--txn-failover-interval-ms", type=float, default=20.0,
                    help="txn-failover: a transaction (one record) begins at most this often")
    ap.add_argument("--coordinator-trials", type=int, default=None,
                    help="kills per coordinator failover phase (default 3; quick 1); median and max reported")
    ap.add_argument("--txn-call-timeout", type=float, default=60.0,
                    help="txn-failover: timeout of each init/commit/abort call (retriable: called again)")
    ap.add_argument("--group-members", type=int, default=3, help="group-failover: consumers in the group")
    ap.add_argument("--group-joiner", action=argparse.BooleanOptionalAction, default=True,
                    help="group-failover: a new member subscribes right after the kill, so the "
                         "group must complete a rebalance on the new coordinator (default on)")
    ap.add_argument("--heal-timeout", type=float, default=90.0,
                    help="after a kill: seconds to wait for the restarted node to rejoin every ISR")
    ap.add_argument("--timeout", type=float, default=600.0, help="per produce run")
    ap.add_argument("--ours-override", action="append", default=[], metavar="KEY=VALUE",
                    help="broker property for every node of our cluster (repeatable)")
    ap.add_argument("--etcd-members", type=int, default=None,
                    help="ours: etcd members, member i beside broker i (default: DevCluster's, one per node)")
    ap.add_argument("--kafka-heap", default=kraft_cluster.DEFAULT_CLUSTER_HEAP,
                    help="KAFKA_HEAP_OPTS for each of the three JVMs")
    ap.add_argument("--rounds", type=int, default=1,
                    help="fresh clusters per target, alternating the order (ours, kafka, kafka, ours, ...); "
                         "medians over every run and trial of all rounds")
    ap.add_argument("--keep", action="store_true", help="keep the clusters' temp dirs (logs, data)")
    ap.add_argument("--json", default=None,
                    help="output file (default bench/results/cluster_bench-<targets>-<time>.json)")
    args = ap.parse_args(argv)
    args.phases = {p.strip() for p in args.phases.replace("eos", "txn,txn-failover,group-failover").split(",")
                   if p.strip()}
    q = args.quick
    args.idle_seconds = args.idle_seconds if args.idle_seconds is not None else (2 if q else 5)
    args.mb = args.mb if args.mb is not None else (8 if q else 128)
    args.runs = args.runs if args.runs is not None else (1 if q else 2)
    args.warmup_mb = args.warmup_mb if args.warmup_mb is not None else (4 if q else 64)
    args.rate_seconds = args.rate_seconds if args.rate_seconds is not None else (2 if q else 10)
    args.rate_skip = args.rate_skip if args.rate_skip is not None else (0.5 if q else 1.0)
    args.rate_runs = args.rate_runs if args.rate_runs is not None else 1
    args.failover_trials = args.failover_trials if args.failover_trials is not None else (1 if q else 2)
    args.txns = args.txns if args.txns is not None else (50 if q else 1000)
    args.txn_runs = args.txn_runs if args.txn_runs is not None else (1 if q else 2)
    args.txn_warmup = args.txn_warmup if args.txn_warmup is not None else (0 if q else 200)
    args.coordinator_trials = args.coordinator_trials if args.coordinator_trials is not None else (1 if q else 3)
    args.metadata_topics = args.metadata_topics if args.metadata_topics is not None else (10 if q else 100)
    args.metadata_partitions = args.metadata_partitions if args.metadata_partitions is not None else (10 if q else 100)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    # SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so every cluster is stopped by pid
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    overrides = {**OURS_DEFAULT_OVERRIDES, **dict(kv.split("=", 1) for kv in args.ours_override)}
    names = ["ours", "kafka"] if args.target == "both" else [args.target]

    def make(name: str) -> Cluster:
        return (OursCluster(overrides, args.keep, args.etcd_members) if name == "ours"
                else KafkaCluster(args.kafka_heap, args.keep))

    per_round: dict[str, list[dict]] = {n: [] for n in names}
    t_all = time.monotonic()
    for rnd in range(args.rounds):
        # alternate the order (ours, kafka, kafka, ours, ...) so drifting load on the box
        # does not always hit the same target
        for name in (names if rnd % 2 == 0 else names[::-1]):
            c = make(name)
            log(f"=== {c.name} (round {rnd + 1}/{args.rounds}) ===")
            try:
                per_round[name].append(bench_target(c, args))
            except Exception as e:  # noqa: BLE001  (a failing target must not hide the other one)
                log(f"{c.name}: FAILED: {type(e).__name__}: {e}")
                per_round[name].append({"target": c.name, "error": f"{type(e).__name__}: {e}"})
    results = {n: merge_rounds(rs) for n, rs in per_round.items()}
    table, ratios = render(results)
    print(table, flush=True)
    doc = {
        "meta": {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "wall_s": round(time.monotonic() - t_all, 1),
            "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                     "python": platform.python_version(), "kernel": platform.release()},
            "client": {"confluent_kafka": ck.version()[0], "librdkafka": ck.libversion()[0]},
            "params": {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(args).items()},
            "units": "MB = 1e6 bytes, GB = 1e9 bytes; latency = delivery callback - produce() call; "
                     "CPU = utime+stime of the 3 broker processes per GB of record values; "
                     "failover = seconds from the kill -9",
        },
        "results": results,
        "ratios_ours_over_kafka": ratios,
    }
    path = Path(args.json) if args.json else (
        REPO / "bench" / "results" /
        f"cluster_bench-{'-'.join(results) or 'none'}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    log(f"wrote {path}")
    return 1 if any("error" in r or "errors" in r or "round_errors" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
