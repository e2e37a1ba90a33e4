"""Transaction version 2 on three nodes: a Produce held past the end of its transaction.

The partition's leader and the transaction's coordinator are different brokers, so the
leader's AddPartitionsToTxn (Produce v12 adds its partition itself) goes over the network. The
test fault point ``txn.verification.delay`` holds the coordinator's answer at the leader while
the producer commits (EndTxn v5 bumps the epoch and the COMMIT marker lands first): the held
batch, at the old epoch, must be refused, and the next transaction at the bumped epoch commits
only its own record, as on one broker (tests/integration/test_txn_coordinator.py).
"""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode
from tests.integration.test_transaction_version2 import _end, _produce
from tests.integration.test_txn_coordinator import _late_batch, init_pid, wait_state
from tests.support.clients import consume_all, create_topic
from tests.support.cluster import TRANSACTION, coordinator_node, describe, start_cluster, wait_isr_complete
from tests.support.raw import RawClient

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("tv2-held")),
                      **{"test.fault.points": "txn.verification.delay:2000"})
    yield c
    c.stop()


def elsewhere(cluster, prefix: str, leader: int) -> tuple[str, int]:
    """A transactional id whose coordinator is not ``leader``, and its coordinator."""
    for i in range(100):
        node = coordinator_node(cluster, f"{prefix}-{i}", TRANSACTION)
        if node != leader:
            return f"{prefix}-{i}", node
    raise AssertionError(f"every transactional id tried is coordinated by the leader {leader}")


def test_a_tv2_produce_held_past_its_transaction_never_joins_the_next_on_three_nodes(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name, 1, replication_factor=3)
    wait_isr_complete(cluster, topic_name)
    leader = describe(cluster.bootstrap, topic_name)[0][0]
    txn, coordinator = elsewhere(cluster, f"{topic_name}-txn", leader)
    lead, coord = cluster.node(leader).address, cluster.node(coordinator).address
    with RawClient(lead, timeout=30) as delayed, RawClient(lead, timeout=30) as produce, \
            RawClient(coord, timeout=30) as c:
        r = init_pid(c, txn)
        pid, epoch = r.producer_id, r.producer_epoch
        delayed.send_call(0, 12, {"transactional_id": txn, "acks": -1, "timeout": 30000, "topic_data": [
            {"name": topic_name, "partition_data": [{"index": 0, "records": _late_batch(pid, epoch)}]}]})
        wait_state(c, txn, "Ongoing", timeout=20)  # the leader added the partition; its answer is held
        assert _end(c, txn, pid, epoch, commit=True) == (0, pid, epoch + 1)
        wait_state(c, txn, "CompleteCommit", timeout=20)
        late = delayed.receive(0, 12).responses[0].partition_responses[0]
        assert late.error_code in (ErrorCode.invalid_txn_state, ErrorCode.invalid_producer_epoch), late
        assert _produce(produce, topic_name, txn, pid, epoch + 1, 0) == 0
        assert _end(c, txn, pid, epoch + 1, commit=True) == (0, pid, epoch + 2)
        wait_state(c, txn, "CompleteCommit", timeout=20)
    records = consume_all(cluster.bootstrap, topic_name, 1, 10, timeout=5, **{"isolation.level": "read_committed"})
    assert [m.value() for m in records] == [b"v0"]  # the next transaction's record, never the late one
