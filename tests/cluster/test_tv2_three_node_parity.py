"""Transaction version 2 on three nodes, the same requests against ours and Apache Kafka 4.3.1
(three KRaft nodes; ``slow``), where the partition's leader and the transaction's coordinator
are different brokers:

- a Produce of a transaction that has ended arrives late at the leader (as a Produce delayed
  on the wire would: the broker cannot tell the difference) and is refused with the old epoch,
  on the partition the transaction wrote and on one it never touched; the next transaction at
  the bumped epoch commits only its own record;
- the coordinator is killed -9 right after it answered EndTxn v5 (its transaction in
  PrepareCommit, or just past it): with the victim still down, the next coordinator completes
  the commit at the bumped epoch, answers the client's retry of EndTxn (its response "lost")
  as the first answer was, fences the old epoch, and runs the next transaction.

The fault-point variants of ours (a Produce held inside the leader, a coordinator killed with
its markers held) are tests/cluster/test_tv2_held_produce.py and test_coordinator_fencing.py.
"""

from __future__ import annotations

import time
import uuid

import pytest

from protocol.errors import ErrorCode as E
from tests.cluster.test_tv2_held_produce import elsewhere
from tests.integration.test_transaction_version2 import _end, _init, _produce, read_committed_state
from tests.integration.test_txn_coordinator import wait_state
from tests.support.clients import create_topic
from tests.support.cluster import (
    TRANSACTION,
    coordinator_node,
    describe,
    wait_for,
    wait_isr_complete,
)
from tests.support.parity import TARGETS, three_nodes
from tests.support.raw import RawClient

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", params=TARGETS)
def target(request, tmp_path_factory):
    yield from three_nodes(request.param, tmp_path_factory, "tv2-parity")


def _topic(target, partitions: int) -> tuple[str, dict[int, int]]:
    """A new RF-3 topic with a full ISR: its name and partition -> leader."""
    name = f"tv2-3n-{uuid.uuid4().hex[:8]}"
    create_topic(target.bootstrap, name, partitions, replication_factor=3)
    wait_isr_complete(target, name)
    return name, {p: leader for p, (leader, _, _) in describe(target.bootstrap, name).items()}


def _visible(target, topic: str, leaders: dict[int, int], partition: int) -> int | None:
    """How many records read_committed sees in one partition (asked of its leader); None while
    a transaction is open there (its last stable offset below the high watermark)."""
    with RawClient(target.nodes[leaders[partition]].address, timeout=10) as c:
        last_stable_offset, high_watermark, visible = read_committed_state(c, topic, partition)
    return visible if last_stable_offset == high_watermark else None


def _wait_visible(target, topic: str, leaders: dict[int, int], partition: int, expected: int) -> None:
    """The markers reach the partitions after EndTxn answers (a coordinator that took over
    a commit may write its marker once more): until the partition has no open transaction."""
    deadline = time.monotonic() + 60
    while (seen := _visible(target, topic, leaders, partition)) != expected:
        assert time.monotonic() < deadline, f"{topic}-{partition}: {seen} visible, not {expected}"
        time.sleep(0.1)


def test_a_late_produce_of_an_ended_transaction_is_refused_at_a_leader_that_is_not_its_coordinator(target):
    topic, leaders = _topic(target, 2)
    txn, coordinator = elsewhere(target, f"{topic}-txn", leaders[0])
    with RawClient(target.nodes[coordinator].address, timeout=30) as c, \
            RawClient(target.nodes[leaders[0]].address, timeout=30) as lead, \
            RawClient(target.nodes[leaders[1]].address, timeout=30) as other:
        pid, epoch = _init(c, txn)
        assert _produce(lead, topic, txn, pid, epoch, 0) == 0  # the leader adds the partition
        wait_state(c, txn, "Ongoing", timeout=20)
        assert _end(c, txn, pid, epoch, commit=True) == (0, pid, epoch + 1)
        wait_state(c, txn, "CompleteCommit", timeout=20)
        _wait_visible(target, topic, leaders, 0, 1)
        # The ended transaction's produce, late: refused with its old epoch on both partitions.
        assert _produce(lead, topic, txn, pid, epoch, 1) == E.invalid_producer_epoch
        assert _produce(other, topic, txn, pid, epoch, 0, partition=1) == E.invalid_producer_epoch
        # The next transaction, at the bumped epoch, commits its own record and no other.
        assert _produce(other, topic, txn, pid, epoch + 1, 0, partition=1) == 0
        assert _end(c, txn, pid, epoch + 1, commit=True) == (0, pid, epoch + 2)
        wait_state(c, txn, "CompleteCommit", timeout=20)
    _wait_visible(target, topic, leaders, 1, 1)
    assert _visible(target, topic, leaders, 0) == 1


def test_a_commit_whose_coordinator_is_killed_completes_on_the_next_at_the_bumped_epoch(target):
    topic, leaders = _topic(target, 1)
    txn, coordinator = elsewhere(target, f"{topic}-txn", leaders[0])
    victim = target.nodes[coordinator]
    try:
        with RawClient(victim.address, timeout=30) as c, RawClient(target.nodes[leaders[0]].address, timeout=30) as lead:
            pid, epoch = _init(c, txn)
            assert _produce(lead, topic, txn, pid, epoch, 0) == 0
            wait_state(c, txn, "Ongoing", timeout=20)
            assert _end(c, txn, pid, epoch, commit=True) == (0, pid, epoch + 1)
            victim.kill9()  # at once: the markers may not have been written yet
        successor = coordinator_node(target, txn, TRANSACTION, timeout=60)
        assert successor != coordinator
        with RawClient(target.nodes[successor].address, timeout=30) as c, \
                RawClient(target.nodes[leaders[0]].address, timeout=30) as lead:
            # The client never saw the answer: its retry at the old epoch gets the same one.
            assert _end(c, txn, pid, epoch, commit=True) == (0, pid, epoch + 1)
            assert wait_state(c, txn, "CompleteCommit", timeout=30).producer_epoch == epoch + 1
            _wait_visible(target, topic, leaders, 0, 1)
            # The old epoch ends nothing else on the new coordinator (a "retry" with the other
            # outcome is INVALID_TXN_STATE, as Kafka answers) and writes nothing at the leader.
            assert _end(c, txn, pid, epoch, commit=False)[0] == E.invalid_txn_state
            assert _produce(lead, topic, txn, pid, epoch, 1) == E.invalid_producer_epoch
            # The next transaction runs at the bumped epoch; its abort leaves nothing visible.
            assert _produce(lead, topic, txn, pid, epoch + 1, 0) == 0
            assert _end(c, txn, pid, epoch + 1, commit=False) == (0, pid, epoch + 2)
            wait_state(c, txn, "CompleteAbort", timeout=30)
        _wait_visible(target, topic, leaders, 0, 1)
    finally:
        if not victim.alive:
            victim.start()
            _wait_registered_again(target, coordinator)


def _wait_registered_again(target, node_id: int) -> None:
    """The restarted broker answers Metadata as one of the three (for the next test)."""
    from confluent_kafka.admin import AdminClient

    wait_for(lambda: node_id in AdminClient({"bootstrap.servers": target.bootstrap}).list_topics(timeout=5).brokers,
             120, f"broker {node_id} back")
