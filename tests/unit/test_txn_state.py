"""Transaction state machine as data, and the two-phase transitions of TransactionMetadata."""

import pytest

from coordinator.transaction.state import (
    MAX_PRODUCER_EPOCH,
    VALID_PREVIOUS_STATES,
    IllegalTransition,
    TransactionMetadata,
    TxnState,
    is_epoch_exhausted,
)

S = TxnState


def ongoing(epoch: int = 0, partitions=(("a", 0),)) -> TransactionMetadata:
    m = TransactionMetadata("t", producer_id=5, producer_epoch=epoch)
    m.complete_transition(m.prepare_add_partitions(set(partitions), now=10))
    return m


def test_state_ids_and_names_are_kafkas():
    assert [(s.id, s.state_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert S.from_id(3) is S.PREPARE_ABORT and S.from_name("CompleteCommit") is S.COMPLETE_COMMIT
    assert S.from_name("Bogus") is None


def test_valid_previous_states_table():
    assert VALID_PREVIOUS_STATES == {
        S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_COMMIT: {S.ONGOING},
        S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
        S.COMPLETE_ABORT: {S.PREPARE_ABORT},
        S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_EPOCH_FENCE: {S.ONGOING},
    }
    assert {s for s in S if s.is_expiration_allowed} == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


def test_transition_applies_only_when_completed():
    m = TransactionMetadata("t", producer_id=5, producer_epoch=0)
    transit = m.prepare_add_partitions({("a", 0)}, now=100)
    assert m.state is S.EMPTY and m.pending_state is S.ONGOING and m.partitions == set()
    with pytest.raises(IllegalTransition):
        m.prepare_abort_or_commit(S.PREPARE_COMMIT, now=101)  # something is pending
    m.complete_transition(transit)
    assert m.state is S.ONGOING and m.partitions == {("a", 0)} and m.txn_start_timestamp == 100
    assert m.pending_state is None and m.txn_last_update_timestamp == 100


def test_adding_partitions_keeps_the_start_time():
    m = ongoing()
    m.complete_transition(m.prepare_add_partitions({("b", 1)}, now=50))
    assert m.partitions == {("a", 0), ("b", 1)} and m.txn_start_timestamp == 10


def test_invalid_transitions_are_refused():
    m = TransactionMetadata("t", producer_id=5, producer_epoch=0)
    with pytest.raises(IllegalTransition):
        m.prepare_abort_or_commit(S.PREPARE_COMMIT, now=1)  # Empty -> PrepareCommit
    with pytest.raises(IllegalTransition):
        m.prepare_fence_producer_epoch()  # nothing ongoing to fence
    m = ongoing()
    with pytest.raises(IllegalTransition):
        m.prepare_dead()  # never while a transaction is open
    with pytest.raises(IllegalTransition):
        m.prepare_producer_id_rotation(9, 60000, now=1, record_last_epoch=False)


def test_completing_a_transition_that_was_not_prepared_fails():
    m = TransactionMetadata("t", producer_id=5, producer_epoch=0)
    transit = m.prepare_add_partitions({("a", 0)}, now=1)
    m.abort_pending()
    with pytest.raises(IllegalTransition):
        m.complete_transition(transit)


def test_commit_then_complete_clears_partitions_keeps_start():
    m = ongoing(epoch=2)
    m.complete_transition(m.prepare_abort_or_commit(S.PREPARE_COMMIT, now=20))
    assert m.state is S.PREPARE_COMMIT and m.partitions == {("a", 0)}
    m.remove_partition(("a", 0))
    m.complete_transition(m.prepare_complete(now=30))
    assert (m.state, m.partitions, m.txn_start_timestamp, m.producer_epoch) == (S.COMPLETE_COMMIT, set(), 10, 2)


def test_epoch_fence_then_abort_at_the_bumped_epoch():
    m = ongoing(epoch=3)
    assert m.prepare_fence_producer_epoch() == 4
    assert m.pending_state is S.PREPARE_EPOCH_FENCE and m.producer_epoch == 3  # not in memory yet
    transit = m.prepare_abort_or_commit(S.PREPARE_ABORT, now=2)
    assert (transit.state, transit.producer_epoch, transit.last_producer_epoch) == (S.PREPARE_ABORT, 4, -1)
    assert m.pending_state is S.PREPARE_ABORT
    m.complete_transition(transit)
    assert m.producer_epoch == 4 and m.state is S.PREPARE_ABORT
    m.complete_transition(m.prepare_complete(now=3))
    assert m.state is S.COMPLETE_ABORT and m.partitions == set()


def test_a_failed_fence_write_leaves_the_epoch():
    m = ongoing(epoch=3)
    m.prepare_fence_producer_epoch()
    m.prepare_abort_or_commit(S.PREPARE_ABORT, now=2)
    m.abort_pending()
    assert (m.producer_epoch, m.pending_state, m.fence_epoch, m.state) == (3, None, None, S.ONGOING)


def test_fence_only_aborts():
    m = ongoing()
    m.prepare_fence_producer_epoch()
    with pytest.raises(IllegalTransition):
        m.prepare_abort_or_commit(S.PREPARE_COMMIT, now=2)


def test_fence_at_max_epoch_does_not_overflow():
    m = ongoing(epoch=MAX_PRODUCER_EPOCH)
    assert m.prepare_fence_producer_epoch() == MAX_PRODUCER_EPOCH


def test_increment_epoch_rules():
    fresh = TransactionMetadata("t", producer_id=5)  # just created: epoch -1
    t = fresh.prepare_increment_producer_epoch(60000, None, now=1)
    assert (t.producer_epoch, t.last_producer_epoch, t.txn_start_timestamp, t.partitions) == (0, -1, -1, frozenset())
    fresh.complete_transition(t)
    # KIP-360: the producer's own epoch bumps, and is remembered for a retry.
    t = fresh.prepare_increment_producer_epoch(60000, 0, now=2)
    assert (t.producer_epoch, t.last_producer_epoch) == (1, 0)
    fresh.complete_transition(t)
    # A retried bump answers the same epoch.
    t = fresh.prepare_increment_producer_epoch(60000, 0, now=3)
    assert (t.producer_epoch, t.last_producer_epoch) == (1, 0)
    fresh.abort_pending()
    # Any other epoch is fenced.
    assert fresh.prepare_increment_producer_epoch(60000, 7, now=4) is None
    # A new incarnation (no epoch) forgets the last epoch: the old one cannot retry into it.
    t = fresh.prepare_increment_producer_epoch(30000, None, now=5)
    assert (t.producer_epoch, t.last_producer_epoch, t.txn_timeout_ms) == (2, -1, 30000)
    fresh.complete_transition(t)
    assert fresh.prepare_increment_producer_epoch(60000, 1, now=6) is None


def test_epoch_exhaustion_and_rotation():
    assert not is_epoch_exhausted(MAX_PRODUCER_EPOCH - 2) and is_epoch_exhausted(MAX_PRODUCER_EPOCH - 1)
    m = TransactionMetadata("t", producer_id=5, producer_epoch=MAX_PRODUCER_EPOCH - 1)
    with pytest.raises(IllegalTransition):
        m.prepare_increment_producer_epoch(60000, None, now=1)
    t = m.prepare_producer_id_rotation(9, 60000, now=1, record_last_epoch=True)
    assert (t.producer_id, t.last_producer_id, t.producer_epoch, t.last_producer_epoch) == \
        (9, 5, 0, MAX_PRODUCER_EPOCH - 1)
    m.complete_transition(t)
    assert (m.producer_id, m.last_producer_id, m.producer_epoch) == (9, 5, 0)


def test_dead_is_never_completed():
    m = TransactionMetadata("t", producer_id=5, producer_epoch=0, txn_last_update_timestamp=7)
    t = m.prepare_dead()
    assert t.state is S.DEAD and t.txn_last_update_timestamp == 7 and m.pending_state is S.DEAD
    with pytest.raises(IllegalTransition):
        m.complete_transition(t)
