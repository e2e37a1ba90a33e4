"""A transaction coordinator lost between PrepareCommit and its markers (issue acceptance 2, 3).

Fault point ``txn.markers.delay`` holds the markers of a transaction its producer just ended for
a few seconds after PrepareCommit is durable (completions resumed after a load go at once), so
a test can kill -9, stop (SIGSTOP past its lease) or cut off the coordinator in that window.
The new coordinator (the new leader of the ``__transaction_state`` partition) loads the
PrepareCommit and writes the markers and CompleteCommit; a deposed coordinator that resumes
has its markers fenced (TRANSACTION_COORDINATOR_FENCED at the partition leaders, or cancelled
when it learns it resigned) and read_committed never sees a torn or doubled transaction.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer

from protocol.errors import ErrorCode
from tests.integration.test_transactions_cli import ok, table
from tests.support.clients import consume_all, create_topic
from tests.support.cluster import (
    TRANSACTION,
    coordinator_node,
    describe,
    netns_cluster,
    restore,
    start_cluster,
    wait_for,
    wait_internal_isr_complete,
    wait_isr_complete,
)
from tests.support.eos import CONTROL_COMMIT, data_batches
from tests.support.raw import describe_transaction as describe_txn

PARTITIONS = 3
MARKER_DELAY_MS = 6000
FAULTS = {"test.fault.points": f"txn.markers.delay:{MARKER_DELAY_MS}"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("fencing")), **FAULTS)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory):
    with netns_cluster(str(tmp_path_factory.mktemp("fencing-netns")), **FAULTS) as (cluster, topo):
        yield cluster, topo


@pytest.fixture
def healthy(cluster):
    restore(cluster)
    wait_internal_isr_complete(cluster)
    yield cluster
    restore(cluster)


class Scenario:
    """A topic, a transactional producer with one committed transaction (markers written by
    the first coordinator, epoch ``first_epoch``), and a second one committed just now."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        # A paused or cut-off broker accepts connections it never answers: a client that
        # bootstraps from it waits out its timeouts, so the checks leave it out meanwhile.
        self.unreachable: set[int] = set()
        tag = uuid.uuid4().hex[:6]
        self.topic, self.txn_id = f"fence-{tag}", f"fence-{tag}"
        create_topic(cluster.bootstrap, self.topic, PARTITIONS, replication_factor=3)
        wait_isr_complete(cluster, self.topic)
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": self.txn_id})
        self.producer.init_transactions(30)
        self.first = self._commit(b"first")
        wait_for(lambda: len(self.read()) == len(self.first), 60, "the first transaction's markers")
        self.first_epoch = self.coordinator_epochs()
        assert len(set(self.first_epoch.values())) == 1, self.first_epoch
        self.coordinator = coordinator_node(cluster, self.txn_id, TRANSACTION)

    def _commit(self, tag: bytes) -> list[bytes]:
        values = [tag + b"-%04d" % i for i in range(150)]
        self.producer.begin_transaction()
        for i, v in enumerate(values):
            self.producer.produce(self.topic, value=v, partition=i % PARTITIONS)
        self.producer.commit_transaction(30)  # returns once PrepareCommit is durable
        return values

    def commit_second(self) -> list[bytes]:
        self.second = self._commit(b"second")
        self.markers_due = time.monotonic() + MARKER_DELAY_MS / 1000
        return self.second

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for i, n in self.cluster.nodes.items() if i not in self.unreachable)

    def read(self) -> list[bytes]:
        return sorted(m.value() for m in consume_all(self.bootstrap, self.topic, PARTITIONS, 10**6,
                                                      timeout=3, **{"isolation.level": "read_committed"}))

    def coordinator_epochs(self) -> dict[int, int]:
        """Partition -> the coordinator epoch of the producer's last marker there."""
        out = {}
        for p in range(PARTITIONS):
            rows = table(ok(self.bootstrap, "describe-producers", "--topic", self.topic,
                            "--partition", str(p)))[1:]
            out[p] = int(rows[0][2])
        return out

    def assert_second_completed_once_by_the_new_coordinator(self) -> None:
        wait_for(lambda: len(self.read()) == len(self.first) + len(self.second), 60,
                 "the new coordinator's markers")
        assert self.read() == sorted(self.first + self.second)
        epochs = self.coordinator_epochs()
        old = self.first_epoch[0]
        assert all(e > old for e in epochs.values()), f"markers of epoch {old} after failover: {epochs}"
        state = dict(zip(*table(ok(self.bootstrap, "describe", "--transactional-id", self.txn_id))))
        assert state["TransactionState"] == "CompleteCommit" and state["CoordinatorId"] != str(self.coordinator)

    def assert_logs_hold_one_commit_per_partition_after_the_second(self) -> None:
        """On every partition leader's disk: after the second transaction's data, COMMIT markers
        of the new coordinator epoch only, never one of the deposed coordinator's. The new
        coordinator may write its marker twice (a WriteTxnMarkers that timed out against a
        partition leader in the cut-off node's reach and was retried elsewhere appends again,
        as Kafka's marker channel does); a second COMMIT with no open transaction is inert."""
        parts = describe(self.cluster.bootstrap, self.topic)
        for p, (leader, _, _) in parts.items():
            batches = data_batches(self.cluster.node(leader).data_dir, self.topic, p)
            last_data = max(i for i, b in enumerate(batches) if b.control is None)
            markers = [b for b in batches[last_data + 1:] if b.control is not None]
            assert markers, (p, "no marker after the second transaction")
            assert all(m.control == CONTROL_COMMIT and m.coordinator_epoch > self.first_epoch[p] for m in markers), \
                (p, self.first_epoch[p], markers)


    def assert_deposed_coordinator_fenced(self, old) -> None:
        """Once the old coordinator is back: it resigned or had its markers refused, the logs
        hold one commit per partition, read_committed sees each transaction once."""
        self.cluster.wait_registered(set(self.cluster.nodes), 60)
        wait_internal_isr_complete(self.cluster)
        wait_for(lambda: "txn_coordinator_resigned" in old.output()
                 or "TRANSACTION_COORDINATOR_FENCED" in old.output(), 30, "the deposed coordinator to resign")
        self.assert_logs_hold_one_commit_per_partition_after_the_second()
        assert self.read() == sorted(self.first + self.second), "a torn or doubled transaction"


def test_kill9_between_prepare_commit_and_markers(healthy):
    s = Scenario(healthy)
    s.commit_second()
    healthy.node(s.coordinator).kill9()
    s.assert_second_completed_once_by_the_new_coordinator()
    healthy.node(s.coordinator).start()
    healthy.wait_registered(set(healthy.nodes), 60)
    wait_internal_isr_complete(healthy)
    s.assert_logs_hold_one_commit_per_partition_after_the_second()
    assert s.read() == sorted(s.first + s.second)


def test_coordinator_stopped_past_its_lease_is_fenced_when_it_resumes(healthy):
    s = Scenario(healthy)
    old = healthy.node(s.coordinator)
    s.commit_second()
    old.pause()
    s.unreachable = {s.coordinator}
    try:
        s.assert_second_completed_once_by_the_new_coordinator()
        # Resume only once the held markers are due: the deposed coordinator wakes up wanting
        # to send them with its old epoch (a wall-clock fault window, not a synchronization).
        wait_for(lambda: time.monotonic() >= s.markers_due, MARKER_DELAY_MS / 1000, "the markers to be due")
    finally:
        old.resume()
        s.unreachable = set()
    s.assert_deposed_coordinator_fenced(old)


def test_coordinator_cut_off_by_the_network_is_fenced_when_it_returns(partitioned):
    cluster, topo = partitioned
    s = Scenario(cluster)
    old = cluster.node(s.coordinator)
    s.commit_second()
    topo.cut(s.coordinator)
    s.unreachable = {s.coordinator}
    try:
        s.assert_second_completed_once_by_the_new_coordinator()
        # Heal once the held markers are due: the deposed coordinator, which has not heard
        # from etcd or its peers, sends them with its old epoch as soon as it can.
        wait_for(lambda: time.monotonic() >= s.markers_due, MARKER_DELAY_MS / 1000, "the markers to be due")
    finally:
        topo.heal(s.coordinator)
        s.unreachable = set()
    s.assert_deposed_coordinator_fenced(old)


def test_tv2_prepare_commit_completes_on_the_new_coordinator_at_the_bumped_epoch(healthy):
    """Transaction version 2 (raw Produce v12 and EndTxn v5): the coordinator is killed -9
    between PrepareCommit (already at the bumped epoch, which EndTxn answered) and its markers;
    the new one writes the markers at that epoch, the producer carries on with it, and a
    produce of the ended transaction that arrives late, at a partition leader that asks the
    remote coordinator to add it, is refused with the old epoch and never read."""
    from tests.integration.test_transaction_version2 import _end, _init, _produce, _wait_state
    from tests.support.raw import RawClient

    cluster = healthy
    tag = uuid.uuid4().hex[:6]
    topic, txn_id = f"tv2-fence-{tag}", f"tv2-fence-{tag}"
    create_topic(cluster.bootstrap, topic, 2, replication_factor=3)
    wait_isr_complete(cluster, topic)
    coordinator = coordinator_node(cluster, txn_id, TRANSACTION)
    leaders = {p: leader for p, (leader, _, _) in describe(cluster.bootstrap, topic).items()}
    with RawClient(cluster.node(coordinator).address) as c:
        pid, epoch = _init(c, txn_id)
    with RawClient(cluster.node(leaders[0]).address) as c:
        assert _produce(c, topic, txn_id, pid, epoch, 0) == 0
    with RawClient(cluster.node(coordinator).address) as c:
        assert _end(c, txn_id, pid, epoch, commit=True) == (0, pid, epoch + 1)
    cluster.node(coordinator).kill9()  # the markers are held for MARKER_DELAY_MS: none written yet
    try:
        survivor = next(n for n in cluster.nodes.values() if n.alive)
        wait_for(lambda: len(consume_all(cluster.bootstrap, topic, 2, 10, timeout=2,
                                         **{"isolation.level": "read_committed"})) == 1, 60,
                 "the new coordinator's markers")
        new = coordinator_node(cluster, txn_id, TRANSACTION)
        assert new != coordinator
        with RawClient(cluster.node(new).address) as c:
            _wait_state(c, txn_id, "CompleteCommit")
            assert describe_txn(c, txn_id).producer_epoch == epoch + 1
        leaders = {p: leader for p, (leader, _, _) in describe(survivor.address, topic).items()}
        with RawClient(cluster.node(leaders[1]).address) as c:
            assert _produce(c, topic, txn_id, pid, epoch, 1, partition=1) == ErrorCode.invalid_producer_epoch
            assert _produce(c, topic, txn_id, pid, epoch + 1, 0, partition=1) == 0
        with RawClient(cluster.node(new).address) as c:
            assert _end(c, txn_id, pid, epoch + 1, commit=True) == (0, pid, epoch + 2)
        wait_for(lambda: len(consume_all(cluster.bootstrap, topic, 2, 10, timeout=2,
                                         **{"isolation.level": "read_committed"})) == 2, 60,
                 "the second transaction")
        values = sorted(m.value() for m in consume_all(cluster.bootstrap, topic, 2, 10, timeout=2,
                                                       **{"isolation.level": "read_committed"}))
        assert values == [b"v0", b"v0"]  # each transaction's one record; the late one never
    finally:
        cluster.node(coordinator).start()
        cluster.wait_registered(set(cluster.nodes), 60)
