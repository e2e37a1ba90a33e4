"""The classic group state machine as data: Kafka's validPreviousStates, checked transitions."""

import itertools

import pytest

from coordinator.group.state import (
    VALID_PREVIOUS_STATES,
    GroupMetadata,
    GroupState,
    IllegalGroupTransition,
    MemberMetadata,
)

S = GroupState

# Kafka's GroupState.scala, verbatim.
KAFKA_TABLE = {
    S.DEAD: {S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD},
    S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
    S.STABLE: {S.COMPLETING_REBALANCE},
    S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
    S.EMPTY: {S.PREPARING_REBALANCE},
}


def member(mid: str, protocols=(("range", b"r"), ("roundrobin", b"rr")), instance=None) -> MemberMetadata:
    return MemberMetadata(mid, instance, "client", "/127.0.0.1", 30000, 10000, "consumer", list(protocols))


def test_valid_previous_states_match_kafka():
    assert {k: set(v) for k, v in VALID_PREVIOUS_STATES.items()} == KAFKA_TABLE


def test_state_names_are_kafkas():
    assert [s.value for s in S] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    assert S.parse("completingrebalance") is S.COMPLETING_REBALANCE
    assert S.parse("nope") is None


@pytest.mark.parametrize("source,target", list(itertools.product(list(S), list(S))))
def test_every_transition_is_checked_against_the_table(source, target):
    group = GroupMetadata("g", state=source)
    if source in KAFKA_TABLE[target]:
        group.transition_to(target)
        assert group.state is target
        assert group.current_state_timestamp is not None
    else:
        with pytest.raises(IllegalGroupTransition):
            group.transition_to(target)
        assert group.state is source


def test_first_member_is_leader_and_leadership_moves_on_removal():
    group = GroupMetadata("g")
    group.add(member("a"))
    group.add(member("b"))
    assert group.leader_id == "a" and group.protocol_type == "consumer"
    group.remove("a")
    assert group.leader_id == "b"
    group.remove("b")
    assert group.leader_id is None


def test_protocol_selection_votes_among_protocols_every_member_supports():
    group = GroupMetadata("g")
    group.add(member("a", (("range", b""), ("roundrobin", b""))))
    group.add(member("b", (("roundrobin", b""), ("range", b""))))
    group.add(member("c", (("roundrobin", b""), ("sticky", b""))))
    assert group.candidate_protocols() == {"roundrobin"}
    assert group.select_protocol() == "roundrobin"
    group.remove("c")
    assert group.candidate_protocols() == {"range", "roundrobin"}


def test_supports_protocols():
    group = GroupMetadata("g")
    assert not group.supports_protocols("", {"range"})
    assert not group.supports_protocols("consumer", set())
    assert group.supports_protocols("consumer", {"range"})
    group.add(member("a", (("range", b""),)))
    group.transition_to(S.PREPARING_REBALANCE)
    assert group.supports_protocols("consumer", {"range", "x"})
    assert not group.supports_protocols("consumer", {"roundrobin"})
    assert not group.supports_protocols("connect", {"range"})


def test_all_members_joined_counts_waiters_and_pending_members():
    group = GroupMetadata("g")
    a, b = member("a"), member("b")
    group.add(a, join_waiter=object())
    group.add(b)
    assert not group.has_all_members_joined()
    group.set_join_waiter(b, object())
    assert group.has_all_members_joined()
    group.add_pending_member("c")
    assert not group.has_all_members_joined()
    group.remove_pending_member("c")
    group.remove("a")
    assert group.num_members_awaiting_join == 1 and group.has_all_members_joined()


def test_next_generation_goes_to_completing_rebalance_or_empty():
    group = GroupMetadata("g")
    group.add(member("a"))
    group.transition_to(S.PREPARING_REBALANCE)
    group.init_next_generation()
    assert (group.state, group.generation_id, group.protocol_name) == (S.COMPLETING_REBALANCE, 1, "range")
    group.transition_to(S.PREPARING_REBALANCE)
    group.remove("a")
    group.init_next_generation()
    assert (group.state, group.generation_id, group.protocol_name) == (S.EMPTY, 2, None)


def test_leader_that_did_not_rejoin_is_replaced_by_one_that_did():
    group = GroupMetadata("g")
    group.add(member("a"))
    group.add(member("b"), join_waiter=object())
    assert group.maybe_elect_new_joined_leader() and group.leader_id == "b"


def test_static_member_replacement_keeps_leadership():
    group = GroupMetadata("g")
    group.add(member("a-1", instance="i-a"))
    group.replace_static_member("i-a", "a-1", "a-2")
    assert group.leader_id == "a-2" and group.static_members == {"i-a": "a-2"} and group.has("a-2")


def appended_txn_offset(group: GroupMetadata, producer_id: int, tp, offset: int, log_offset: int,
                        producer_epoch: int = 0):
    """A TxnOffsetCommit as the coordinator stores one: prepared, then its append completes."""
    from coordinator.group.state import OffsetAndMetadata

    commit = OffsetAndMetadata(offset, producer_epoch=producer_epoch)
    group.prepare_txn_offset_commit(producer_id, {tp: commit})
    commit.log_offset = log_offset
    return commit, group.on_txn_offset_commit_append(producer_id, tp, commit)


def test_transactional_offsets_apply_on_commit_only_if_newer_in_the_log():
    from coordinator.group.state import OffsetAndMetadata

    group = GroupMetadata("g")
    appended_txn_offset(group, 7, ("t", 0), 10, log_offset=5)
    appended_txn_offset(group, 7, ("t", 1), 11, log_offset=5)
    group.on_offset_commit_append(("t", 1), OffsetAndMetadata(99, log_offset=6))
    assert group.has_pending_offset_commits(("t", 0))
    assert group.complete_pending_txn_offset_commit(7, is_commit=True, producer_epoch=0) == (2, 0)
    assert group.offsets[("t", 0)].offset == 10
    assert group.offsets[("t", 1)].offset == 99  # the plain commit came later in the log
    appended_txn_offset(group, 8, ("t", 0), 20, log_offset=9)
    group.complete_pending_txn_offset_commit(8, is_commit=False)
    assert group.offsets[("t", 0)].offset == 10 and not group.pending_txn_offsets


def test_an_append_completing_after_the_abort_marker_does_not_revive_its_offsets():
    """Issue 18's lost write: the ABORT (a new incarnation fenced the producer) landed while the
    TxnOffsetCommit's append waited for the ISR; the same producer id's next COMMIT must not
    make the aborted transaction's offsets the group's."""
    from coordinator.group.state import OffsetAndMetadata

    group = GroupMetadata("g")
    commit = OffsetAndMetadata(7200, producer_epoch=3)
    group.prepare_txn_offset_commit(1000, {("in", 1): commit})
    group.complete_pending_txn_offset_commit(1000, is_commit=False, producer_epoch=4)
    commit.log_offset = 41  # the append completes after the marker
    assert group.on_txn_offset_commit_append(1000, ("in", 1), commit) is False
    assert not group.has_pending_offset_commits(("in", 1))
    group.complete_pending_txn_offset_commit(1000, is_commit=True, producer_epoch=5)
    assert ("in", 1) not in group.offsets


def test_an_append_completing_after_a_later_commit_replaced_it_keeps_the_later_one():
    from coordinator.group.state import OffsetAndMetadata

    group = GroupMetadata("g")
    first = OffsetAndMetadata(100, producer_epoch=0)
    group.prepare_txn_offset_commit(1, {("t", 0): first})
    second, kept = appended_txn_offset(group, 1, ("t", 0), 200, log_offset=12)
    assert kept
    first.log_offset = 11
    assert group.on_txn_offset_commit_append(1, ("t", 0), first) is False
    group.complete_pending_txn_offset_commit(1, is_commit=True, producer_epoch=0)
    assert group.offsets[("t", 0)] is second


def test_a_commit_marker_applies_only_offsets_of_its_own_producer_epoch():
    """Offsets left pending by an earlier incarnation's transaction (its marker never reached
    this partition) are not the committed transaction's: they are discarded, not applied."""
    group = GroupMetadata("g")
    appended_txn_offset(group, 5, ("t", 0), 10, log_offset=3, producer_epoch=1)
    appended_txn_offset(group, 5, ("t", 1), 20, log_offset=4, producer_epoch=2)
    assert group.complete_pending_txn_offset_commit(5, is_commit=True, producer_epoch=2) == (1, 1)
    assert ("t", 0) not in group.offsets and group.offsets[("t", 1)].offset == 20
    assert not group.pending_txn_offsets
