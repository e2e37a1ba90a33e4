"""KIP-848 consumer groups, pure parts: the assignors, member reconciliation (Kafka's
CurrentAssignmentBuilder), the group's record replay and the record codecs."""

from __future__ import annotations

import uuid

import pytest

from coordinator.group import consumer_records as rec
from coordinator.group.assignors import MemberSpec, configured_assignors, range_assign, uniform_assign
from coordinator.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    FencedMemberEpoch,
    IllegalConsumerGroupTransition,
    MemberState,
    reconcile,
)

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def _all(assignment: dict) -> list[tuple[uuid.UUID, int]]:
    return sorted((t, p) for a in assignment.values() for t, ps in a.items() for p in ps)


# --- assignors ---------------------------------------------------------------------------------

def test_uniform_spreads_every_partition_evenly():
    members = {m: MemberSpec(frozenset({T1, T2})) for m in ("a", "b", "c")}
    out = uniform_assign(members, {T1: 7, T2: 3}, {})
    assert _all(out) == sorted([(T1, p) for p in range(7)] + [(T2, p) for p in range(3)])
    sizes = sorted(sum(len(ps) for ps in a.values()) for a in out.values())
    assert sizes == [3, 3, 4]


def test_uniform_is_sticky_when_a_member_joins():
    current = uniform_assign({"a": MemberSpec(frozenset({T1})), "b": MemberSpec(frozenset({T1}))}, {T1: 6}, {})
    members = {m: MemberSpec(frozenset({T1})) for m in ("a", "b", "c")}
    out = uniform_assign(members, {T1: 6}, current)
    for m in ("a", "b"):
        assert out[m][T1] <= current[m][T1]  # only moves away, never shuffles
    assert [len(out[m][T1]) for m in ("a", "b", "c")] == [2, 2, 2]


def test_uniform_gives_a_topic_only_to_its_subscribers():
    members = {"a": MemberSpec(frozenset({T1})), "b": MemberSpec(frozenset({T2}))}
    out = uniform_assign(members, {T1: 2, T2: 2}, {})
    assert out == {"a": {T1: frozenset({0, 1})}, "b": {T2: frozenset({0, 1})}}


def test_uniform_drops_partitions_of_a_deleted_topic():
    out = uniform_assign({"a": MemberSpec(frozenset({T1, T2}))}, {T1: 1}, {"a": {T2: frozenset({0})}})
    assert out == {"a": {T1: frozenset({0})}}


def test_range_assigns_consecutive_ranges_by_member_id():
    members = {m: MemberSpec(frozenset({T1})) for m in ("b", "a")}
    out = range_assign(members, {T1: 5}, {})
    assert out == {"a": {T1: frozenset({0, 1, 2})}, "b": {T1: frozenset({3, 4})}}


def test_configured_assignors_accepts_class_names_and_names():
    assert configured_assignors(["org.apache.kafka.coordinator.group.assignor.UniformAssignor",
                                 "org.apache.kafka.coordinator.group.assignor.RangeAssignor"]) == ["uniform", "range"]
    assert configured_assignors("range") == ["range"]


# --- reconciliation ------------------------------------------------------------------------------

def _free(topic_id, partition) -> int:
    return -1


def test_stable_member_moves_to_new_epoch_with_new_partitions():
    m = ConsumerGroupMember("m", member_epoch=1, assigned_partitions={T1: frozenset({0})})
    out = reconcile(m, 2, {T1: frozenset({0, 1})}, _free, {T1: frozenset({0})})
    assert (out.state, out.member_epoch, out.previous_member_epoch) == (MemberState.STABLE, 2, 1)
    assert out.assigned_partitions == {T1: frozenset({0, 1})}


def test_partitions_are_revoked_before_the_epoch_moves():
    m = ConsumerGroupMember("m", member_epoch=1, assigned_partitions={T1: frozenset({0, 1})})
    out = reconcile(m, 2, {T1: frozenset({0})}, _free, {T1: frozenset({0, 1})})
    assert out.state == MemberState.UNREVOKED_PARTITIONS and out.member_epoch == 1
    assert out.partitions_pending_revocation == {T1: frozenset({1})}
    # Still reported as owned: nothing moves.
    assert reconcile(out, 2, {T1: frozenset({0})}, _free, {T1: frozenset({0, 1})}) is out
    # Released: the member reaches the target epoch.
    done = reconcile(out, 2, {T1: frozenset({0})}, _free, {T1: frozenset({0})})
    assert (done.state, done.member_epoch) == (MemberState.STABLE, 2)
    assert done.partitions_pending_revocation == {}


def test_a_keepalive_without_owned_partitions_does_not_acknowledge_a_revocation():
    m = ConsumerGroupMember("m", member_epoch=1, state=MemberState.UNREVOKED_PARTITIONS,
                            assigned_partitions={T1: frozenset({0})},
                            partitions_pending_revocation={T1: frozenset({1})})
    assert reconcile(m, 2, {T1: frozenset({0})}, _free, None) is m


def test_partitions_still_owned_by_another_member_are_not_assigned():
    def owned_elsewhere(topic_id, partition):
        return 3 if partition == 1 else -1
    m = ConsumerGroupMember("m", member_epoch=1)
    out = reconcile(m, 2, {T1: frozenset({0, 1})}, owned_elsewhere, {})
    assert (out.state, out.member_epoch) == (MemberState.UNRELEASED_PARTITIONS, 2)
    assert out.assigned_partitions == {T1: frozenset({0})}
    later = reconcile(out, 2, {T1: frozenset({0, 1})}, _free, {T1: frozenset({0})})
    assert later.state == MemberState.STABLE and later.assigned_partitions == {T1: frozenset({0, 1})}


def test_unknown_member_state_is_fenced_unless_it_owns_nothing():
    m = ConsumerGroupMember("m", member_epoch=1, state=MemberState.UNKNOWN)
    with pytest.raises(FencedMemberEpoch, match="must abandon all its partitions"):
        reconcile(m, 2, {}, _free, {T1: frozenset({0})})
    assert reconcile(m, 2, {T1: frozenset({0})}, _free, {}).member_epoch == 2


# --- the group: replay and state ----------------------------------------------------------------

def _join(group: ConsumerGroup, member_id: str, epoch: int, assigned: dict) -> None:
    group.replay(group.key(rec.CONSUMER_GROUP_MEMBER_METADATA, member_id),
                 rec.MemberMetadataValue(None, None, "c", "/h", ["t"], None, 30000, None))
    group.replay(group.key(rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, member_id),
                 rec.CurrentAssignmentValue(epoch, epoch - 1, 0, assigned, {}))


def test_group_state_follows_epochs_and_members():
    g = ConsumerGroup("g")
    assert g.state is ConsumerGroupState.EMPTY
    g.replay(g.key(rec.CONSUMER_GROUP_METADATA), rec.GroupEpochValue(1))
    _join(g, "a", 0, {})
    assert g.state is ConsumerGroupState.ASSIGNING
    g.replay(g.key(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, "a"), rec.TargetAssignmentMemberValue({T1: frozenset({0})}))
    g.replay(g.key(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA), rec.TargetAssignmentEpochValue(1))
    assert g.state is ConsumerGroupState.RECONCILING
    g.replay(g.key(rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, "a"),
             rec.CurrentAssignmentValue(1, 0, 0, {T1: frozenset({0})}, {}))
    assert g.state is ConsumerGroupState.STABLE
    assert g.current_partition_epoch(T1, 0) == 1
    for key, value in g.member_removal_records("a"):
        g.replay(key, value)
    assert g.state is ConsumerGroupState.EMPTY and g.current_partition_epoch(T1, 0) == -1


def test_dead_is_final():
    g = ConsumerGroup("g")
    g.transition_to(ConsumerGroupState.DEAD)
    with pytest.raises(IllegalConsumerGroupTransition):
        g.transition_to(ConsumerGroupState.STABLE)


def test_static_members_are_indexed_by_instance_id():
    g = ConsumerGroup("g")
    g.replay(g.key(rec.CONSUMER_GROUP_MEMBER_METADATA, "m1"),
             rec.MemberMetadataValue("inst", None, "c", "/h", ["t"], None, 30000, "range"))
    assert g.static_member("inst").member_id == "m1"
    assert g.preferred_assignor("uniform") == "range"


# --- record codecs -------------------------------------------------------------------------------

@pytest.mark.parametrize("key,value", [
    (rec.ConsumerGroupKey(rec.CONSUMER_GROUP_METADATA, "g"), rec.GroupEpochValue(7, 12345)),
    (rec.ConsumerGroupKey(rec.CONSUMER_GROUP_METADATA, "g"), rec.GroupEpochValue(7, 0)),
    (rec.ConsumerGroupKey(rec.CONSUMER_GROUP_MEMBER_METADATA, "g", "m"),
     rec.MemberMetadataValue("i", "r", "client", "/127.0.0.1", ["a", "b"], "t.*", 45000, "uniform")),
    (rec.ConsumerGroupKey(rec.CONSUMER_GROUP_MEMBER_METADATA, "g", "m"),
     rec.MemberMetadataValue(None, None, "client", "/h", [], None, -1, None)),
    (rec.ConsumerGroupKey(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, "g"), rec.TargetAssignmentEpochValue(3, 99)),
    (rec.ConsumerGroupKey(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, "g", "m"),
     rec.TargetAssignmentMemberValue({T1: frozenset({0, 2}), T2: frozenset({1})})),
    (rec.ConsumerGroupKey(rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, "g", "m"),
     rec.CurrentAssignmentValue(5, 4, 1, {T1: frozenset({0})}, {T2: frozenset({3})})),
])
def test_records_round_trip(key, value):
    k, v = rec.consumer_group_record(key, value)
    assert rec.decode_consumer_key(k) == key
    assert rec.decode_consumer_value(key.record_type, v) == value


def test_record_bytes_follow_kafkas_schema():
    k, v = rec.consumer_group_record(rec.ConsumerGroupKey(rec.CONSUMER_GROUP_METADATA, "g"), rec.GroupEpochValue(1))
    assert k == b"\x00\x03\x00\x01g"
    assert v == b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00"  # version 0, epoch, no tagged fields
    k, _ = rec.consumer_group_record(rec.ConsumerGroupKey(rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, "g", "m"), None)
    assert k == b"\x00\x08\x00\x01g\x00\x01m"


def test_non_consumer_keys_are_not_decoded_as_consumer_records():
    assert rec.decode_consumer_key(b"\x00\x02\x00\x01g") is None  # GroupMetadataKey
