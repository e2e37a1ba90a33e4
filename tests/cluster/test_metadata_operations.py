"""The metadata store's runbook (docs/operations.md), step by step with etcdctl as an operator
runs it: a dead machine replaced (a new etcd member for the lost one, the broker back with its
node id on an empty disk), and a one-member store grown to three without downtime.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer

from tests.support.clients import consume_all, create_topic
from tests.support.cluster import FAST_FAILOVER, require_etcd, wait_for, wait_isr_complete
from tools.devcluster import DevCluster


def etcdctl(endpoints: str, *args: str, check: bool = True) -> str:
    if shutil.which("etcdctl") is None:
        if os.environ.get("CI"):
            pytest.fail("etcdctl is not installed (Debian package etcd-client)")
        pytest.skip("etcdctl is not installed (Debian package etcd-client; `make tools` installs it)")
    out = subprocess.run(["etcdctl", "--endpoints", endpoints, "--command-timeout=10s", *args],
                         env={**os.environ, "ETCDCTL_API": "3"}, capture_output=True, text=True, timeout=30)
    if not check:
        return out.stdout if out.returncode == 0 else ""
    assert out.returncode == 0, f"etcdctl {' '.join(args)}: {out.stderr.strip()}"
    return out.stdout


def member_add(cluster: DevCluster, member) -> str:
    """``etcdctl member add``, again while etcd answers "unhealthy cluster": it accepts a new
    voting member only once the one added before has been connected for a few seconds."""
    return wait_for(lambda: etcdctl(live_endpoints(cluster), "member", "add", member.name,
                                    f"--peer-urls={member.peer_url}", check=False), 30, f"etcd to accept {member.name}",
                    interval=0.5)


def live_endpoints(cluster: DevCluster) -> str:
    return ",".join(m.address for m in cluster.etcd_members.values() if m.alive)


def member_list(cluster: DevCluster) -> list[dict]:
    """``etcdctl member list`` of the live members: name, hex id, started or not."""
    raw = json.loads(etcdctl(live_endpoints(cluster), "member", "list", "-w", "json"))
    return [{"name": m.get("name", ""), "id": f"{m['ID']:x}", "started": bool(m.get("clientURLs"))}
            for m in raw["members"]]


def create_eventually(bootstrap: str, name: str) -> None:
    """CreateTopics (RF 3) retried until it succeeds: right after a member's loss the brokers
    may still be moving to another member, and a loaded machine slows the first try."""
    def attempt():
        try:
            create_topic(bootstrap, name, partitions=1, replication_factor=3)
        except Exception as exc:  # noqa: BLE001 - retried; a create that went through answers "exists"
            if "already exists" not in str(exc):
                raise
        return True
    wait_for(attempt, 60, f"the topic {name} to be created", interval=0.5)


class Writer:
    """An idempotent acks=all producer writing all along: every delivery error is kept."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acked: list[bytes] = []
        self.errors: list = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 5, "message.timeout.ms": 60000})
        self._thread = threading.Thread(target=self._run, args=(topic,), daemon=True)
        self._thread.start()

    def _run(self, topic: str) -> None:
        n = 0
        while not self._stop.is_set():
            self._producer.produce(topic, value=b"w-%07d" % n, on_delivery=self._done)
            self._producer.poll(0.01)
            n += 1

    def _done(self, err, msg) -> None:
        (self.errors.append(err) if err is not None else self.acked.append(msg.value()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(60)


@pytest.fixture
def cluster(tmp_path, request):
    require_etcd()
    members = getattr(request, "param", 3)
    c = DevCluster(str(tmp_path / "ops"), 3, etcd_members=members,
                   overrides={**FAST_FAILOVER, "metadata.etcd.endpoint.sync.interval.ms": "1000"})
    try:
        c.start()
        yield c
    finally:
        c.kill()


def test_replace_a_dead_machine(cluster):
    """Node 3 (broker and member) dies with its disk. The runbook: remove the dead member, add
    its replacement, start it on an empty data dir with --initial-cluster-state existing, start
    the broker with its node id on an empty log dir. The new member counts for the quorum, and
    the broker copies its replicas back into every ISR."""
    topic = f"replace-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_isr_complete(cluster, topic)
    writer = Writer(cluster.bootstrap, topic)
    try:
        node, member = cluster.node(3), cluster.etcd_members[3]
        node.kill9()
        member.kill9()
        node.wipe()
        member.wipe()
        dead = next(m for m in member_list(cluster) if m["name"] == member.name)
        # Again if it times out: a leader elected a moment ago (the dead member may have led)
        # proposes no membership change before its first commit, and etcd drops the request.
        wait_for(lambda: etcdctl(live_endpoints(cluster), "member", "remove", dead["id"], check=False)
                 or dead["id"] not in [m["id"] for m in member_list(cluster)], 60, "etcd to remove the dead member",
                 interval=0.5)
        assert member.name not in [m["name"] for m in member_list(cluster)]
        added = member_add(cluster, member)
        assert "ETCD_INITIAL_CLUSTER_STATE=\"existing\"" in added
        replacement = cluster.joining_etcd_member(3)
        replacement.start()
        wait_for(lambda: all(m["started"] for m in member_list(cluster)) and len(member_list(cluster)) == 3,
                 60, "the new member to join")
        node.start()
        cluster.wait_registered({1, 2, 3}, 60)
        parts = wait_isr_complete(cluster, topic, timeout=90)
        assert all(3 in isr for _, _, isr in parts.values())
        # The new member is one of three: with member 1 gone too, a quorum remains.
        cluster.etcd_members[1].kill9()
        create_eventually(cluster.bootstrap, f"after-{topic}")
    finally:
        writer.stop()
    assert writer.errors == [], f"{len(writer.errors)} writes failed: {writer.errors[:3]}"
    got = consume_all(cluster.bootstrap, topic, 3, len(writer.acked), timeout=60)
    assert sorted(m.value() for m in got) == sorted(writer.acked)


@pytest.mark.parametrize("cluster", [1], indirect=True)
def test_grow_the_store_from_one_member_to_three_without_downtime(cluster):
    """A cluster started on one member (a laptop's layout) gets two more while a producer
    writes; the brokers find them in the member list (etcd_endpoints_synced) and, once they have,
    the first member can be lost."""
    assert list(cluster.etcd_members) == [1]
    topic = f"grow-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_isr_complete(cluster, topic)
    writer = Writer(cluster.bootstrap, topic)
    try:
        for i in (2, 3):
            new = cluster.joining_etcd_member(i, host=cluster.etcd_host)
            member_add(cluster, new)
            new.start()
            wait_for(lambda n=i: sum(m["started"] for m in member_list(cluster)) == n, 30, f"member {i} to join")
        cluster.wait_etcd_healthy(30)
        wait_for(lambda: all("etcd_endpoints_synced" in n.output() for n in cluster.nodes.values()), 30,
                 "every broker to find the new members")
        cluster.etcd_members[1].kill9()
        wait_for(lambda: all("etcd_member_switched" in n.output() for n in cluster.nodes.values()), 30,
                 "every broker to move off the lost member")
        create_eventually(cluster.bootstrap, f"after-{topic}")
        time.sleep(1)  # a few more writes through the two members left
    finally:
        writer.stop()
    assert writer.errors == [], f"{len(writer.errors)} writes failed: {writer.errors[:3]}"
    got = consume_all(cluster.bootstrap, topic, 3, len(writer.acked), timeout=60)
    assert sorted(m.value() for m in got) == sorted(writer.acked)
