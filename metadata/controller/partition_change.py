"""Partition changes: the next state of one partition, as pure functions (PartitionChangeBuilder).

Owns the decisions the controller and the admin APIs take about a single partition:
``elect`` (a new leader from the ISR in replica order when the leader is gone or shutting down;
NO_LEADER unless unclean election is allowed; gone brokers leave the ISR; the preferred replica
back when asked), ``fence_restarted`` (a broker that starts again leaves every ISR first),
ElectLeaders' ``elect_preferred`` / ``elect_unclean``, and KIP-455 reassignments (start,
cancel, complete once every target replica is in the ISR). Each returns a new
:class:`~metadata.records.PartitionState` (leader epoch bumped when the leader changes,
partition epoch on every change) or None when nothing changes; writing it is the caller's,
by compare-and-swap on the record it was computed from.

Differs from Kafka: no eligible leader replicas (KIP-966) yet.
"""

from __future__ import annotations

from dataclasses import replace

from protocol.errors import ErrorCode

from ..records import NO_LEADER, PartitionState

__all__ = ["elect", "fence_restarted", "elect_preferred", "elect_unclean", "start_reassignment",
           "cancel_reassignment", "complete_reassignment"]


def elect(state: PartitionState, live: set[int], alive: set[int], *, unclean: bool,
          preferred: bool) -> PartitionState | None:
    """The new state of one partition for the live brokers, or None when nothing changes.

    ``alive``: registered brokers; ``live``: those of them not shutting down (may lead)."""
    isr = [r for r in state.isr if r in alive]
    leader = state.leader
    if leader not in live:
        candidates = [r for r in state.replicas if r in isr and r in live]
        if candidates:
            leader = candidates[0]
            isr = [r for r in isr if r in live]
        elif unclean and any(r in live for r in state.replicas):
            leader = next(r for r in state.replicas if r in live)
            isr = [leader]
        elif leader in alive:
            pass  # shutting down with nobody to take over: it leads until it is gone
        else:
            leader = NO_LEADER
            isr = isr or state.isr[:1]  # keep the last ISR member: it may come back
    elif preferred and state.preferred_leader != leader and state.preferred_leader in live \
            and state.preferred_leader in isr:
        leader = state.preferred_leader
    isr = [r for r in isr if r in live or r == leader] if leader != NO_LEADER else isr
    if leader == state.leader and isr == state.isr:
        return None
    epoch = state.leader_epoch + (1 if leader != state.leader else 0)
    return replace(state, leader=leader, leader_epoch=epoch, isr=isr,
                   partition_epoch=state.partition_epoch + 1)


def fence_restarted(state: PartitionState, node: int, live: set[int]) -> PartitionState | None:
    """A broker that (re)starts must catch up before it counts: it leaves the ISR, and any
    leadership it held goes to a live ISR peer (KRaft fences a newly registered broker the
    same way). When it is the only live ISR member it keeps leading, with a new leader epoch,
    so no follower ever compares its log against the previous life's epoch."""
    if node not in state.isr:
        return None
    others = [r for r in state.replicas if r in state.isr and r != node and r in live]
    if not others:
        if state.leader != node:
            return None
        return replace(state, leader_epoch=state.leader_epoch + 1, isr=[node],
                       partition_epoch=state.partition_epoch + 1)
    leader = state.leader if state.leader not in (node, NO_LEADER) else others[0]
    return replace(state, leader=leader, leader_epoch=state.leader_epoch + int(leader != state.leader),
                   isr=[r for r in state.isr if r != node], partition_epoch=state.partition_epoch + 1)


def elect_preferred(state: PartitionState, live: set[int]) -> tuple[PartitionState | None, int]:
    """ElectLeaders PREFERRED: (new state, 0), or (None, ELECTION_NOT_NEEDED /
    PREFERRED_LEADER_NOT_AVAILABLE)."""
    preferred = state.preferred_leader
    if state.leader == preferred:
        return None, ErrorCode.election_not_needed
    if preferred not in live or preferred not in state.isr:
        return None, ErrorCode.preferred_leader_not_available
    return replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1,
                   partition_epoch=state.partition_epoch + 1), 0


def elect_unclean(state: PartitionState, live: set[int], alive: set[int]) -> tuple[PartitionState | None, int]:
    """ElectLeaders UNCLEAN: only for a partition without a live leader; an ISR member first,
    else any live replica (which may lose records the ISR had)."""
    if state.leader in live:
        return None, ErrorCode.election_not_needed
    new = elect(state, live, alive, unclean=True, preferred=False)
    if new is None or new.leader == NO_LEADER:
        return None, ErrorCode.eligible_leaders_not_available
    return new, 0


def start_reassignment(state: PartitionState, target: list[int]) -> PartitionState:
    """KIP-455: replicas become target + the ones leaving; the leaving ones go once every
    target replica is in the ISR (``complete_reassignment``)."""
    current = [r for r in state.replicas if r not in state.adding_replicas] if state.adding_replicas \
        else state.replicas
    adding = [r for r in target if r not in current]
    removing = [r for r in current if r not in target]
    if not adding and not removing:
        return replace(state, replicas=list(target), adding_replicas=[], removing_replicas=[],
                       partition_epoch=state.partition_epoch + 1)
    return replace(state, replicas=list(target) + removing, adding_replicas=adding,
                   removing_replicas=removing, partition_epoch=state.partition_epoch + 1)


def cancel_reassignment(state: PartitionState) -> PartitionState | None:
    if not state.adding_replicas and not state.removing_replicas:
        return None
    original = [r for r in state.replicas if r not in state.adding_replicas]
    isr = [r for r in state.isr if r in original] or state.isr
    leader = state.leader if state.leader in original else (isr[0] if isr else NO_LEADER)
    return replace(state, replicas=original, isr=isr, leader=leader, adding_replicas=[], removing_replicas=[],
                   leader_epoch=state.leader_epoch + (leader != state.leader),
                   partition_epoch=state.partition_epoch + 1)


def complete_reassignment(state: PartitionState, live: set[int]) -> PartitionState | None:
    """Finish a reassignment once every target replica is in the ISR."""
    if not state.adding_replicas and not state.removing_replicas:
        return None
    target = [r for r in state.replicas if r not in state.removing_replicas]
    if not all(r in state.isr for r in target):
        return None
    isr = [r for r in state.isr if r in target]
    leader = state.leader
    if leader not in target:
        leader = next((r for r in target if r in isr and r in live), NO_LEADER)
    return replace(state, replicas=target, isr=isr, leader=leader, adding_replicas=[], removing_replicas=[],
                   leader_epoch=state.leader_epoch + (leader != state.leader),
                   partition_epoch=state.partition_epoch + 1)
