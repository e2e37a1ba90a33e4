"""A node whose disk fills is a node that failed: broker 1's log directory on a 48 MB file
system, an idempotent acks=all producer writing to an RF-3 / min.insync 2 topic until it is
full. Broker 1 takes the directory offline, ends its session and halts (as Kafka's broker
halts on its last failed log directory); its partitions are led elsewhere at once, the producer
is acknowledged again on every partition and keeps being acknowledged, no error reaches it,
and once the disk has room again and the node returns, every acknowledged record is read back
exactly once.
"""

from __future__ import annotations

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

PARTITIONS = 3
DISK_MB = 48


def _mount_small_disk(path: str, megabytes: int) -> None:
    os.makedirs(path, exist_ok=True)
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", path],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        pytest.skip(f"a size-limited file system cannot be mounted here: {out.stderr.strip()}")


@pytest.fixture
def small_disk_cluster(tmp_path):
    require_etcd()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a size-limited file system needs root")
    cluster = DevCluster(str(tmp_path / "disk"), 3, overrides={**FAST_FAILOVER, "log.segment.bytes": "8388608"})
    disk = cluster.node(1).data_dir
    _mount_small_disk(disk, DISK_MB)
    try:
        cluster.start()
        yield cluster, disk
    finally:
        cluster.kill()
        subprocess.run(["umount", "-l", disk], capture_output=True, timeout=30)


class Writer:
    """Writes 1 KB values with acks=all until stopped; keeps when each was acknowledged, per
    partition, and every error the application saw."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acks: dict[int, list[tuple[float, bytes]]] = {p: [] for p in range(PARTITIONS)}
        self.errors: list = []
        self._stop = threading.Event()
        self._p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                            "linger.ms": 5, "message.timeout.ms": 120000, "queue.buffering.max.messages": 20000})
        self._thread = threading.Thread(target=self._run, args=(topic,), daemon=True)
        self._thread.start()

    def _run(self, topic: str) -> None:
        """About 8 MB/s: the small disk fills in seconds, and what was written can be read back."""
        n = 0
        pad = b"x" * 1000
        while not self._stop.is_set():
            for _ in range(80):
                try:
                    self._p.produce(topic, value=b"%09d-" % n + pad, partition=n % PARTITIONS,
                                    on_delivery=self._done)
                    n += 1
                except BufferError:
                    break
            self._p.poll(0.01)

    def _done(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acks[msg.partition()].append((time.monotonic(), msg.value()[:9]))

    def acked_since(self, moment: float) -> set[int]:
        return {p for p, acks in self.acks.items() if acks and acks[-1][0] > moment}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._p.flush(120)


def test_a_full_disk_halts_its_broker_and_the_cluster_carries_on(small_disk_cluster):
    cluster, disk = small_disk_cluster
    topic = f"full-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=PARTITIONS, replication_factor=3,
                 config={"min.insync.replicas": "2"})
    wait_isr_complete(cluster, topic)
    node = cluster.node(1)
    writer = Writer(cluster.bootstrap, topic)
    try:
        wait_for(lambda: not node.alive, 180, "broker 1 to halt on its full disk", interval=0.05)
        halted = time.monotonic()
        assert node.proc.returncode == 1
        output = node.output()
        assert "log_dir_offline" in output and "ENOSPC" in output, output[-3000:]
        assert "broker_halting" in output
        _, took = wait_for(lambda: (s := writer.acked_since(halted)) == set(range(PARTITIONS)) and (s, time.monotonic()),
                           30, "acknowledgements on every partition again", interval=0.02)
        print(f"acks=all on all {PARTITIONS} partitions {took - halted:.2f}s after broker 1 halted")
        time.sleep(2)  # and they keep coming
        assert writer.acked_since(time.monotonic() - 1) == set(range(PARTITIONS))
    finally:
        writer.stop()
    assert writer.errors == [], f"{len(writer.errors)} errors reached the application: {writer.errors[:3]}"
    # The disk gets room again; the node returns and catches up.
    subprocess.run(["mount", "-o", f"remount,size={DISK_MB * 8}m", disk], check=True, timeout=30)
    node.start()
    cluster.wait_registered({1, 2, 3}, 60)
    wait_isr_complete(cluster, topic, timeout=120)
    acked = [v for acks in writer.acks.values() for _, v in acks]
    got = consume_all(cluster.bootstrap, topic, PARTITIONS, len(acked), timeout=120)
    values = [m.value()[:9] for m in got]
    print(f"{len(acked)} records acknowledged, {len(values)} read back")
    assert len(values) == len(set(values)), "a record was written twice"
    assert set(acked) <= set(values), f"{len(set(acked) - set(values))} of {len(acked)} acknowledged records lost"
