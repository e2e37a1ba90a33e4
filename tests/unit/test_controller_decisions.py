"""The controller's decisions as pure functions of a partition's state."""

from __future__ import annotations

import pytest

from metadata.controller.partition_change import (
    cancel_reassignment,
    complete_reassignment,
    elect,
    elect_preferred,
    elect_unclean,
    fence_restarted,
    start_reassignment,
)
from metadata.controller.placement import assign_replicas
from metadata.records import NO_LEADER, PartitionState
from protocol.errors import ErrorCode, KafkaError


def state(leader=1, epoch=5, replicas=(1, 2, 3), isr=(1, 2, 3)) -> PartitionState:
    return PartitionState(leader, epoch, list(replicas), list(isr), partition_epoch=7)


def test_dead_leader_is_replaced_by_the_first_live_isr_replica_with_a_new_epoch():
    new = elect(state(), live={2, 3}, alive={2, 3}, unclean=False, preferred=False)
    assert (new.leader, new.leader_epoch, new.isr, new.partition_epoch) == (2, 6, [2, 3], 8)


def test_no_live_isr_member_means_no_leader_unless_unclean():
    s = state(isr=(1,))
    clean = elect(s, live={2, 3}, alive={2, 3}, unclean=False, preferred=False)
    assert clean.leader == NO_LEADER and clean.isr == [1]
    unclean = elect(s, live={2, 3}, alive={2, 3}, unclean=True, preferred=False)
    assert unclean.leader == 2 and unclean.isr == [2]


def test_a_dead_follower_leaves_the_isr_without_a_leader_change():
    new = elect(state(), live={1, 2}, alive={1, 2}, unclean=False, preferred=False)
    assert (new.leader, new.leader_epoch, new.isr) == (1, 5, [1, 2])


def test_nothing_changes_when_everyone_is_live():
    assert elect(state(), live={1, 2, 3}, alive={1, 2, 3}, unclean=False, preferred=True) is None


def test_preferred_leader_returns_only_from_the_isr():
    s = state(leader=2, isr=(2, 3))
    assert elect(s, live={1, 2, 3}, alive={1, 2, 3}, unclean=False, preferred=True) is None
    s = state(leader=2)
    assert elect(s, live={1, 2, 3}, alive={1, 2, 3}, unclean=False, preferred=True).leader == 1
    assert elect_preferred(state(), {1, 2, 3}) == (None, ErrorCode.election_not_needed)
    assert elect_preferred(state(leader=2, isr=(2, 3)), {1, 2, 3})[1] == ErrorCode.preferred_leader_not_available


def test_unclean_election_only_without_a_live_leader():
    assert elect_unclean(state(), {1, 2, 3}, {1, 2, 3})[1] == ErrorCode.election_not_needed
    new, code = elect_unclean(state(isr=(1,)), {3}, {3})
    assert code == 0 and new.leader == 3 and new.isr == [3]
    assert elect_unclean(state(isr=(1,)), set(), set())[1] == ErrorCode.eligible_leaders_not_available


def test_a_restarted_broker_leaves_the_isr_and_hands_over_its_leadership():
    new = fence_restarted(state(), node=1, live={1, 2, 3})
    assert (new.leader, new.leader_epoch, new.isr) == (2, 6, [2, 3])
    follower = fence_restarted(state(), node=3, live={1, 2, 3})
    assert (follower.leader, follower.leader_epoch, follower.isr) == (1, 5, [1, 2])
    assert fence_restarted(state(isr=(1, 2)), node=3, live={1, 2, 3}) is None


def test_a_restarted_sole_isr_member_keeps_leading_under_a_new_epoch():
    new = fence_restarted(state(isr=(1,)), node=1, live={1})
    assert (new.leader, new.leader_epoch, new.isr) == (1, 6, [1])


def test_reassignment_adds_first_and_drops_once_the_targets_are_in_sync():
    s = start_reassignment(state(replicas=(1, 2), isr=(1, 2)), [2, 3])
    assert (s.replicas, s.adding_replicas, s.removing_replicas) == ([2, 3, 1], [3], [1])
    assert complete_reassignment(s, {1, 2, 3}) is None  # 3 not in the ISR yet
    s.isr = [1, 2, 3]
    done = complete_reassignment(s, {1, 2, 3})
    assert (done.replicas, done.isr, done.leader, done.adding_replicas) == ([2, 3], [2, 3], 2, [])
    assert done.leader_epoch == 6


def test_cancelled_reassignment_restores_the_original_replicas():
    s = start_reassignment(state(replicas=(1, 2), isr=(1, 2)), [2, 3])
    back = cancel_reassignment(s)
    # As Kafka's revert: the current list without the adding replicas (its order, not the original's).
    assert (back.replicas, back.adding_replicas, back.removing_replicas) == ([2, 1], [], [])
    assert cancel_reassignment(state()) is None


def test_assignment_spreads_leaders_and_refuses_too_high_a_factor():
    out = assign_replicas(6, 3, {1: None, 2: None, 3: None}, seed=1)
    assert sorted(r[0] for r in out) == [1, 1, 2, 2, 3, 3]
    assert all(len(set(r)) == 3 for r in out)
    with pytest.raises(KafkaError) as exc:
        assign_replicas(1, 4, {1: None, 2: None, 3: None})
    assert exc.value.code == ErrorCode.invalid_replication_factor


def test_rack_aware_assignment_spans_racks():
    brokers = {1: "a", 2: "a", 3: "b", 4: "b"}
    for replicas in assign_replicas(8, 2, brokers, seed=3):
        assert {brokers[r] for r in replicas} == {"a", "b"}


def test_a_shutting_down_leader_without_a_successor_keeps_leading():
    s = state(isr=(1,))
    assert elect(s, live={2, 3}, alive={1, 2, 3}, unclean=False, preferred=False) is None
    moved = elect(state(), live={2, 3}, alive={1, 2, 3}, unclean=False, preferred=False)
    assert (moved.leader, moved.isr) == (2, [2, 3])


def test_fenced_brokers_hold_replicas_only_when_the_unfenced_do_not_suffice_and_then_last():
    """KRaft's placer: RF 2 with one of three fenced stays on the two unfenced brokers (a
    partition starting with a follower on a dead broker would start under-replicated, below a
    min.insync.replicas of 2); RF 3 needs the fenced one, always as the last replica."""
    brokers = {1: None, 2: None, 3: None}
    for seed in range(20):
        two = assign_replicas(30, 2, brokers, seed=seed, fenced={3})
        assert all(sorted(r) == [1, 2] for r in two)
        assert sorted(r[0] for r in two) == [1] * 15 + [2] * 15
        three = assign_replicas(12, 3, brokers, seed=seed, fenced={3})
        assert all(sorted(r) == [1, 2, 3] and r[2] == 3 for r in three)
        single = assign_replicas(12, 1, brokers, seed=seed, fenced={2, 3})
        assert single == [[1]] * 12  # the one active broker leads every partition
        spread = assign_replicas(12, 3, {1: None, 2: None, 3: None, 4: None}, seed=seed, fenced={2, 3, 4})
        assert all(r[0] == 1 for r in spread) and {r[1] for r in spread} == {2, 3, 4}
    racked = assign_replicas(12, 2, {1: "a", 2: "b", 3: "a", 4: "b"}, seed=1, fenced={1, 2})
    assert all(sorted(r) == [3, 4] for r in racked)


def test_all_brokers_fenced_is_an_invalid_replication_factor():
    with pytest.raises(KafkaError) as err:
        assign_replicas(1, 2, {1: None, 2: None}, fenced={1, 2})
    assert err.value.code == ErrorCode.invalid_replication_factor
    assert str(err.value) == "Unable to replicate the partition 2 time(s): All brokers are currently fenced."


def test_a_new_partition_starts_with_its_active_replicas_in_the_isr():
    state = PartitionState.created([3, 1, 2], active={1, 2})
    assert (state.leader, state.replicas, state.isr, state.leader_epoch) == (1, [3, 1, 2], [1, 2], 0)


def test_clients_are_sent_to_the_broker_that_answered_while_it_is_unfenced():
    from metadata.image import MetadataCache

    cache = MetadataCache(node_id=1)
    cache.controller_id = 3
    cache.brokers = dict.fromkeys([1, 2, 3])
    # Not the controller, which may be dead and not yet fenced: the broker the client reached.
    assert cache.controller_for_clients(1) == 1
    assert cache.controller_for_clients(3) == 3
    del cache.brokers[1]  # the answering broker is fenced (its session lapsed): the controller
    assert cache.controller_for_clients(1) == 3
    cache.controller_id = NO_LEADER  # and between two controllers: still never -1
    assert cache.controller_for_clients(1) == 1


def test_a_controller_key_naming_this_node_but_not_held_by_this_process_is_removed_not_obeyed():
    """A broker restarted after kill -9 finds its previous life's controller key (its lease not
    yet lapsed): it does not act as controller on that epoch; it removes the key, and the next
    pass campaigns."""
    import asyncio

    from metadata.controller.controller import Controller
    from metadata.image import MetadataCache

    class Store:
        connected = True
        removed: list[int] = []

        def holds_controller(self, epoch: int) -> bool:
            return epoch == 9

        async def remove_stale_controller(self, epoch: int) -> None:
            self.removed.append(epoch)

        async def campaign(self) -> int:
            return 9

    image = MetadataCache(node_id=1)
    image.controller_id, image.controller_epoch = 1, 5  # the previous life's
    store = Store()
    controller = Controller(image, store, {})
    asyncio.run(controller._campaign_if_vacant())
    assert store.removed == [5] and not controller.is_active
    image.controller_id, image.controller_epoch = -1, 0  # the key is gone: campaign
    asyncio.run(controller._campaign_if_vacant())
    image.controller_id, image.controller_epoch = 1, 9
    assert controller.epoch == 9 and controller.is_active
