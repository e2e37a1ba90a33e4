"""The leader's view of its followers (broker.partition.Partition) across assignment changes."""

from __future__ import annotations

import uuid

import pytest

from broker.partition import Partition
from protocol.errors import ErrorCode, KafkaError
from storage.log import Log, LogConfig


@pytest.fixture
def leader(tmp_path):
    log, _ = Log.open(tmp_path / "t-0", "t", 0, LogConfig())
    part = Partition("t", 0, uuid.uuid4(), log, node_id=2)
    part.make_leader(leader_epoch=1, partition_epoch=1, replicas=[2, 3, 1], isr=[2, 1])
    yield part
    log.close()


def test_a_caught_up_added_replica_is_proposed_for_the_isr(leader):
    assert leader.update_follower_fetch_state(3, leader.log.log_end_offset, 1000) == [2, 1, 3]


def test_a_replica_the_reassignment_removed_is_forgotten_and_its_fetches_refused(leader):
    # The reassignment completes: same leader and leader epoch, a new partition epoch.
    assert not leader.make_leader(leader_epoch=1, partition_epoch=2, replicas=[2, 3], isr=[2, 3])
    assert set(leader.followers) == {3}
    assert leader.update_follower_fetch_state(1, leader.log.log_end_offset, 1000) is None
    with pytest.raises(KafkaError) as refused:
        leader.check_follower(1, current_leader_epoch=1)
    assert refused.value.code == ErrorCode.unknown_leader_epoch
    with pytest.raises(KafkaError) as refused:
        leader.check_follower(1, current_leader_epoch=-1)
    assert refused.value.code == ErrorCode.not_leader_or_follower
    leader.check_follower(3, current_leader_epoch=1)


def test_a_follower_keeps_its_fetch_state_across_an_isr_change(leader):
    leader.update_follower_fetch_state(3, leader.log.log_end_offset, 1000)
    leader.make_leader(leader_epoch=1, partition_epoch=2, replicas=[2, 3, 1], isr=[2, 1, 3])
    assert leader.followers[3].last_fetch_ms == 1000


def test_a_verified_batch_reaching_a_deposed_leader_is_retriable_not_a_failed_transaction(leader):
    """A transactional batch whose verification (KIP-890) was out while the broker lost the
    partition: NOT_LEADER_OR_FOLLOWER, which the client retries at the new leader, as Kafka's
    append answers; not INVALID_TXN_STATE, which fails the transaction, though followers
    drop verification guards when they replicate the producer's markers."""
    from broker.replica_manager import ReplicaManager
    from protocol import records as rb

    rm = ReplicaManager(config=None, metadata=None, store=None, log_manager=None, metrics=None, node_id=2)
    rm.partitions[("t", 0)] = leader
    records = bytes(rb.build_batch([(b"k", b"v")], timestamp=0, producer_id=7, producer_epoch=0,
                                   base_sequence=0, transactional=True))
    guard = rm.start_verification("t", 0, 7, 0)
    leader.make_follower(3, leader_epoch=2, partition_epoch=2, replicas=[2, 3, 1], isr=[3, 1])
    leader.log.producer_state.verification_guards.pop(7)  # a replicated marker of producer 7
    with pytest.raises(KafkaError) as refused:
        rm.check_verification("t", 0, records, guard)
    assert refused.value.code == ErrorCode.not_leader_or_follower


def test_the_high_watermark_waits_for_min_insync_replicas_members_of_the_isr(leader):
    """Kafka 4's strict min ISR: with min.insync.replicas 3 and an ISR of two, an acks=1 record
    replicated to the whole ISR stays invisible until the third replica joins; the effective
    minimum is at most the replica count."""
    from protocol import records as rb

    leader.min_isr = lambda: 3
    leader.append_records_to_leader(bytes(rb.build_batch([(b"k", b"v")], timestamp=0)), acks=1, min_isr=3)
    leader.update_follower_fetch_state(1, leader.log.log_end_offset, 1000)
    assert leader.high_watermark == 0 and leader.under_min_isr()
    leader.make_leader(leader_epoch=1, partition_epoch=2, replicas=[2, 3, 1], isr=[2, 1, 3])
    assert leader.high_watermark == 0  # replica 3 has not fetched it yet
    leader.update_follower_fetch_state(3, leader.log.log_end_offset, 1000)
    assert leader.high_watermark == 1
    leader.min_isr = lambda: 5  # more than there are replicas: all three suffice
    assert not leader.under_min_isr()
