"""Cluster test helpers: a DevCluster per module, bounded polling for cluster conditions."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient

from tools.devcluster import DevCluster, etcd_binary

# Short lease and lag settings so failover happens in seconds on a 2-core machine.
FAST_FAILOVER = {
    "broker.session.timeout.ms": "2000",
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.backoff.ms": "100",
    "replica.fetch.wait.max.ms": "200",
    "leader.imbalance.check.interval.seconds": "2",
    "controlled.shutdown.timeout.ms": "10000",
}


def require_etcd() -> None:
    """etcd is installed by `make tools`; a CI run without it is a failure, not a skip."""
    if etcd_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("etcd is not installed (Debian package etcd-server)")
        pytest.skip("etcd is not installed (Debian package etcd-server; `make tools` installs it)")


def start_cluster(data_dir: str, nodes: int = 3, **overrides: str) -> DevCluster:
    require_etcd()
    cluster = DevCluster(data_dir, nodes, overrides={**FAST_FAILOVER, **overrides})
    try:
        cluster.start()
    except Exception:
        cluster.kill()
        raise
    return cluster


def produce_values(bootstrap: str, topic: str, n: int, partition: int = 0) -> list[bytes]:
    """Produce ``n`` distinct values to one partition with acks=all; returns them in order."""
    from confluent_kafka import Producer

    values = [b"value-%06d" % i for i in range(n)]
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for v in values:
        p.produce(topic, value=v, partition=partition)
    assert p.flush(60) == 0
    return values


def wait_for(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except Exception as exc:  # a broker may be down while we poll
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def describe(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) from a Metadata request."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=5)
    t = md.topics[topic]
    if t.error is not None:
        raise RuntimeError(str(t.error))
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in t.partitions.values()}


def quorum_leader(address: str, timeout: float = 5.0) -> int:
    """The controller, as DescribeQuorum's leader asked of the broker at ``address`` (Metadata
    and DescribeCluster name the answering broker instead, as KRaft names any live one)."""
    from tests.support.raw import RawClient

    with RawClient(address, timeout=timeout) as c:
        resp = c.call(55, 1, {"topics": [{"topic_name": "__cluster_metadata",
                                          "partitions": [{"partition_index": 0}]}]})
    (topic,) = resp.topics
    (partition,) = topic.partitions
    return partition.leader_id if partition.error_code == 0 else -1


def wait_isr_complete(cluster: DevCluster, topic: str, timeout: float = 60.0,
                      bootstrap: str | None = None) -> dict:
    """Until every partition of ``topic`` has a leader and all its replicas in the ISR (as
    ``bootstrap`` sees it: a broker cut off from etcd answers from its stale image)."""
    def complete():
        parts = describe(bootstrap or cluster.bootstrap, topic)
        ok = parts and all(leader >= 0 and sorted(isr) == sorted(replicas)
                           for leader, replicas, isr in parts.values())
        return parts if ok else None
    return wait_for(complete, timeout, f"a complete ISR on {topic}")


def restore(cluster: DevCluster, timeout: float = 60.0) -> None:
    """Bring every stopped node (broker and etcd member) back and wait until they are registered again."""
    for member in cluster.etcd_members.values():
        member.resume()
    if not all(m.alive for m in cluster.etcd_members.values()):
        cluster.start_etcd()
    for node in cluster.nodes.values():
        node.resume()
        if not node.alive:
            node.start()
    cluster.wait_registered(set(cluster.nodes), timeout)


INTERNAL_TOPICS = ("__transaction_state", "__consumer_offsets")
GROUP, TRANSACTION = 0, 1


def coordinator_node(cluster: DevCluster, key: str, key_type: int, timeout: float = 30.0) -> int:
    """The node FindCoordinator names for a group (0) or transactional id (1), asked of any
    live broker until one answers."""
    from tests.support.eos import find_coordinator
    from tests.support.raw import RawClient

    def ask():
        for node in cluster.nodes.values():
            if not node.alive:
                continue
            try:
                with RawClient(node.address, timeout=5) as c:
                    entry = find_coordinator(c, key, key_type, deadline_s=5)
            except OSError:
                continue
            if entry.error_code == 0 and cluster.nodes.get(entry.node_id) and cluster.nodes[entry.node_id].alive:
                return entry.node_id
        return None
    return wait_for(ask, timeout, f"a live coordinator for {key!r}")


def wait_preferred_leaders(cluster: DevCluster, topic: str, timeout: float = 60.0) -> None:
    """Every partition of ``topic`` led by its preferred replica, with a full ISR: the
    controller then has no leadership left to move back (auto.leader.rebalance.enable)."""
    wait_for(lambda: all(leader == replicas[0] and sorted(isr) == sorted(replicas)
                         for leader, replicas, isr in describe(cluster.bootstrap, topic).values()),
             timeout, f"preferred leaders on {topic}")


def wait_internal_isr_complete(cluster: DevCluster, timeout: float = 90.0) -> None:
    """Every partition of the coordinators' internal topics (those created so far) has all
    its replicas in sync."""
    (existing,) = wait_for(lambda: [AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=5).topics],
                           timeout, "the topic list")
    for topic in INTERNAL_TOPICS:
        if topic in existing:
            wait_isr_complete(cluster, topic, timeout)


@contextlib.contextmanager
def netns_cluster(data_dir: str, **overrides: str) -> Iterator[tuple[DevCluster, object]]:
    """Three brokers, each in its own network namespace behind a bridge (tests/support/netns.py),
    etcd on the bridge; skips where namespaces cannot be made. Yields (cluster, topology)."""
    from tests.support import netns

    reason = netns.available()
    if reason:
        pytest.skip(reason)
    require_etcd()
    topo = netns.Topology(3).create()
    cluster = DevCluster(data_dir, 3, base_port=9092, overrides={**FAST_FAILOVER, **overrides},
                         etcd_host=topo.host_ip, node_hosts={n: topo.node_ip(n) for n in topo.node_ids},
                         command_prefixes={n: topo.prefix(n) for n in topo.node_ids})
    try:
        cluster.start()
        yield cluster, topo
    finally:
        cluster.kill()
        topo.destroy()
