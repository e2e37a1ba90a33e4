"""Classic consumer group state: the state machine as data, members, committed offsets.

Owns: :class:`GroupState` with Kafka's ``validPreviousStates`` table (a transition from any
other state raises :class:`IllegalGroupTransition`), :class:`MemberMetadata` and
:class:`GroupMetadata` (members, leader, generation, protocol selection, pending members,
pending SyncGroups, static members, the topics a consumer group's members subscribe to,
committed offsets and transactional offsets still waiting for their marker). This module has
no I/O and no timers: the coordinator drives it and keeps the timer handles and response
futures it parks on members (Kafka's ``awaitingJoinCallback`` / ``awaitingSyncCallback``)
opaque here.

Mirrors Kafka's ``GroupMetadata`` / ``MemberMetadata`` (core/.../coordinator/group) closely;
differences: no offset expiration yet, and a member's callbacks are asyncio futures.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

from .metadata import subscribed_topics

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(enum.Enum):
    """The classic group states; ``value`` is the name Kafka reports (DescribeGroups, ListGroups)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @classmethod
    def parse(cls, name: str) -> GroupState | None:
        for s in cls:
            if s.value.lower() == name.lower():
                return s
        return None


# Kafka's GroupState.validPreviousStates.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                                               GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset({GroupState.STABLE, GroupState.PREPARING_REBALANCE,
                                GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD}),
}


class IllegalGroupTransition(RuntimeError):
    pass


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class OffsetAndMetadata:
    """A committed offset; ``log_offset`` is where its record sits in __consumer_offsets
    (None while the append is in flight), used to order transactional against plain commits;
    ``producer_epoch`` is the epoch of the transactional batch that wrote it (-1 for a plain
    commit), so that a marker completes only its own transaction's offsets."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1
    log_offset: int | None = None
    producer_epoch: int = -1


@dataclass(slots=True, eq=False)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    supported_protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # Kafka's awaitingJoinCallback / awaitingSyncCallback: futures the parked request awaits.
    join_waiter: Any = None
    sync_waiter: Any = None
    is_new: bool = False
    is_leaving: bool = False
    heartbeat_timer: Any = None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_waiter is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def has_satisfied_heartbeat(self) -> bool:
        """Asked when the session timer fires: does the member survive without a heartbeat?

        New members may expire while awaiting join; members waiting in a rebalance are
        covered by the rebalance timeouts instead.
        """
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def protocols(self) -> set[str]:
        return {name for name, _ in self.supported_protocols}

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.supported_protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return list(protocols) == list(self.supported_protocols)

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {candidates}")


@dataclass(eq=False)
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    current_state_timestamp: int | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    pending_sync_members: set[str] = field(default_factory=set)
    static_members: dict[str, str] = field(default_factory=dict)
    supported_protocols: dict[str, int] = field(default_factory=dict)
    new_member_added: bool = False
    num_members_awaiting_join: int = 0
    # Kafka's ``subscribedTopics``: computed when a generation starts (and on load); None
    # while unknown (no generation yet, not the consumer protocol, or unparseable metadata).
    subscribed_topics: set[str] | None = None
    # Committed offsets; commits whose append is in flight; transactional ones awaiting their
    # marker (producer id -> offsets; log_offset None until their own append completed).
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    pending_offset_commits: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = field(default_factory=dict)
    # Timer handles owned by the coordinator.
    join_timer: Any = None
    sync_timer: Any = None
    pending_member_timers: dict[str, Any] = field(default_factory=dict)
    # The KIP-848 consumer group of this id (coordinator/group/consumer_group.py), when the id
    # belongs to one: the classic fields above then stay empty and only the offsets are used.
    consumer: Any = None

    @property
    def group_type(self) -> str:
        return "classic" if self.consumer is None else "consumer"

    # --- state ----------------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, target: GroupState) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalGroupTransition(
                f"Group {self.group_id} should be in one of {sorted(s.value for s in VALID_PREVIOUS_STATES[target])} "
                f"states before moving to {target.value} state. Instead it is in {self.state.value} state.")
        self.state = target
        self.current_state_timestamp = now_ms()

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    # --- membership -----------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    @property
    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def add_pending_member(self, member_id: str) -> None:
        self.pending_members.add(member_id)

    def remove_pending_member(self, member_id: str) -> None:
        self.pending_members.discard(member_id)

    def current_static_member_id(self, group_instance_id: str | None) -> str | None:
        if group_instance_id is None:
            return None
        return self.static_members.get(group_instance_id)

    def add(self, member: MemberMetadata, join_waiter: Any = None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        for name in member.protocols():
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + 1
        self.set_join_waiter(member, join_waiter)
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            for name in member.protocols():
                self.supported_protocols[name] -= 1
            if member.is_awaiting_join:
                self.num_members_awaiting_join -= 1
            if member.group_instance_id is not None and \
                    self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        return member

    def set_join_waiter(self, member: MemberMetadata, waiter: Any) -> None:
        if member.join_waiter is None and waiter is not None:
            self.num_members_awaiting_join += 1
        elif member.join_waiter is not None and waiter is None:
            self.num_members_awaiting_join -= 1
        member.join_waiter = waiter

    def update_member(self, member: MemberMetadata, protocols: list[tuple[str, bytes]],
                      rebalance_timeout_ms: int, session_timeout_ms: int, join_waiter: Any) -> None:
        for name in member.protocols():
            self.supported_protocols[name] -= 1
        member.supported_protocols = list(protocols)
        for name in member.protocols():
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + 1
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        self.set_join_waiter(member, join_waiter)

    def replace_static_member(self, group_instance_id: str, old_member_id: str,
                              new_member_id: str) -> MemberMetadata:
        """A static member came back with a new member id: keep its place under the new id."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member

    def has_all_members_joined(self) -> bool:
        return self.num_members_awaiting_join == len(self.members) and not self.pending_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """If the leader did not rejoin, hand leadership to a member that did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # --- protocols ------------------------------------------------------------------------------

    def supports_protocols(self, member_protocol_type: str, member_protocols: set[str]) -> bool:
        if self.is_(GroupState.EMPTY) and not self.members:
            return bool(member_protocol_type) and bool(member_protocols)
        return (self.protocol_type == member_protocol_type
                and any(self.supported_protocols.get(p, 0) == len(self.members) for p in member_protocols))

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {p for p, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all members support."""
        if not self.members:
            raise ValueError("cannot select protocol for empty group")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda p: votes[p])  # ties: the first member's preference

    def init_next_generation(self) -> None:
        if self.members:
            self.generation_id += 1
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.generation_id += 1
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY)
        self.subscribed_topics = self.compute_subscribed_topics()
        self.pending_sync_members.clear()

    @property
    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def compute_subscribed_topics(self) -> set[str] | None:
        """Kafka's ``computeSubscribedTopics``: the union of the members' subscriptions under
        the selected protocol; None unless the group uses the consumer protocol and every
        member's metadata parses."""
        if not self.uses_consumer_protocol:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                member_topics = subscribed_topics(member.metadata(self.protocol_name))
            except KeyError:
                member_topics = None
            if member_topics is None:
                return None
            topics |= member_topics
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Kafka's ``isSubscribedToTopic``: when the subscriptions are unknown, a consumer
        group counts as subscribed to every topic."""
        if self.subscribed_topics is None:
            return self.uses_consumer_protocol
        return topic in self.subscribed_topics

    def current_member_metadata(self) -> list[dict]:
        """The JoinGroup response members, for the leader."""
        return [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata(self.protocol_name)} for m in self.members.values()]

    # --- offsets --------------------------------------------------------------------------------

    def prepare_offset_commit(self, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        """Kafka's ``prepareOffsetCommit``: the append is in flight (require_stable waits)."""
        self.pending_offset_commits.update(offsets)

    def on_offset_commit_append(self, tp: tuple[str, int], commit: OffsetAndMetadata) -> None:
        """The commit is durable: it becomes visible unless a later one in the log already is."""
        if self.pending_offset_commits.get(tp) is commit:
            del self.pending_offset_commits[tp]
        current = self.offsets.get(tp)
        if current is None or current.log_offset is None or commit.log_offset is None \
                or commit.log_offset > current.log_offset:
            self.offsets[tp] = commit

    def fail_pending_offset_write(self, tp: tuple[str, int], commit: OffsetAndMetadata) -> None:
        if self.pending_offset_commits.get(tp) is commit:
            del self.pending_offset_commits[tp]

    def prepare_txn_offset_commit(self, producer_id: int, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        self.pending_txn_offsets.setdefault(producer_id, {}).update(offsets)

    def on_txn_offset_commit_append(self, producer_id: int, tp: tuple[str, int],
                                    commit: OffsetAndMetadata) -> bool:
        """The append of a prepared transactional offset completed: True if ``commit`` is still
        the pending entry (its ``log_offset`` is now known), False if it no longer is.

        As Kafka's ``onTxnOffsetCommitAppend``, an entry is only ever updated, never
        re-created: while the append waited for the ISR, the transaction's ABORT marker may
        have landed (a new incarnation fenced the producer) and dropped it, or a later commit
        may have replaced it. Putting it back would let the producer id's next COMMIT make the
        aborted transaction's offsets the group's (a lost write)."""
        pending = self.pending_txn_offsets.get(producer_id)
        return pending is not None and pending.get(tp) is commit

    def fail_pending_txn_offset_commit(self, producer_id: int, tp: tuple[str, int],
                                       commit: OffsetAndMetadata) -> None:
        pending = self.pending_txn_offsets.get(producer_id)
        if pending is not None and pending.get(tp) is commit:
            del pending[tp]
            if not pending:
                del self.pending_txn_offsets[producer_id]

    def complete_pending_txn_offset_commit(self, producer_id: int, is_commit: bool,
                                           producer_epoch: int = -1) -> tuple[int, int]:
        """The marker for ``producer_id`` (at ``producer_epoch``, -1: unknown) landed: apply
        (commit) or drop (abort) its offsets; (offsets applied or dropped, offsets discarded).

        A transactional offset only replaces a plain commit written after it in the log if it
        is newer there (Kafka's ``CommitRecordMetadataAndOffset.olderThan``). Discarded on a
        COMMIT, because they are not the committed transaction's: one whose own append never
        completed, and one written at an older producer epoch than the marker's (a transaction
        of an earlier incarnation whose marker never reached this partition: committing it
        would publish offsets whose records were never written).
        """
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if not pending:
            return 0, 0
        if not is_commit:
            return len(pending), 0
        applied = 0
        for tp, commit in pending.items():
            if commit.log_offset is None or 0 <= commit.producer_epoch < producer_epoch:
                continue
            self.on_offset_commit_append(tp, commit)
            applied += 1
        return applied, len(pending) - applied

    def has_pending_offset_commits(self, tp: tuple[str, int]) -> bool:
        return tp in self.pending_offset_commits or any(tp in o for o in self.pending_txn_offsets.values())

    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(self.pending_txn_offsets)

    def has_offset_or_pending_txn_offset(self, tp: tuple[str, int]) -> bool:
        """Whether OffsetDelete writes a tombstone for ``tp`` (Kafka's ``hasCommittedOffset ||
        hasPendingTransactionalOffsets``)."""
        return tp in self.offsets or any(tp in o for o in self.pending_txn_offsets.values())

    def remove_offset(self, tp: tuple[str, int], tombstone_offset: int) -> None:
        """A plain tombstone for ``tp`` landed at ``tombstone_offset``: drop the committed
        offset unless a later commit replaced it, and ``tp``'s pending transactional offsets
        (as Kafka 4's replay of an offset tombstone does)."""
        current = self.offsets.get(tp)
        if current is not None and (current.log_offset is None or current.log_offset < tombstone_offset):
            del self.offsets[tp]
        for producer_id in list(self.pending_txn_offsets):
            pending = self.pending_txn_offsets[producer_id]
            if pending.pop(tp, None) is not None and not pending:
                del self.pending_txn_offsets[producer_id]

    def remove_all_offsets(self) -> list[tuple[str, int]]:
        removed = list(self.offsets)
        self.offsets.clear()
        self.pending_txn_offsets.clear()
        return removed
