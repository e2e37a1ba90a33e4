"""A share group's state: members, epochs, target assignment (Kafka's ``ShareGroup`` /
``ShareGroupMember``).

Owns the in-memory picture of one share group, built only by replaying its records
(:mod:`.records`), whether they were just appended or read back at load time, so that what a
broker serves and what a new coordinator loads after a restart or a failover are the same.

The state machine is data: :class:`ShareGroupState` lists each state's valid previous states.
Empty (no members) <-> Stable (members); Dead once deleted. Kafka's ``ShareGroup`` derives the
state from the member count; we do the same after each replay, through the checked transition.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from dataclasses import dataclass, field

from .records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    STATE_PARTITION_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    Assignment,
    CurrentMemberAssignmentValue,
    MemberMetadataValue,
    ShareRecordKey,
    StatePartitionMetadataValue,
)

GROUP_TYPE = "share"
PROTOCOL_TYPE = "share"


class ShareGroupState(enum.Enum):
    """Kafka's ``ShareGroup.ShareGroupState``; the value is Kafka's display name."""

    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def valid_previous_states(self) -> frozenset[ShareGroupState]:
        return _VALID_PREVIOUS[self]


_VALID_PREVIOUS = {
    ShareGroupState.EMPTY: frozenset({ShareGroupState.EMPTY, ShareGroupState.STABLE}),
    ShareGroupState.STABLE: frozenset({ShareGroupState.EMPTY, ShareGroupState.STABLE}),
    ShareGroupState.DEAD: frozenset({ShareGroupState.EMPTY}),
}


class IllegalStateTransition(RuntimeError):
    pass


@dataclass(slots=True)
class ShareGroupMember:
    """Kafka's ``ShareGroupMember``: subscription (record 10) and current assignment (record 14)."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    assigned_partitions: Assignment = field(default_factory=dict)
    session_timer: asyncio.TimerHandle | None = None

    def metadata_value(self) -> MemberMetadataValue:
        return MemberMetadataValue(self.rack_id, self.client_id, self.client_host,
                                   sorted(self.subscribed_topic_names))

    def same_metadata(self, other: ShareGroupMember) -> bool:
        return (self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names) == (
            other.rack_id, other.client_id, other.client_host, other.subscribed_topic_names)


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    state: ShareGroupState = ShareGroupState.EMPTY
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    target_assignment: dict[str, Assignment] = field(default_factory=dict)
    state_partitions: StatePartitionMetadataValue | None = None
    # Serializes this group's writes (Kafka runs one write per partition at a time).
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def transition_to(self, state: ShareGroupState) -> None:
        if self.state not in state.valid_previous_states:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state.value} -> {state.value}")
        self.state = state

    def is_(self, state: ShareGroupState) -> bool:
        return self.state is state

    @property
    def subscribed_topic_names(self) -> frozenset[str]:
        return frozenset().union(*(m.subscribed_topic_names for m in self.members.values()))

    def initialized_topics(self) -> dict[uuid.UUID, frozenset[int]]:
        """Topic id -> partitions whose share-partition state this group initialized."""
        if self.state_partitions is None:
            return {}
        return {t.topic_id: t.partitions for t in self.state_partitions.initialized}

    # --- replay ----------------------------------------------------------------------------

    def replay(self, key: ShareRecordKey, value) -> None:
        """Apply one record of this group (Kafka's ``GroupMetadataManager.replay`` overloads)."""
        t = key.record_type
        if t == GROUP_METADATA:
            if value is not None:
                self.group_epoch, self.metadata_hash = value.epoch, value.metadata_hash
        elif t == MEMBER_METADATA:
            self._replay_member_metadata(key.member_id, value)
        elif t == TARGET_ASSIGNMENT_METADATA:
            if value is not None:
                self.assignment_epoch = value.assignment_epoch
        elif t == TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                self.target_assignment.pop(key.member_id, None)
            else:
                self.target_assignment[key.member_id] = value
        elif t == CURRENT_MEMBER_ASSIGNMENT:
            self._replay_current_assignment(key.member_id, value)
        elif t == STATE_PARTITION_METADATA:
            self.state_partitions = value
        self._update_state()

    def _replay_member_metadata(self, member_id: str, value: MemberMetadataValue | None) -> None:
        if value is None:
            member = self.members.pop(member_id, None)
            if member is not None and member.session_timer is not None:
                member.session_timer.cancel()
            return
        member = self.members.setdefault(member_id, ShareGroupMember(member_id))
        member.rack_id, member.client_id, member.client_host = value.rack_id, value.client_id, value.client_host
        member.subscribed_topic_names = frozenset(value.subscribed_topic_names)

    def _replay_current_assignment(self, member_id: str, value: CurrentMemberAssignmentValue | None) -> None:
        member = self.members.get(member_id)
        if member is None:
            return
        if value is None:
            member.member_epoch = member.previous_member_epoch = 0
            member.assigned_partitions = {}
        else:
            member.member_epoch, member.previous_member_epoch = value.member_epoch, value.previous_member_epoch
            member.assigned_partitions = dict(value.assigned_partitions)

    def _update_state(self) -> None:
        if self.is_(ShareGroupState.DEAD):
            return
        self.transition_to(ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY)
