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


def test_transactional_offsets_apply_on_commit_only_if_newer_in_the_log():
    from coordinator.group.state import OffsetAndMetadata

    group = GroupMetadata("g")
    group.on_txn_offset_commit_append(7, ("t", 0), OffsetAndMetadata(10, log_offset=5))
    group.on_txn_offset_commit_append(7, ("t", 1), OffsetAndMetadata(11, log_offset=5))
    group.on_offset_commit_append(("t", 1), OffsetAndMetadata(99, log_offset=6))
    assert group.has_pending_offset_commits(("t", 0))
    group.complete_pending_txn_offset_commit(7, is_commit=True)
    assert group.offsets[("t", 0)].offset == 10
    assert group.offsets[("t", 1)].offset == 99  # the plain commit came later in the log
    group.on_txn_offset_commit_append(8, ("t", 0), OffsetAndMetadata(20, log_offset=9))
    group.complete_pending_txn_offset_commit(8, is_commit=False)
    assert group.offsets[("t", 0)].offset == 10 and not group.pending_txn_offsets
