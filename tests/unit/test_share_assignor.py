"""The share-group simple assignor: balance first, stickiness second, partitions shared when
members outnumber them (Kafka's SimpleHomogeneous/HeterogeneousAssignmentBuilder)."""

import uuid

from coordinator.share.assignor import assign

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
TOPICS = {"t1": (T1, 4), "t2": (T2, 2)}


def partitions_of(assignment, topic_id):
    return {m: set(a.get(topic_id, ())) for m, a in assignment.items()}


def test_single_member_gets_every_partition_of_its_topics():
    out = assign({"a": frozenset({"t1", "t2"})}, TOPICS, {})
    assert out == {"a": {T1: frozenset(range(4)), T2: frozenset(range(2))}}


def test_partitions_are_balanced_and_not_shared_when_they_suffice():
    out = assign({"a": frozenset({"t1"}), "b": frozenset({"t1"})}, TOPICS, {})
    got = partitions_of(out, T1)
    assert len(got["a"]) == len(got["b"]) == 2
    assert got["a"].isdisjoint(got["b"])


def test_members_beyond_the_partition_count_share_partitions():
    subs = {m: frozenset({"t2"}) for m in "abc"}
    out = assign(subs, TOPICS, {})
    holders = {p: {m for m in subs if p in out[m].get(T2, ())} for p in range(2)}
    assert all(len(h) == 2 for h in holders.values())  # desired sharing ceil(3 / 2)
    assert sorted(len(out[m][T2]) for m in subs) == [1, 1, 2]
    assert all(out[m] for m in subs)  # nobody is left without a partition


def test_a_joining_member_takes_partitions_from_the_others_who_keep_the_rest():
    before = assign({"a": frozenset({"t1"})}, TOPICS, {})
    after = assign({"a": frozenset({"t1"}), "b": frozenset({"t1"})}, TOPICS, before)
    assert after["a"][T1] < before["a"][T1]
    assert len(after["a"][T1]) == len(after["b"][T1]) == 2


def test_a_leaving_member_partitions_go_to_the_others():
    both = assign({"a": frozenset({"t1"}), "b": frozenset({"t1"})}, TOPICS, {})
    after = assign({"a": frozenset({"t1"})}, TOPICS, both)
    assert after == {"a": {T1: frozenset(range(4))}}


def test_different_subscriptions_are_balanced_topic_by_topic():
    out = assign({"a": frozenset({"t1"}), "b": frozenset({"t1", "t2"})}, TOPICS, {})
    assert T2 not in out["a"] and out["b"][T2] == frozenset(range(2))
    assert len(out["a"][T1]) == len(out["b"][T1]) == 2


def test_unknown_topics_and_unsubscribed_topics_are_not_assigned():
    previous = {"a": {T2: frozenset({0, 1})}}
    out = assign({"a": frozenset({"t1", "nope"})}, TOPICS, previous)
    assert out == {"a": {T1: frozenset(range(4))}}


def test_no_topics_means_an_empty_assignment():
    assert assign({"a": frozenset({"nope"})}, TOPICS, {}) == {"a": {}}
