"""Transaction state machine as data, two-phase transitions, and __transaction_state codecs."""

import pytest

from coordinator.transaction import log as txn_log
from coordinator.transaction.state import (
    VALID_PREVIOUS_STATES,
    IllegalTransition,
    TransactionMetadata,
    TxnState,
    TxnTransitMetadata,
)

S = TxnState


def test_state_ids_and_names_are_kafkas():
    assert [(s.id, s.state_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]


def test_valid_previous_states_table():
    assert VALID_PREVIOUS_STATES[S.PREPARE_COMMIT] == {S.ONGOING}
    assert VALID_PREVIOUS_STATES[S.PREPARE_ABORT] == {S.ONGOING, S.PREPARE_EPOCH_FENCE}
    assert VALID_PREVIOUS_STATES[S.COMPLETE_COMMIT] == {S.PREPARE_COMMIT}
    assert VALID_PREVIOUS_STATES[S.COMPLETE_ABORT] == {S.PREPARE_ABORT}
    assert VALID_PREVIOUS_STATES[S.ONGOING] == {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert set(VALID_PREVIOUS_STATES) == set(S)


def test_transition_applies_only_when_completed():
    m = TransactionMetadata("t", producer_id=5, producer_epoch=0)
    transit = m.prepare_add_partitions({("a", 0)}, now=100)
    assert m.state is S.EMPTY and m.pending_state is S.ONGOING and m.partitions == set()
    with pytest.raises(IllegalTransition):
        m.prepare_abort_or_commit(True, now=101)  # something is pending
    m.complete_transition(transit)
    assert m.state is S.ONGOING and m.partitions == {("a", 0)} and m.txn_start_timestamp == 100


def test_invalid_transition_is_refused():
    m = TransactionMetadata("t", producer_id=5, producer_epoch=0)
    with pytest.raises(IllegalTransition):
        m.prepare_abort_or_commit(True, now=1)  # Empty -> PrepareCommit


def test_epoch_fence_then_abort():
    m = TransactionMetadata("t", producer_id=5, producer_epoch=3)
    m.complete_transition(m.prepare_add_partitions({("a", 0)}, now=1))
    m.prepare_fence_epoch()
    assert m.producer_epoch == 4 and m.pending_state is S.PREPARE_EPOCH_FENCE
    transit = m.prepare_abort_or_commit(False, now=2)
    assert transit.producer_epoch == 4 and transit.state is S.PREPARE_ABORT
    m.complete_transition(transit)
    m.complete_transition(m.prepare_complete(now=3))
    assert m.state is S.COMPLETE_ABORT and m.partitions == set()


def test_failed_append_forgets_the_prepared_transition():
    m = TransactionMetadata("t", producer_id=5, producer_epoch=0)
    m.prepare_add_partitions({("a", 0)}, now=1)
    m.abort_pending()
    assert m.pending_state is None and m.state is S.EMPTY


def test_log_key_and_value_bytes():
    assert txn_log.encode_key("tx") == b"\x00\x00\x00\x02tx"
    transit = TxnTransitMetadata(producer_id=7, last_producer_id=-1, producer_epoch=2, last_producer_epoch=1,
                                 txn_timeout_ms=60000, state=S.ONGOING,
                                 partitions=frozenset({("b", 1), ("b", 0)}),
                                 txn_start_timestamp=1000, txn_last_update_timestamp=2000)
    value = txn_log.encode_value(transit)
    assert value == (b"\x00\x00" + (7).to_bytes(8, "big") + b"\x00\x02" + (60000).to_bytes(4, "big")
                     + b"\x01" + b"\x00\x00\x00\x01" + b"\x00\x01b" + b"\x00\x00\x00\x02"
                     + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x01"
                     + (2000).to_bytes(8, "big") + (1000).to_bytes(8, "big"))
    back = txn_log.decode_value(value)
    assert (back.producer_id, back.producer_epoch, back.state, back.partitions) == (7, 2, S.ONGOING, transit.partitions)
    assert txn_log.decode_key(txn_log.encode_key("tx")) == "tx"


def test_empty_state_writes_null_partitions():
    transit = TxnTransitMetadata(7, -1, 0, -1, 60000, S.EMPTY, frozenset(), -1, 5)
    value = txn_log.encode_value(transit)
    assert value[17:21] == b"\xff\xff\xff\xff"
    assert txn_log.decode_value(value).partitions == frozenset()
