"""Transaction version 2 on three nodes: a producer epoch exhausted by EndTxn v5's bumps.

The partition's leader and the transaction's coordinator are different brokers. The test fault
point ``txn.first.producer.epoch`` starts new transactional ids two commits short of the
maximum epoch, as 32765 earlier transactions would have left them. The commit that reaches it
moves the id to a new producer id at epoch 0 (answered, and again to a retry); from then on the
old producer id is refused at the partition's leader, on the coordinator and, after the
coordinator is killed -9, on the one that loaded the id from ``__transaction_state``
(INVALID_PRODUCER_ID_MAPPING each time). Only the
committed records are read under read_committed, each once.
"""

from __future__ import annotations

import time

import pytest

from coordinator.transaction.state import MAX_PRODUCER_EPOCH
from protocol import records as rb
from protocol.errors import ErrorCode
from tests.cluster.test_tv2_held_produce import elsewhere
from tests.integration.test_transaction_version2 import _end, _retrying
from tests.integration.test_txn_coordinator import init_pid, wait_state
from tests.support.clients import consume_all, create_topic
from tests.support.cluster import (
    TRANSACTION,
    coordinator_node,
    describe,
    restore,
    start_cluster,
    wait_isr_complete,
)
from tests.support.raw import RawClient

pytestmark = pytest.mark.cluster

FIRST_EPOCH = MAX_PRODUCER_EPOCH - 2  # one bump left before MAX - 1, where Kafka stops bumping
MAPPING = ErrorCode.invalid_producer_id_mapping  # the id now maps to the new producer id


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("tv2-exhaustion")),
                      **{"test.fault.points": f"txn.first.producer.epoch:{FIRST_EPOCH}"})
    yield c
    c.stop()


def _produce(c: RawClient, topic: str, txn: str, pid: int, epoch: int, value: bytes, seq: int = 0) -> int:
    """Produce v12 (the leader adds the partition to the transaction): its error code."""
    batch = bytes(rb.build_batch([(value, value)], timestamp=int(time.time() * 1000), producer_id=pid,
                                 producer_epoch=epoch, base_sequence=seq, transactional=True))
    request = {"transactional_id": txn, "acks": -1, "timeout": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    return _retrying(lambda: c.call(0, 12, request).responses[0].partition_responses[0].error_code, "Produce")


def test_epoch_exhaustion_moves_to_a_new_producer_id_with_no_gap_in_fencing(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name, 1, replication_factor=3)
    wait_isr_complete(cluster, topic_name)
    leader = describe(cluster.bootstrap, topic_name)[0][0]
    txn, coordinator = elsewhere(cluster, f"{topic_name}-txn", leader)
    with RawClient(cluster.node(leader).address, timeout=30) as lead, \
            RawClient(cluster.node(coordinator).address, timeout=30) as c:
        r = init_pid(c, txn, version=5)
        pid, epoch = r.producer_id, r.producer_epoch
        assert (r.error_code, epoch) == (0, FIRST_EPOCH)

        assert _produce(lead, topic_name, txn, pid, epoch, b"a") == 0
        assert _end(c, txn, pid, epoch, commit=True) == (0, pid, epoch + 1)  # the last bump
        wait_state(c, txn, "CompleteCommit", timeout=20)
        assert _produce(lead, topic_name, txn, pid, epoch + 1, b"b") == 0
        error, new_pid, new_epoch = _end(c, txn, pid, epoch + 1, commit=True)  # exhausted: a new id
        assert (error, new_epoch) == (0, 0) and new_pid != pid
        assert _end(c, txn, pid, epoch + 1, commit=True) == (0, new_pid, 0)  # a retry: the same answer
        d = wait_state(c, txn, "CompleteCommit", timeout=20)
        assert (d.producer_id, d.producer_epoch) == (new_pid, 0)

        assert _produce(lead, topic_name, txn, pid, epoch + 1, b"old-1", seq=1) == MAPPING  # no gap in fencing
        assert _produce(lead, topic_name, txn, new_pid, 0, b"c") == 0
        assert _end(c, txn, new_pid, 0, commit=True) == (0, new_pid, 1)
        wait_state(c, txn, "CompleteCommit", timeout=20)

    cluster.node(coordinator).kill9()  # the id is loaded by another broker from __transaction_state
    try:
        moved = coordinator_node(cluster, txn, TRANSACTION, timeout=60)
        assert moved != coordinator
        with RawClient(cluster.node(moved).address, timeout=30) as c, \
                RawClient(cluster.node(describe(cluster.bootstrap, topic_name)[0][0]).address, timeout=30) as lead:
            d = wait_state(c, txn, "CompleteCommit", timeout=30)
            assert (d.producer_id, d.producer_epoch) == (new_pid, 1)
            assert _end(c, txn, pid, epoch + 1, commit=False)[0] == MAPPING  # the old id: fenced
            assert _produce(lead, topic_name, txn, pid, epoch + 1, b"old-2", seq=1) == MAPPING
            assert _produce(lead, topic_name, txn, new_pid, 1, b"d") == 0
            assert _end(c, txn, new_pid, 1, commit=True) == (0, new_pid, 2)
            wait_state(c, txn, "CompleteCommit", timeout=20)
    finally:
        restore(cluster)

    got = consume_all(cluster.bootstrap, topic_name, 1, expected=4, timeout=30,
                      **{"isolation.level": "read_committed"})
    assert [m.value() for m in got] == [b"a", b"b", b"c", b"d"]
