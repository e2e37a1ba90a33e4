"""KIP-848 consumer group state: the group, its members, and member reconciliation.

Owns :class:`ConsumerGroupState` (the state machine as data, with valid previous states),
:class:`MemberState`, :class:`ConsumerGroupMember`, :class:`ConsumerGroup` (group epoch,
target assignment and its epoch, which member owns which partition at which epoch, static
members) and :func:`reconcile`, Kafka's ``CurrentAssignmentBuilder``: how a member moves from
its current assignment towards its target, releasing partitions pending revocation before
any other member gets them. ``ConsumerGroup.replay`` applies one ``__consumer_offsets``
record (:mod:`.consumer_records`), exactly as the coordinator applies what it writes, so a
loaded group equals the group that wrote the log. No I/O, no timers.

Mirrors group-coordinator ``modern/consumer/ConsumerGroup``, ``ConsumerGroupMember``,
``CurrentAssignmentBuilder`` and ``modern/MemberState`` of Kafka 4.3.1. Differs: the group state
is recomputed after each change (as Kafka's ``maybeUpdateGroupState``) and checked against
the valid-previous-states table; per-partition assignment epochs (KIP-1251's
``AssignmentEpochs``) are not kept, so offset commits are checked against the member epoch only.
"""

from __future__ import annotations

import copy
import enum
import uuid
from dataclasses import dataclass, field

from . import consumer_records as rec
from .consumer_records import Assignment, ConsumerGroupKey

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class ConsumerGroupState(enum.Enum):
    """``value`` is the name Kafka reports (ConsumerGroupDescribe, ListGroups)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


_LIVE = frozenset({ConsumerGroupState.EMPTY, ConsumerGroupState.ASSIGNING,
                   ConsumerGroupState.RECONCILING, ConsumerGroupState.STABLE})

# Any live state may follow any live state (a heartbeat can change membership, subscriptions
# and assignment at once); Dead is final.
VALID_PREVIOUS_STATES: dict[ConsumerGroupState, frozenset[ConsumerGroupState]] = {
    ConsumerGroupState.EMPTY: _LIVE,
    ConsumerGroupState.ASSIGNING: _LIVE,
    ConsumerGroupState.RECONCILING: _LIVE,
    ConsumerGroupState.STABLE: _LIVE,
    ConsumerGroupState.DEAD: _LIVE | {ConsumerGroupState.DEAD},
}


class IllegalConsumerGroupTransition(RuntimeError):
    pass


class MemberState(enum.IntEnum):
    """Kafka's ``MemberState`` with its record values."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class FencedMemberEpoch(Exception):
    """Kafka's ``FencedMemberEpochException`` (the message is sent to the client)."""


@dataclass(slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: Assignment = field(default_factory=dict)
    partitions_pending_revocation: Assignment = field(default_factory=dict)

    def subscription_value(self) -> rec.MemberMetadataValue:
        return rec.MemberMetadataValue(self.instance_id, self.rack_id, self.client_id, self.client_host,
                                       list(self.subscribed_topic_names), self.subscribed_topic_regex,
                                       self.rebalance_timeout_ms, self.server_assignor)

    def assignment_value(self) -> rec.CurrentAssignmentValue:
        return rec.CurrentAssignmentValue(self.member_epoch, self.previous_member_epoch, int(self.state),
                                          dict(self.assigned_partitions),
                                          dict(self.partitions_pending_revocation))

    def same_subscription(self, other: ConsumerGroupMember) -> bool:
        return self.subscription_value() == other.subscription_value()

    def same_assignment(self, other: ConsumerGroupMember) -> bool:
        return self.assignment_value() == other.assignment_value()

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state == MemberState.STABLE and self.member_epoch == target_epoch


def _with_state(member: ConsumerGroupMember, state: MemberState, epoch: int, assigned: Assignment,
                pending: Assignment) -> ConsumerGroupMember:
    updated = copy.copy(member)
    updated.state = state
    updated.previous_member_epoch = member.member_epoch
    updated.member_epoch = epoch
    updated.assigned_partitions = assigned
    updated.partitions_pending_revocation = pending
    return updated


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Kafka's ``ownsRevokedPartitions``: does the member still report any of ``partitions``?
    An unknown owned set (``None``, the request did not carry it) counts as yes."""
    if owned is None:
        return True
    return any(owned.get(t, frozenset()) & ps for t, ps in partitions.items())


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment,
              partition_epoch, owned: Assignment | None) -> ConsumerGroupMember:
    """Kafka's ``CurrentAssignmentBuilder.build``: the member's next assignment state.

    ``partition_epoch(topic_id, partition)`` is the epoch of the member owning the partition
    now, -1 when none does; ``owned`` the partitions the member says it owns (None: not sent).
    """
    if member.state == MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
        return member
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.partitions_pending_revocation):
            return member
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if member.state == MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    # UNKNOWN
    if owned is None or owned:
        raise FencedMemberEpoch("The consumer group member is in a unknown state. "
                                "The member must abandon all its partitions and rejoin.")
    return _next_assignment(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _next_assignment(member: ConsumerGroupMember, member_epoch: int, target_epoch: int,
                     target: Assignment, partition_epoch, owned: Assignment | None) -> ConsumerGroupMember:
    """Kafka's ``CurrentAssignmentBuilder.computeNextAssignment``."""
    has_unreleased = False
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    pending_assignment: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id in set(target) | set(member.assigned_partitions):
        want = target.get(topic_id, frozenset())
        have = member.assigned_partitions.get(topic_id, frozenset())
        keep = have & want
        revoke = have - keep
        to_assign = want - keep
        free = frozenset(p for p in to_assign if partition_epoch(topic_id, p) == -1)
        has_unreleased = has_unreleased or free != to_assign
        if keep:
            assigned[topic_id] = keep
        if revoke:
            revoking[topic_id] = revoke
        if free:
            pending_assignment[topic_id] = free
    if revoking and _owns_any(owned, revoking):
        return _with_state(member, MemberState.UNREVOKED_PARTITIONS, member_epoch, assigned, revoking)
    for topic_id, ps in pending_assignment.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE
    return _with_state(member, state, target_epoch, assigned, {})


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    assignment_timestamp: int = 0
    state: ConsumerGroupState = ConsumerGroupState.EMPTY
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target_assignment: dict[str, Assignment] = field(default_factory=dict)
    # (topic id, partition) -> epoch of the member that owns it (assigned or pending revocation).
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)

    # --- queries --------------------------------------------------------------------------------

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id) if instance_id is not None else None
        return None if member_id is None else self.members.get(member_id)

    def subscribed_topic_names(self, regex_topics) -> set[str]:
        """Every topic some member subscribes to; ``regex_topics(regex)`` resolves a regex."""
        names: set[str] = set()
        for m in self.members.values():
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                names.update(regex_topics(m.subscribed_topic_regex))
        return names

    def preferred_assignor(self, default: str) -> str:
        """Kafka's ``computePreferredServerAssignor``: the most used member choice, else the default."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return default
        return max(sorted(votes), key=lambda name: votes[name])

    def compute_state(self) -> ConsumerGroupState:
        """Kafka's ``maybeUpdateGroupState``."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def update_state(self) -> None:
        self.transition_to(self.compute_state())

    def transition_to(self, target: ConsumerGroupState) -> None:
        if target is self.state:
            return
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalConsumerGroupTransition(f"group {self.group_id}: {self.state.value} -> {target.value}")
        self.state = target

    # --- replay: the one way state changes --------------------------------------------------------

    def replay(self, key: ConsumerGroupKey, value) -> None:
        """Apply one consumer-group record (Kafka's ``GroupMetadataManager.replay`` overloads)."""
        t = key.record_type
        if t == rec.CONSUMER_GROUP_METADATA:
            if value is not None:
                self.group_epoch = value.epoch
                self.metadata_hash = value.metadata_hash
        elif t == rec.CONSUMER_GROUP_MEMBER_METADATA:
            self._replay_member_metadata(key.member_id, value)
        elif t == rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
            if value is not None:
                self.assignment_epoch = value.assignment_epoch
                self.assignment_timestamp = value.assignment_timestamp
        elif t == rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                self.target_assignment.pop(key.member_id, None)
            else:
                self.target_assignment[key.member_id] = dict(value.partitions)
        elif t == rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            self._replay_current_assignment(key.member_id, value)
        if self.state is not ConsumerGroupState.DEAD:
            self.update_state()

    def _replay_member_metadata(self, member_id: str, value: rec.MemberMetadataValue | None) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is not None:
                self._release(old)
                del self.members[member_id]
                if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
                    del self.static_members[old.instance_id]
            return
        member = old or ConsumerGroupMember(member_id)
        member.instance_id = value.instance_id
        member.rack_id = value.rack_id
        member.client_id = value.client_id
        member.client_host = value.client_host
        member.subscribed_topic_names = tuple(value.subscribed_topic_names)
        member.subscribed_topic_regex = value.subscribed_topic_regex
        member.rebalance_timeout_ms = value.rebalance_timeout_ms
        member.server_assignor = value.server_assignor
        self.members[member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member_id

    def _replay_current_assignment(self, member_id: str, value: rec.CurrentAssignmentValue | None) -> None:
        member = self.members.get(member_id)
        if member is None:
            if value is None:
                return
            member = self.members[member_id] = ConsumerGroupMember(member_id)
        self._release(member)
        if value is None:
            # Kafka resets the member's assignment (the member metadata tombstone removes it).
            member.member_epoch = member.previous_member_epoch = 0
            member.state = MemberState.STABLE
            member.assigned_partitions = {}
            member.partitions_pending_revocation = {}
            return
        member.member_epoch = value.member_epoch
        member.previous_member_epoch = value.previous_member_epoch
        member.state = MemberState(value.state) if value.state in MemberState._value2member_map_ \
            else MemberState.UNKNOWN
        member.assigned_partitions = dict(value.assigned_partitions)
        member.partitions_pending_revocation = dict(value.partitions_pending_revocation)
        self._claim(member)

    def _release(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, ps in assignment.items():
                for p in ps:
                    if self.partition_epochs.get((topic_id, p)) == member.member_epoch:
                        del self.partition_epochs[(topic_id, p)]

    def _claim(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, ps in assignment.items():
                for p in ps:
                    self.partition_epochs[(topic_id, p)] = member.member_epoch

    # --- records ------------------------------------------------------------------------------------

    def key(self, record_type: int, member_id: str | None = None) -> ConsumerGroupKey:
        return ConsumerGroupKey(record_type, self.group_id, member_id)

    def member_removal_records(self, member_id: str) -> list[tuple[ConsumerGroupKey, None]]:
        """Kafka's ``removeMember``: current assignment, target assignment, then metadata tombstones."""
        return [(self.key(rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, member_id), None),
                (self.key(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, member_id), None),
                (self.key(rec.CONSUMER_GROUP_MEMBER_METADATA, member_id), None)]

    def tombstones(self) -> list[tuple[ConsumerGroupKey, None]]:
        """Kafka's ``createGroupTombstoneRecords`` for an empty group."""
        out: list[tuple[ConsumerGroupKey, None]] = []
        for member_id in self.members:
            out.extend(self.member_removal_records(member_id))
        out.append((self.key(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA), None))
        out.append((self.key(rec.CONSUMER_GROUP_METADATA), None))
        return out
