"""A node cut off by network namespaces: its broker and the etcd member beside it, from the other
two nodes and from the clients' side. A new leader is elected on the majority side; the cut
leader stops acknowledging acks=all at once (its followers cannot reach it, and its minority
member cannot change the ISR); what it took with acks=1 after the cut is truncated when it
rejoins; nothing acknowledged with acks=all, on either side, is lost."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from protocol import records as rb
from tests.support.clients import consume_all, create_topic
from tests.support.cluster import (
    describe,
    netns_cluster,
    produce_values,
    wait_for,
    wait_isr_complete,
)
from tools.devcluster import REPO

ISOLATED_ACKS_ALL = """
import json, sys, time
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "acks": "all", "enable.idempotence": True,
              "message.timeout.ms": 15000, "linger.ms": 2})
def done(err, msg):
    if err is None:
        print(json.dumps({"t": time.time(), "offset": msg.offset(), "value": msg.value().decode()}), flush=True)
end = time.time() + float(sys.argv[3])
n = 0
while time.time() < end:
    p.produce(sys.argv[2], value=b"isolated-%06d" % n, partition=0, on_delivery=done)
    p.poll(0.005)
    n += 1
p.flush(20)
"""

ISOLATED_PRODUCER = """
import sys
from confluent_kafka import Producer
acked = []
p = Producer({"bootstrap.servers": sys.argv[1], "acks": "1", "message.timeout.ms": 8000,
              "enable.idempotence": False, "retries": 0})
for i in range(int(sys.argv[3])):
    p.produce(sys.argv[2], value=b"after-cut-%05d" % i, partition=0,
              on_delivery=lambda err, msg: acked.append(msg.offset()) if err is None else None)
p.flush(15)
print(len(acked))
"""


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory):
    with netns_cluster(str(tmp_path_factory.mktemp("netns-cluster"))) as (cluster, topo):
        yield cluster, topo


def test_isolated_leader_is_replaced_and_its_acks1_writes_are_truncated(partitioned):
    cluster, topo = partitioned
    topic = f"cut-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    wait_isr_complete(cluster, topic)
    before = produce_values(cluster.bootstrap, topic, 1000)
    old = describe(cluster.bootstrap, topic)[0][0]

    topo.cut(old)
    try:
        # A client on the isolated leader's own host still reaches it: acks=1 is accepted there.
        out = subprocess.run([*topo.prefix(old), sys.executable, "-c", ISOLATED_PRODUCER,
                              cluster.node(old).address, topic, "200"],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr[-2000:]
        assert int(out.stdout.strip().splitlines()[-1]) == 200, out.stdout + out.stderr[-2000:]
        others = [n.address for i, n in cluster.nodes.items() if i != old]
        majority = ",".join(others)
        new = wait_for(lambda: (ld := describe(majority, topic)[0][0]) not in (old, -1) and ld, 30,
                       "a new leader on the majority side")
        after = produce_values(majority, topic, 1000)
    finally:
        topo.heal(old)
    assert new != old
    parts = wait_isr_complete(cluster, topic, timeout=90, bootstrap=majority)
    assert old in parts[0][2]
    wait_for(lambda: "replica_truncated" in cluster.node(old).output(), 30, "the old leader to truncate")
    got = [m.value() for m in consume_all(cluster.bootstrap, topic, 1, 2000, timeout=60)]
    assert got == before + after, "acks=all records lost or acks=1 records of the old leader kept"
    # The old leader's own copy: the acks=1 records are gone, the new leader's are there.
    wait_for(lambda: _stored_values(cluster.node(old).data_dir, topic) == before + after, 30,
             "the old leader's log to match the new leader's")


def _stored_values(data_dir: str, topic: str) -> list[bytes]:
    """The record values in a broker's segment files for partition 0 (read-only scan)."""
    values = []
    for path in sorted(glob.glob(os.path.join(data_dir, f"{topic}-0", "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        for pos, header in rb.iter_batches(data):
            if not header.is_control:
                values.extend(r.value for r in rb.decode_records(data, pos)[1])
    return values



def test_an_isolated_node_stops_acknowledging_and_nothing_acknowledged_is_lost(partitioned):
    """The leader's whole node (broker and etcd member) cut off while a client beside it and a
    client on the majority side produce acks=all: the isolated side's last acknowledgement comes
    within the session timeout of the cut, the majority elects a new leader and carries on, and
    after healing every record acknowledged on either side is in the log at the offset it was
    acknowledged with."""
    cluster, topo = partitioned
    topic = f"isolated-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_isr_complete(cluster, topic)
    old = describe(cluster.bootstrap, topic)[0][0]
    session_s = int(cluster.broker_properties()["broker.session.timeout.ms"]) / 1000
    isolated = subprocess.Popen([*topo.prefix(old), sys.executable, "-c", ISOLATED_ACKS_ALL,
                                 cluster.node(old).address, topic, "14"],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    majority = ",".join(n.address for i, n in cluster.nodes.items() if i != old)
    time.sleep(3)  # the isolated side's client is acknowledged before the cut
    cut_at = time.time()
    topo.cut(old)
    try:
        wait_for(lambda: describe(majority, topic)[0][0] not in (old, -1), 30, "a new leader on the majority side")
        after = produce_values(majority, topic, 500)
    finally:
        out, _ = isolated.communicate(timeout=60)
        topo.heal(old)
    acks = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert any(a["t"] < cut_at for a in acks), "the isolated side's client was never acknowledged"
    last = max(a["t"] for a in acks)
    print(f"the isolated leader's last acks=all acknowledgement: {last - cut_at:+.3f}s from the cut "
          f"(session timeout {session_s:.0f}s); {len(acks)} acknowledged there in all")
    assert last < cut_at + session_s
    wait_isr_complete(cluster, topic, timeout=90)
    log = {m.offset(): m.value() for m in consume_all(cluster.bootstrap, topic, 1, len(acks) + len(after), timeout=60)}
    lost = [a for a in acks if log.get(a["offset"]) != a["value"].encode()]
    assert lost == [], f"{len(lost)} records acknowledged on the isolated side are not in the log: {lost[:3]}"
    assert set(after) <= set(log.values())
