"""A producer epoch exhausted over the wire on three nodes, the same requests against ours and
Apache Kafka 4.3.1 (three KRaft nodes), where the partition's leader and the transaction's
coordinator are different brokers.

No fault point: 32766 empty EndTxn v5 aborts bump the epoch to the last one, and the abort
sent there moves the transactional id to a new producer id at epoch 0 (and a retry of it gets
the same answer). From then on the old producer id is refused at the leader and on the
coordinator, and after the coordinator is killed -9 (the victim still down) on the broker
that loaded the id from ``__transaction_state``: no gap in fencing. Only the committed records
are read under read_committed. Slow on both sides; ``make parity`` runs it on both.

The fault-point variant of ours (ids started two bumps short of the maximum) is
tests/cluster/test_tv2_epoch_exhaustion.py; the single-node parity is
tests/integration/test_epoch_exhaustion_parity.py.
"""

from __future__ import annotations

import uuid

import pytest

from protocol.errors import ErrorCode as E
from tests.cluster.test_tv2_held_produce import elsewhere
from tests.cluster.test_tv2_three_node_parity import _wait_registered_again
from tests.integration.test_epoch_exhaustion_parity import LAST_BUMPED, _abort_until_the_id_moves
from tests.integration.test_transaction_version2 import _end, _init, _produce
from tests.integration.test_txn_coordinator import wait_state
from tests.support.clients import consume_all, create_topic
from tests.support.cluster import TRANSACTION, coordinator_node, describe, wait_isr_complete
from tests.support.parity import SLOW_TARGETS, three_nodes
from tests.support.raw import RawClient

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", params=SLOW_TARGETS)
def target(request, tmp_path_factory):
    yield from three_nodes(request.param, tmp_path_factory, "tv2-exhaustion-parity")


# What each step answers; the same on both clusters.
EXPECTED = {
    "the abort that moved the id": (LAST_BUMPED, 0),  # (the epoch it was sent at, the new epoch)
    "its retry": (0, "the new id", 0),
    "old id: Produce at the leader": E.invalid_producer_id_mapping,
    "new id: Produce at the leader": E.none,
    "new id: EndTxn commit": (0, "the new id", 1),
    "next coordinator: the loaded state": ("CompleteCommit", "the new id", 1),
    "next coordinator: old id EndTxn abort": E.invalid_producer_id_mapping,
    "next coordinator: old id Produce at the leader": E.invalid_producer_id_mapping,
    "next coordinator: new id Produce at the leader": E.none,
    "next coordinator: new id EndTxn commit": (0, "the new id", 2),
    "read_committed": [b"v0", b"v0"],  # one record each commit, both at sequence 0 of their epoch
}


def test_an_exhausted_epoch_moves_the_id_with_no_gap_in_fencing_across_a_coordinator_kill(target):
    topic = f"tv2-exhausted-{uuid.uuid4().hex[:8]}"
    create_topic(target.bootstrap, topic, 1, replication_factor=3)
    wait_isr_complete(target, topic)
    leader = describe(target.bootstrap, topic)[0][0]
    txn, coordinator = elsewhere(target, f"{topic}-txn", leader)
    victim = target.nodes[coordinator]
    seen: dict[str, object] = {}

    def named(new_pid: int, answer: tuple) -> tuple:
        """(error or state, producer id, epoch) with the new id by name (ids differ per broker)."""
        return answer[0], "the new id" if answer[1] == new_pid else answer[1], answer[2]

    try:
        with RawClient(victim.address, timeout=30) as c, RawClient(target.nodes[leader].address, timeout=30) as lead:
            pid, _ = _init(c, txn)
            sent_at, new_pid, new_epoch = _abort_until_the_id_moves(c, txn, pid)
            assert new_pid != pid
            seen["the abort that moved the id"] = (sent_at, new_epoch)
            seen["its retry"] = named(new_pid, _end(c, txn, pid, LAST_BUMPED, commit=False))
            seen["old id: Produce at the leader"] = E(_produce(lead, topic, txn, pid, LAST_BUMPED, 0))
            seen["new id: Produce at the leader"] = E(_produce(lead, topic, txn, new_pid, 0, 0))
            seen["new id: EndTxn commit"] = named(new_pid, _end(c, txn, new_pid, 0, commit=True))
            wait_state(c, txn, "CompleteCommit", timeout=30)
        victim.kill9()
        successor = coordinator_node(target, txn, TRANSACTION, timeout=60)
        assert successor != coordinator
        now_leading = describe(target.bootstrap, topic)[0][0]
        with RawClient(target.nodes[successor].address, timeout=30) as c, \
                RawClient(target.nodes[now_leading].address, timeout=30) as lead:
            d = wait_state(c, txn, "CompleteCommit", timeout=30)
            seen["next coordinator: the loaded state"] = named(new_pid, (d.transaction_state, d.producer_id,
                                                                         d.producer_epoch))
            seen["next coordinator: old id EndTxn abort"] = E(_end(c, txn, pid, LAST_BUMPED, commit=False)[0])
            seen["next coordinator: old id Produce at the leader"] = E(
                _produce(lead, topic, txn, pid, LAST_BUMPED, 1))
            seen["next coordinator: new id Produce at the leader"] = E(_produce(lead, topic, txn, new_pid, 1, 0))
            seen["next coordinator: new id EndTxn commit"] = named(new_pid, _end(c, txn, new_pid, 1, commit=True))
            wait_state(c, txn, "CompleteCommit", timeout=30)
        got = consume_all(target.bootstrap, topic, 1, expected=2, timeout=60, **{"isolation.level": "read_committed"})
        seen["read_committed"] = [m.value() for m in got]
    finally:
        if not victim.alive:
            victim.start()
            _wait_registered_again(target, coordinator)
    assert seen == EXPECTED
