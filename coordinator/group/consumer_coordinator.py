"""KIP-848 consumer groups in the group coordinator: ConsumerGroupHeartbeat, ConsumerGroupDescribe,
and the member-epoch checks of offset commits and fetches.

Owns the behaviour of Kafka 4.3.1's ``GroupMetadataManager.consumerGroupHeartbeat`` and friends:
joining (member epoch 0; the client makes up its member id from v1), heartbeats, leaving
(epoch -1) and a static member's temporary leave (-2), the group epoch (bumped when a
subscription, the membership or the subscribed topics' metadata change), the target
assignment computed by the server assignor (:mod:`.assignors`), each member's reconciliation
towards it (:func:`.consumer_group.reconcile`), session and rebalance timeouts, static
membership, and the records that make all of it durable in ``__consumer_offsets``
(:mod:`.consumer_records`). Every change is a list of records: they are applied to the group
as they are produced (``ConsumerGroup.replay``, the same code that rebuilds a group at load),
appended with acks=all, and the group is restored from a snapshot when the append fails; a
client is answered only once its records are in the log, so what it was told is what the log
holds. While an append is in flight the group in memory is ahead of the log (a
ConsumerGroupDescribe or an offset commit sees the change; Kafka reads at the last committed
offset). Timers are not part of the snapshot: after a failed append every member of the
restored group has its session timer (and rebalance timer while revoking) again, rescheduled
in full if the change had cancelled it. One heartbeat or expiry per group at a time (an
``asyncio.Lock`` per group, kept while held or awaited), like Kafka's single-threaded
coordinator shard; what does not take it (unloading, DeleteGroups, a classic JoinGroup
converting an empty group) can replace the group during an append, so a failed append restores
the group only if it is still the one it changed.

A group id belongs to one group type: the consumer group lives on the coordinator's
:class:`~coordinator.group.state.GroupMetadata` of that id (``group.consumer``), whose classic
fields stay empty and which keeps the group's committed offsets, so offset storage, loading
and transactional offsets are shared with classic groups.

Differs from Kafka: regular expressions are resolved at each heartbeat with Python's ``re``
(``fullmatch``, as RE2J's ``matches``) rather than asynchronously with RE2J (the syntaxes
differ at the edges: Python has backreferences and lookaround, RE2J has neither, and
``\\p{...}`` classes only exist in RE2J), and their matches are filtered by the DESCRIBE ACLs of
the principal of the group's latest heartbeat (Kafka: of the heartbeat that refreshed them;
the filter is kept in memory only, so after a load, until a heartbeat, matches are unfiltered);
classic-protocol members cannot join a consumer group
(no online upgrade/downgrade: a classic JoinGroup to a consumer group with members, or a
heartbeat to a classic group with members, gets GROUP_ID_NOT_FOUND; empty groups are converted
either way, as Kafka does); rack-aware assignment and
``group.consumer.assignment.interval.ms`` are not implemented; offset commits are checked
against the member epoch only (not KIP-1251's per-partition assignment epochs).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from protocol.errors import ErrorCode

from . import consumer_records as rec
from .assignors import ASSIGNORS, MemberSpec, PartitionAssignorError, configured_assignors
from .consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    FencedMemberEpoch,
    MemberState,
    reconcile,
)
from .consumer_records import Assignment, ConsumerGroupKey
from .extension import CoordinatorPart
from .group_config import config_value
from .metadata import group_metadata_record
from .state import GroupMetadata, now_ms

if TYPE_CHECKING:
    from .coordinator import GroupCoordinator

log = structlog.get_logger("coordinator.group.consumer")

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
MEMBER_TYPE_CONSUMER = 1  # ConsumerGroupDescribe v1 memberType: 0 classic, 1 consumer


class HeartbeatError(Exception):
    """An error for the whole ConsumerGroupHeartbeat (or commit check): code and message."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message or "")
        self.code = code
        self.message = message


@dataclass(slots=True)
class HeartbeatRequest:
    api_version: int
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: list[str] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: Assignment | None  # None when the request does not carry TopicPartitions
    client_id: str
    client_host: str
    # The topic names, of those given, the caller may DESCRIBE (None: no authorizer).
    describable_topics: Callable[[Iterable[str]], set[str]] | None = None


def error_response(code: int, message: str | None = None) -> dict:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}


def _regex_error(regex: str) -> str | None:
    try:
        re.compile(regex)
    except re.error as exc:
        return f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}."
    return None


class ConsumerGroupCoordinator(CoordinatorPart):
    """The consumer groups of one :class:`~coordinator.group.coordinator.GroupCoordinator`."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        super().__init__(coordinator)
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # group id: (lock, holder and waiters)
        self._session_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._rebalance_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        # group id -> the DESCRIBE filter of the group's latest heartbeat, for its regex matches
        self._describable: dict[str, Callable[[Iterable[str]], set[str]]] = {}

    # --- configuration ----------------------------------------------------------------------------

    @property
    def assignor_names(self) -> list[str]:
        return configured_assignors(self.s.config("group.consumer.assignors"))

    def _group_config(self, group_id: str, key: str) -> int:
        """The group's own ``key`` (a GROUP config resource), else the broker's synonym."""
        return int(config_value(self.s.group_configs(group_id), key, self.s.config))

    def session_timeout_ms(self, group_id: str) -> int:
        return self._group_config(group_id, "consumer.session.timeout.ms")

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._group_config(group_id, "consumer.heartbeat.interval.ms")

    # --- request validation (GroupCoordinatorService.throwIfConsumerGroupHeartbeatRequestIsInvalid)

    def validate(self, r: HeartbeatRequest) -> None:
        if r.api_version >= 1 or r.member_epoch > 0 or r.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            _throw_if_empty(r.member_id, "MemberId can't be empty.")
        _throw_if_empty(r.group_id, "GroupId can't be empty.")
        _throw_if_empty(r.instance_id, "InstanceId can't be empty.")
        _throw_if_empty(r.rack_id, "RackId can't be empty.")
        if r.member_epoch == 0:
            if r.rebalance_timeout_ms == -1:
                raise HeartbeatError(ErrorCode.invalid_request, "RebalanceTimeoutMs must be provided in first request.")
            if r.owned is None or r.owned:
                raise HeartbeatError(ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining.")
            if r.subscribed_topic_names is None and r.subscribed_topic_regex is None:
                raise HeartbeatError(ErrorCode.invalid_request,
                                     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                                     "when (re-)joining.")
        elif r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if r.instance_id is None:
                raise HeartbeatError(ErrorCode.invalid_request, "InstanceId can't be null.")
        elif r.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise HeartbeatError(ErrorCode.invalid_request, "MemberEpoch is invalid.")
        names = self.assignor_names
        if r.server_assignor is not None and r.server_assignor not in names:
            raise HeartbeatError(ErrorCode.unsupported_assignor,
                                 f"ServerAssignor {r.server_assignor} is not supported. "
                                 f"Supported assignors: {', '.join(names)}.")
        if r.subscribed_topic_regex is not None:
            message = _regex_error(r.subscribed_topic_regex)
            if message:
                raise HeartbeatError(ErrorCode.invalid_regular_expression, message)

    # --- ConsumerGroupHeartbeat ---------------------------------------------------------------------

    async def heartbeat(self, r: HeartbeatRequest) -> dict:
        """Kafka's ``GroupCoordinatorService.consumerGroupHeartbeat``."""
        if not self.c.active:
            return error_response(ErrorCode.coordinator_not_available)
        try:
            self.validate(r)
        except HeartbeatError as exc:
            return error_response(exc.code, exc.message)
        async with self._lock(r.group_id):
            # Checked once the group is ours: the partition may have been unloaded meanwhile.
            error = self.c.validate_group_status(r.group_id, allow_empty=False)
            if error:
                return error_response(error)
            holder = self.groups.get(r.group_id)
            snapshot = None if holder is None or holder.consumer is None else copy.deepcopy(holder.consumer)
            records: list[tuple[ConsumerGroupKey, Any]] = []
            try:
                if r.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                    response, group = self._leave(r, records)
                else:
                    response, group = self._join_or_heartbeat(r, records)
            except HeartbeatError as exc:
                self._restore(r.group_id, holder, snapshot, self._consumer_group(r.group_id))
                return error_response(exc.code, exc.message)
            except FencedMemberEpoch as exc:
                self._restore(r.group_id, holder, snapshot, self._consumer_group(r.group_id))
                return error_response(ErrorCode.fenced_member_epoch, str(exc))
            error = await self._write(r.group_id, records)
            if error:
                self._restore(r.group_id, holder, snapshot, group)
                return error_response(error)
            self._after_write(group)
            return response

    @contextlib.asynccontextmanager
    async def _lock(self, group_id: str) -> AsyncIterator[None]:
        """Hold the group's lock; its entry lives while someone holds or awaits it."""
        lock, users = self._locks.get(group_id, (None, 0))
        lock = lock or asyncio.Lock()
        self._locks[group_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[group_id]
            if users == 1:
                del self._locks[group_id]
            else:
                self._locks[group_id] = (lock, users - 1)

    def _consumer_group(self, group_id: str) -> ConsumerGroup | None:
        holder = self.groups.get(group_id)
        return None if holder is None else holder.consumer

    def _restore(self, group_id: str, holder: GroupMetadata | None, snapshot: ConsumerGroup | None,
                 changed: ConsumerGroup | None) -> None:
        """Undo a change to ``changed`` whose records were not written (Kafka reverts its timeline
        snapshot), unless the group was unloaded, reloaded, deleted or converted to a classic
        group meanwhile (``changed`` is no longer the group's). Timers are not in the snapshot:
        the members of the restored group get back the ones the change cancelled (a leave, a
        fence, a replaced static member)."""
        current = self.groups.get(group_id)
        if current is None or current.consumer is not changed:
            return
        if holder is None:
            del self.groups[group_id]  # created by the failed request
            self._describable.pop(group_id, None)
        else:
            current.consumer = snapshot
            self._sync_holder(current)
            if snapshot is not None:
                self._arm_timers(snapshot)

    def _get_or_create(self, group_id: str, create: bool,
                       records: list[tuple[ConsumerGroupKey, Any]]) -> ConsumerGroup:
        """Kafka's ``getOrMaybeCreateConsumerGroup``."""
        holder = self.groups.get(group_id)
        if holder is not None and holder.consumer is not None:
            return holder.consumer
        if (holder is not None and not _is_empty_classic(holder)) or \
                (holder is None and self.c.other_owner(group_id) is not None):  # e.g. a share group
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        if not create:
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        if holder is None:
            holder = self.groups[group_id] = GroupMetadata(group_id)
        elif holder.generation_id > 0:
            # Kafka's maybeDeleteEmptyClassicGroup: the classic group's metadata is tombstoned.
            records.append((ConsumerGroupKey(-1, group_id), None))
            log.info("empty_classic_group_converted", group=group_id)
        holder.consumer = ConsumerGroup(group_id)
        return holder.consumer

    def _join_or_heartbeat(self, r: HeartbeatRequest, records: list) -> tuple[dict, ConsumerGroup]:
        """Kafka's ``GroupMetadataManager.consumerGroupHeartbeat``."""
        joining = r.member_epoch == 0
        group = self._get_or_create(r.group_id, joining, records)
        if r.describable_topics is not None:
            self._describable[group.group_id] = r.describable_topics
        member_id = r.member_id or str(uuid.uuid4())
        self._throw_if_full(group, r.member_id)
        if r.instance_id is None:
            member = self._dynamic_member(group, member_id, r, joining)
        else:
            member = self._static_member(group, member_id, r, joining, records)
        updated = _updated_member(member, r)
        # Replaying records changes the live member in place: compare against a copy.
        previous = copy.copy(member)
        emit = self._emitter(group, records)
        is_new = updated.member_id not in group.members
        bump = is_new or (updated.subscribed_topic_names != previous.subscribed_topic_names
                          or updated.subscribed_topic_regex != previous.subscribed_topic_regex)
        if is_new or not updated.same_subscription(previous):
            emit(group.key(rec.CONSUMER_GROUP_MEMBER_METADATA, updated.member_id), updated.subscription_value())
        # The member is in the group now (its metadata record was replayed): take its live object.
        live = group.members.get(updated.member_id, updated)
        self._maybe_bump_group_epoch(group, bump, emit)
        if group.group_epoch > group.assignment_epoch:
            self._update_target_assignment(group, emit)
        target = group.target_assignment.get(live.member_id, {})
        reconciled = self._maybe_reconcile(group, live, group.assignment_epoch, target, r.owned, emit)
        self._schedule_session_timeout(group.group_id, reconciled.member_id)
        response = {"throttle_time": 0, "error_code": 0, "error_message": None,
                    "member_id": reconciled.member_id, "member_epoch": reconciled.member_epoch,
                    "heartbeat_interval": self.heartbeat_interval_ms(group.group_id), "assignment": None}
        full = joining or (r.rebalance_timeout_ms != -1 and r.owned is not None
                           and (r.subscribed_topic_names is not None or r.subscribed_topic_regex is not None))
        if full or reconciled.assigned_partitions != previous.assigned_partitions:
            response["assignment"] = {"topic_partitions": [
                {"topic_id": t, "partitions": sorted(ps)}
                for t, ps in sorted(reconciled.assigned_partitions.items(), key=lambda kv: str(kv[0]))]}
        return response, group

    def _throw_if_full(self, group: ConsumerGroup, member_id: str) -> None:
        max_size = self.s.config("group.consumer.max.size")
        if len(group.members) >= max_size and (not member_id or member_id not in group.members):
            raise HeartbeatError(ErrorCode.group_max_size_reached,
                                 f"The consumer group has reached its maximum capacity of {max_size} members.")

    def _dynamic_member(self, group: ConsumerGroup, member_id: str, r: HeartbeatRequest,
                        joining: bool) -> ConsumerGroupMember:
        """Kafka's ``getOrMaybeSubscribeDynamicConsumerGroupMember``."""
        member = group.members.get(member_id)
        if member is None:
            if not joining:
                raise HeartbeatError(ErrorCode.unknown_member_id,
                                     f"Member {member_id} is not a member of group {group.group_id}.")
            log.info("consumer_member_joined", group=group.group_id, member_id=member_id)
            return ConsumerGroupMember(member_id)
        _throw_if_member_epoch_invalid(member, r.member_epoch, r.owned)
        return member

    def _static_member(self, group: ConsumerGroup, member_id: str, r: HeartbeatRequest, joining: bool,
                       records: list) -> ConsumerGroupMember:
        """Kafka's ``getOrMaybeSubscribeStaticConsumerGroupMember``."""
        existing = group.static_member(r.instance_id)
        if joining:
            if existing is None:
                log.info("consumer_static_member_joined", group=group.group_id, member_id=member_id,
                         instance_id=r.instance_id)
                return group.members.get(member_id) or ConsumerGroupMember(member_id)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise HeartbeatError(ErrorCode.unreleased_instance_id,
                                     f"Static member {member_id} with instance id {r.instance_id} cannot join the "
                                     f"group because the instance id is owned by {existing.member_id} member.")
            return self._replace_static_member(group, existing, member_id, records)
        if existing is None:
            raise HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {r.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise HeartbeatError(ErrorCode.fenced_instance_id,
                                 f"Static member {member_id} with instance id {r.instance_id} was fenced by "
                                 f"member {existing.member_id}.")
        _throw_if_member_epoch_invalid(existing, r.member_epoch, r.owned)
        return existing

    def _replace_static_member(self, group: ConsumerGroup, old: ConsumerGroupMember, member_id: str,
                               records: list) -> ConsumerGroupMember:
        """Kafka's ``replaceMember``: the new incarnation takes the old one's assignment, at epoch 0."""
        emit = self._emitter(group, records)
        target = group.target_assignment.get(old.member_id, {})
        new = copy.copy(old)
        new.member_id = member_id
        new.member_epoch = new.previous_member_epoch = 0
        for key, value in group.member_removal_records(old.member_id):
            emit(key, value)
        self._cancel_timers(group.group_id, old.member_id)
        emit(group.key(rec.CONSUMER_GROUP_MEMBER_METADATA, member_id), new.subscription_value())
        emit(group.key(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, member_id), rec.TargetAssignmentMemberValue(target))
        emit(group.key(rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, member_id), new.assignment_value())
        log.info("consumer_static_member_replaced", group=group.group_id, instance_id=old.instance_id,
                 old_member_id=old.member_id, member_id=member_id)
        return group.members[member_id]

    def _emitter(self, group: ConsumerGroup, records: list) -> Callable[[ConsumerGroupKey, Any], None]:
        def emit(key: ConsumerGroupKey, value: Any) -> None:
            records.append((key, value))
            group.replay(key, value)
            holder = self.groups.get(group.group_id)
            if holder is not None:
                self._sync_holder(holder)
        return emit

    def _maybe_bump_group_epoch(self, group: ConsumerGroup, bump: bool, emit) -> None:
        """The group epoch moves when a subscription changed or the subscribed topics' metadata
        (ids, partition counts) did (Kafka's metadata hash, KIP-1101)."""
        metadata_hash = self._metadata_hash(group)
        if bump or metadata_hash != group.metadata_hash:
            emit(group.key(rec.CONSUMER_GROUP_METADATA), rec.GroupEpochValue(group.group_epoch + 1, metadata_hash))
            log.info("consumer_group_epoch_bumped", group=group.group_id, epoch=group.group_epoch)

    def _topics(self) -> dict[str, tuple[uuid.UUID, int]]:
        return self.s.topic_metadata()

    def _regex_topics(self, topics: dict[str, tuple[uuid.UUID, int]], group_id: str) -> Callable[[str], set[str]]:
        """Kafka's ``TopicRegexResolver``: the topics a regex matches that the principal of the
        group's latest heartbeat may DESCRIBE."""
        cache: dict[str, set[str]] = {}
        describable = self._describable.get(group_id)

        def resolve(regex: str) -> set[str]:
            if regex not in cache:
                try:
                    pattern = re.compile(regex)
                except re.error:
                    cache[regex] = set()
                else:
                    matched = {t for t in topics if t not in INTERNAL_TOPICS and pattern.fullmatch(t)}
                    cache[regex] = matched if describable is None else describable(matched)
            return cache[regex]
        return resolve

    def _metadata_hash(self, group: ConsumerGroup) -> int:
        topics = self._topics()
        names = group.subscribed_topic_names(self._regex_topics(topics, group.group_id))
        if not names:
            return 0
        h = hashlib.blake2b(digest_size=8)
        for name in sorted(names):
            topic_id, partitions = topics.get(name, (None, -1))
            h.update(f"{name}\0{topic_id}\0{partitions}\0".encode())
        value = int.from_bytes(h.digest(), "big", signed=True)
        return value or 1

    def _member_topic_ids(self, member: ConsumerGroupMember, topics, resolve) -> frozenset[uuid.UUID]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            names |= resolve(member.subscribed_topic_regex)
        return frozenset(topics[n][0] for n in names if n in topics)

    def _update_target_assignment(self, group: ConsumerGroup, emit) -> None:
        """Kafka's ``updateTargetAssignment``: run the group's assignor for the group epoch and
        write the members whose target changed, then the assignment epoch."""
        topics = self._topics()
        resolve = self._regex_topics(topics, group.group_id)
        specs = {m.member_id: MemberSpec(self._member_topic_ids(m, topics, resolve), m.rack_id)
                 for m in group.members.values()}
        counts = {topic_id: n for topic_id, n in topics.values()}
        assignor = group.preferred_assignor(self.assignor_names[0])
        try:
            target = ASSIGNORS[assignor](specs, counts, group.target_assignment)
        except PartitionAssignorError as exc:
            raise HeartbeatError(ErrorCode.unknown_server_error,
                                 f"Failed to compute a new target assignment for epoch {group.group_epoch}: "
                                 f"{exc}") from exc
        for member_id, assignment in target.items():
            if group.target_assignment.get(member_id) != assignment:
                emit(group.key(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, member_id),
                     rec.TargetAssignmentMemberValue(assignment))
        emit(group.key(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA),
             rec.TargetAssignmentEpochValue(group.group_epoch, now_ms()))
        log.info("consumer_target_assignment_computed", group=group.group_id, epoch=group.assignment_epoch,
                 assignor=assignor, members=len(target))

    def _maybe_reconcile(self, group: ConsumerGroup, member: ConsumerGroupMember, target_epoch: int,
                         target: Assignment, owned: Assignment | None, emit) -> ConsumerGroupMember:
        """Kafka's ``maybeReconcile``."""
        if member.is_reconciled_to(target_epoch):
            return member
        updated = reconcile(member, target_epoch, target, group.current_partition_epoch, owned)
        if updated.same_assignment(member):
            return member
        emit(group.key(rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, updated.member_id), updated.assignment_value())
        live = group.members[updated.member_id]
        if live.state == MemberState.UNREVOKED_PARTITIONS:
            self._schedule_rebalance_timeout(group.group_id, live.member_id, live.member_epoch,
                                             live.rebalance_timeout_ms)
        else:
            self._cancel_timer(self._rebalance_timers, (group.group_id, live.member_id))
        return live

    # --- leaving and fencing --------------------------------------------------------------------------

    def _leave(self, r: HeartbeatRequest, records: list) -> tuple[dict, ConsumerGroup]:
        """Kafka's ``consumerGroupLeave``."""
        group = self._get_or_create(r.group_id, False, records)
        response = {"throttle_time": 0, "error_code": 0, "error_message": None, "member_id": r.member_id,
                    "member_epoch": r.member_epoch, "heartbeat_interval": 0, "assignment": None}
        if r.instance_id is None:
            member = group.members.get(r.member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.unknown_member_id,
                                     f"Member {r.member_id} is not a member of group {group.group_id}.")
            log.info("consumer_member_left", group=group.group_id, member_id=r.member_id)
            self._fence(group, member, records)
            return response, group
        member = group.static_member(r.instance_id)
        if member is None:
            raise HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {r.instance_id} is unknown.")
        if member.member_id != r.member_id:
            raise HeartbeatError(ErrorCode.fenced_instance_id,
                                 f"Static member {r.member_id} with instance id {r.instance_id} was fenced by "
                                 f"member {member.member_id}.")
        if r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            log.info("consumer_static_member_left_temporarily", group=group.group_id, member_id=r.member_id,
                     instance_id=r.instance_id)
            leaving = copy.copy(member)
            leaving.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            leaving.partitions_pending_revocation = {}
            self._emitter(group, records)(group.key(rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, member.member_id),
                                          leaving.assignment_value())
            return response, group
        log.info("consumer_static_member_left", group=group.group_id, member_id=r.member_id,
                 instance_id=r.instance_id)
        self._fence(group, member, records)
        return response, group

    def _fence(self, group: ConsumerGroup, member: ConsumerGroupMember, records: list) -> None:
        """Kafka's ``consumerGroupFenceMember``: remove the member, bump the group epoch."""
        emit = self._emitter(group, records)
        for key, value in group.member_removal_records(member.member_id):
            emit(key, value)
        self._cancel_timers(group.group_id, member.member_id)
        emit(group.key(rec.CONSUMER_GROUP_METADATA),
             rec.GroupEpochValue(group.group_epoch + 1, self._metadata_hash(group)))

    # --- timers -------------------------------------------------------------------------------------

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        key = (group_id, member_id)
        self._cancel_timer(self._session_timers, key)
        self._session_timers[key] = self.timer.schedule(
            self.session_timeout_ms(group_id), self._on_session_timeout, group_id, member_id)

    def _schedule_rebalance_timeout(self, group_id: str, member_id: str, epoch: int, timeout_ms: int) -> None:
        key = (group_id, member_id)
        self._cancel_timer(self._rebalance_timers, key)
        self._rebalance_timers[key] = self.timer.schedule(
            timeout_ms, self._on_rebalance_timeout, group_id, member_id, epoch)

    @staticmethod
    def _cancel_timer(timers: dict, key: tuple[str, str]) -> None:
        handle = timers.pop(key, None)
        if handle is not None:
            handle.cancel()

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        self._cancel_timer(self._session_timers, (group_id, member_id))
        self._cancel_timer(self._rebalance_timers, (group_id, member_id))

    def _arm_timers(self, group: ConsumerGroup) -> None:
        """Every member has a session timer, and a rebalance timer while it revokes partitions;
        the ones missing are scheduled afresh."""
        for member in group.members.values():
            key = (group.group_id, member.member_id)
            if key not in self._session_timers:
                self._schedule_session_timeout(group.group_id, member.member_id)
            if member.state == MemberState.UNREVOKED_PARTITIONS and key not in self._rebalance_timers:
                self._schedule_rebalance_timeout(group.group_id, member.member_id, member.member_epoch,
                                                 member.rebalance_timeout_ms)

    def forget(self, group_id: str) -> None:
        """The group left memory (unloaded, deleted, converted to a classic group): cancel its
        timers, drop its DESCRIBE filter."""
        for timers in (self._session_timers, self._rebalance_timers):
            for key in [k for k in timers if k[0] == group_id]:
                self._cancel_timer(timers, key)
        self._describable.pop(group_id, None)

    def _on_session_timeout(self, group_id: str, member_id: str) -> None:
        fired = self._session_timers.get((group_id, member_id))  # rescheduling cancels the handle it replaces
        self.tasks.spawn(self._expire(self._session_timers, fired, group_id, member_id, None,
                                 "the member session expired"))

    def _on_rebalance_timeout(self, group_id: str, member_id: str, epoch: int) -> None:
        fired = self._rebalance_timers.get((group_id, member_id))
        self.tasks.spawn(self._expire(self._rebalance_timers, fired, group_id, member_id, epoch,
                                 "the member failed to revoke its partitions within the rebalance timeout"))

    async def _expire(self, timers: dict, fired: asyncio.TimerHandle | None, group_id: str, member_id: str,
                      epoch: int | None, reason: str) -> None:
        """Kafka's session / rebalance timeout operations: fence the member if it is still there
        (for a rebalance timeout: still revoking at ``epoch``). The timer that fired stays
        registered until then; if a heartbeat rescheduled it (or a leave cancelled it) meanwhile,
        nothing happens, as in Kafka's timer write event (``tasks.remove(key, task)``)."""
        key = (group_id, member_id)
        async with self._lock(group_id):
            if fired is None or timers.get(key) is not fired:
                return
            del timers[key]
            holder = self.groups.get(group_id)
            group = None if holder is None else holder.consumer
            member = None if group is None else group.members.get(member_id)
            if member is None:
                return
            if epoch is not None and (member.member_epoch != epoch
                                      or member.state != MemberState.UNREVOKED_PARTITIONS):
                return
            log.info("consumer_member_fenced", group=group_id, member_id=member_id, reason=reason)
            snapshot = copy.deepcopy(group)
            records: list = []
            self._fence(group, member, records)
            error = await self._write(group_id, records)
            if error:
                log.warning("consumer_member_fence_append_failed", group=group_id, member_id=member_id,
                            error=int(error))
                self._restore(group_id, holder, snapshot, group)  # its timers again: try again later

    # --- the log ------------------------------------------------------------------------------------

    async def _write(self, group_id: str, records: list[tuple[ConsumerGroupKey, Any]]) -> int:
        if not records:
            return 0
        raw = [group_metadata_record(group_id, None) if key.record_type == -1
               else rec.consumer_group_record(key, value) for key, value in records]
        error, _ = await self.c.append(group_id, raw)
        return error

    def _after_write(self, group: ConsumerGroup) -> None:
        holder = self.groups.get(group.group_id)
        if holder is not None:
            self._sync_holder(holder)

    def _sync_holder(self, holder: GroupMetadata) -> None:
        """The offset side of the group follows its subscriptions (OffsetDelete, expiration)."""
        group = holder.consumer
        if group is None:
            return
        holder.subscribed_topics = group.subscribed_topic_names(self._regex_topics(self._topics(), holder.group_id))

    def tombstone_records(self, group: ConsumerGroup) -> list[tuple[bytes, bytes | None]]:
        return [rec.consumer_group_record(key, value) for key, value in group.tombstones()]

    # --- loading ------------------------------------------------------------------------------------

    def build_loaded(self, records: Iterable[tuple[ConsumerGroupKey, Any]]) -> dict[str, ConsumerGroup]:
        """Replay the consumer-group records of one partition, in log order."""
        groups: dict[str, ConsumerGroup] = {}
        for key, value in records:
            if key.record_type == rec.CONSUMER_GROUP_METADATA and value is None:
                groups.pop(key.group_id, None)
                continue
            group = groups.get(key.group_id)
            if group is None:
                if value is None:
                    continue
                group = groups[key.group_id] = ConsumerGroup(key.group_id)
            group.replay(key, value)
        return groups

    def on_loaded(self, holder: GroupMetadata) -> None:
        """A loaded group's members get their session timers (and rebalance timers) again."""
        group = holder.consumer
        self._sync_holder(holder)
        self._arm_timers(group)
        log.info("consumer_group_loaded", group=group.group_id, members=len(group.members),
                 epoch=group.group_epoch)

    # --- offsets ------------------------------------------------------------------------------------

    def validate_offset_commit(self, group: ConsumerGroup, member_id: str | None, member_epoch: int,
                               *, transactional: bool, api_version: int, instance_id: str | None = None) -> int:
        """Kafka's ``ConsumerGroup.validateOffsetCommit``: 0 or the error code. Any epoch but
        the member's is STALE_MEMBER_EPOCH (Kafka 4.3 accepts an older epoch for partitions
        the member has held since then, KIP-1251; not kept here), and ILLEGAL_GENERATION for a
        TxnOffsetCommit: ``OffsetMetadataManager.validateTransactionalOffsetCommit`` catches the
        StaleMemberEpochException, as that API has no STALE_MEMBER_EPOCH (the producer aborts the
        transaction with a CommitFailedException; STALE_MEMBER_EPOCH would be fatal to it)."""
        if member_epoch < 0 and not group.members:
            return 0
        if transactional and member_epoch == -1 and not member_id and instance_id is None:
            return 0  # a producer that does not send the group metadata (KIP-447 fallback)
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if not transactional and api_version < 9:
            return ErrorCode.unsupported_version
        if member_epoch != member.member_epoch:
            return ErrorCode.illegal_generation if transactional else ErrorCode.stale_member_epoch
        return 0

    def validate_offset_fetch(self, group: ConsumerGroup, member_id: str | None, member_epoch: int) -> int:
        """Kafka's ``ConsumerGroup.validateOffsetFetch`` (OffsetFetch v9+ with a member)."""
        if member_epoch < 0 and member_id is None:
            return 0
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return 0

    # --- ConsumerGroupDescribe, ListGroups -----------------------------------------------------------

    def describe(self, group_id: str) -> dict:
        """Kafka's ``consumerGroupDescribe`` for one group (no authorized operations)."""
        out = {"error_code": 0, "error_message": None, "group_id": group_id, "group_state": "",
               "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
               "authorized_operations": -2147483648}
        error = self.c.validate_group_status(group_id, allow_empty=False)
        if error:
            out["error_code"] = error
            return out
        holder = self.groups.get(group_id)
        if holder is None and self.c.other_owner(group_id) is not None:
            out.update(error_code=ErrorCode.group_id_not_found,
                       error_message=f"Group {group_id} is not a consumer group.")
            return out
        if holder is None or _is_dead_or_unused(holder) and holder.consumer is None:
            out.update(error_code=ErrorCode.group_id_not_found, error_message=f"Group {group_id} not found.")
            return out
        if holder.consumer is None:
            out.update(error_code=ErrorCode.group_id_not_found,
                       error_message=f"Group {group_id} is not a consumer group.")
            return out
        group = holder.consumer
        topics = self._topics()
        names = {topic_id: name for name, (topic_id, _) in topics.items()}
        out.update(group_state=group.state.value, group_epoch=group.group_epoch,
                   assignment_epoch=group.assignment_epoch,
                   assignor_name=group.preferred_assignor(self.assignor_names[0]),
                   members=[self._describe_member(group, m, names) for m in group.members.values()])
        return out

    @staticmethod
    def _describe_member(group: ConsumerGroup, m: ConsumerGroupMember, names: dict) -> dict:
        def assignment(a: Assignment) -> dict:
            return {"topic_partitions": [
                {"topic_id": t, "topic_name": names.get(t, ""), "partitions": sorted(ps)}
                for t, ps in sorted(a.items(), key=lambda kv: str(kv[0])) if t in names]}
        return {"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": sorted(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": assignment(m.assigned_partitions),
                "target_assignment": assignment(group.target_assignment.get(m.member_id, {})),
                "member_type": MEMBER_TYPE_CONSUMER}

    @staticmethod
    def list_entry(group: ConsumerGroup) -> dict:
        return {"group_id": group.group_id, "protocol_type": "consumer", "group_state": group.state.value,
                "group_type": "consumer"}


# --- helpers ------------------------------------------------------------------------------------------

def _throw_if_empty(value: str | None, message: str) -> None:
    """Kafka's ``Utils.throwIfEmptyString``: a non-null blank string is invalid."""
    if value is not None and not value.strip():
        raise HeartbeatError(ErrorCode.invalid_request, message)


def _is_empty_classic(holder: GroupMetadata) -> bool:
    return not holder.members and not holder.pending_members


def _is_dead_or_unused(holder: GroupMetadata) -> bool:
    """A holder that only stores offsets (or nothing) counts as no group for the heartbeat."""
    return holder.consumer is None and holder.generation_id == 0 and not holder.members


def _updated_member(member: ConsumerGroupMember, r: HeartbeatRequest) -> ConsumerGroupMember:
    """Kafka's ``ConsumerGroupMember.Builder.maybeUpdate*``: null / -1 fields keep the value."""
    updated = copy.copy(member)
    if r.instance_id is not None:
        updated.instance_id = r.instance_id
    if r.rack_id is not None:
        updated.rack_id = r.rack_id
    if r.rebalance_timeout_ms != -1:
        updated.rebalance_timeout_ms = r.rebalance_timeout_ms
    if r.server_assignor is not None:
        updated.server_assignor = r.server_assignor
    if r.subscribed_topic_names is not None:
        updated.subscribed_topic_names = tuple(sorted(r.subscribed_topic_names))
    if r.subscribed_topic_regex is not None:
        updated.subscribed_topic_regex = r.subscribed_topic_regex or None
    updated.client_id = r.client_id
    updated.client_host = r.client_host
    return updated


def _is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return True
    return all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items())


def _throw_if_member_epoch_invalid(member: ConsumerGroupMember, received: int, owned: Assignment | None) -> None:
    """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid`` (epoch 0, a rejoin, is not checked)."""
    if received == 0:
        return
    if received > member.member_epoch:
        raise FencedMemberEpoch(f"The consumer group member has a greater member epoch ({received}) than the one "
                                f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                "all its partitions and rejoin.")
    if received < member.member_epoch and (received != member.previous_member_epoch
                                           or not _is_subset(owned, member.assigned_partitions)):
        raise FencedMemberEpoch(f"The consumer group member has a smaller member epoch ({received}) than the one "
                                f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                "all its partitions and rejoin.")


def owned_from_request(topic_partitions) -> Assignment | None:
    if topic_partitions is None:
        return None
    out: Assignment = {}
    for tp in topic_partitions:
        if tp.topic_id is not None and tp.partitions:
            out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out
