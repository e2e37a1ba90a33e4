"""Acceptance 3: a partition leader cut off from the other brokers and from etcd by network
namespaces. A new leader is elected; what the old leader took with acks=1 after the cut is
truncated when it rejoins; nothing acknowledged with acks=all is lost."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
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

