"""The classic group coordinator: JoinGroup/SyncGroup/Heartbeat/LeaveGroup, committed offsets.

Owns: the groups whose ``__consumer_offsets`` partition this broker leads (created on first
use, as Kafka does on FindCoordinator), their rebalances, and their committed offsets, which
are appended to ``__consumer_offsets`` in Kafka's record format (:mod:`.metadata`) with acks=all
and applied only once durable, and rebuilt from it when this broker becomes the partition's
leader (:mod:`.loader`; ``COORDINATOR_LOAD_IN_PROGRESS`` until the partition is loaded,
``NOT_COORDINATOR`` once leadership moved, see :mod:`coordinator.runtime`). Semantics follow Kafka's classic ``GroupCoordinator`` /
``GroupMetadataManager`` (core/src/main/scala/kafka/coordinator/group), method by method;
the Kafka method a piece of code mirrors is named in its docstring.

Concurrency: everything runs on the event loop. A parked JoinGroup or SyncGroup awaits a future
kept on its member (Kafka's ``awaitingJoinCallback`` / ``awaitingSyncCallback``), so it only
holds its own connection. Kafka's purgatories become timers on ``self.timer`` (the event loop's,
or a unit test's fake clock, :class:`coordinator.runtime.ManualTimer`): the session
timeout of each member, the rebalance (DelayedJoin / InitialDelayedJoin), the pending-SyncGroup
expiry (DelayedSync) and the MEMBER_ID_REQUIRED pending-member expiry. State changes wait for
their append; the append's completion checks that the partition is still owned at the epoch the
write was decided under, and (for group metadata) that the group is still in the generation
that wrote it, as Kafka's callbacks do. Offsets in flight are pending meanwhile
(UNSTABLE_OFFSET_COMMIT to require_stable fetches).

Transactional offset commits (extension point): ``txn_offset_commit`` validates and appends
the offsets in a transactional batch (producer id/epoch) and parks them in
``GroupMetadata.pending_txn_offsets``; when the COMMIT/ABORT marker lands on an
``__consumer_offsets`` partition, whoever writes it calls ``complete_txn_offset_commits``.
Loading already applies markers found in the log, and no marker lands while a partition loads
(:meth:`accepts_txn_markers`). The marker may land before a TxnOffsetCommit's own append has
been replicated (its producer fenced by a new incarnation meanwhile): the append's completion
then finds its entry gone and leaves it so, as Kafka's ``onTxnOffsetCommitAppend`` does, and a
COMMIT applies only offsets written at its own producer epoch.

KIP-848 consumer groups (:mod:`.consumer_coordinator`) share this coordinator's partitions,
offsets and loading: a group id is either a classic group or a consumer group
(``GroupMetadata.consumer``), and the classic APIs answer for a consumer group as Kafka does.

Differs from Kafka: offsets of a Stable group do not expire (only Empty and simple groups' offsets do, as in Kafka
``offsets.retention.minutes`` after the group emptied).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from protocol.errors import ErrorCode, KafkaError
from protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, build_batch

from ..runtime import (
    BackgroundTasks,
    CoordinatorTimer,
    LoopTimer,
    PartitionOwnership,
    TimerHandle,
    append_error,
    error_name,
    fault_points,
    load_with_retry,
)
from .consumer_coordinator import ConsumerGroupCoordinator
from .extension import GroupTypeOwner
from .loader import LoadedPartition, read_offsets_partition
from .metadata import (
    OFFSETS_TOPIC,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitValue,
    group_metadata_record,
    offset_commit_record,
    partition_for,
)
from .services import GroupServices
from .state import GroupMetadata, GroupState, MemberMetadata, OffsetAndMetadata, now_ms

LOAD_PROGRESS_INTERVAL_S = 2.0  # a long load reports progress this often, not per partition

TXN_OFFSETS_DELAY_FAULT = "group.txn.offsets.delay"

log = structlog.get_logger("coordinator.group")

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
INVALID_OFFSET = -1

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (GroupState.EMPTY, GroupState.PREPARING_REBALANCE,
                                              GroupState.COMPLETING_REBALANCE, GroupState.STABLE,
                                              GroupState.DEAD)


def join_error(member_id: str, error: int) -> dict:
    """Kafka's ``JoinGroupResult(memberId, error)``."""
    return {"error_code": error, "generation_id": NO_GENERATION, "protocol_type": None,
            "protocol_name": None, "leader": "", "skip_assignment": False, "member_id": member_id,
            "members": []}


def sync_result(error: int, protocol_type: str | None = None, protocol_name: str | None = None,
                assignment: bytes = b"") -> dict:
    return {"error_code": error, "protocol_type": protocol_type, "protocol_name": protocol_name,
            "assignment": assignment}


def _respond(fut: Any, result: Any) -> None:
    if fut is not None and not fut.done():
        fut.set_result(result)


@dataclass(slots=True)
class _DelayedJoin:
    """A pending rebalance completion: Kafka's DelayedJoin or (initial=True) InitialDelayedJoin."""

    handle: TimerHandle | None
    initial: bool
    delay_ms: int = 0
    remaining_ms: int = 0


def _to_offset(value: OffsetCommitValue, log_offset: int | None, producer_epoch: int = -1) -> OffsetAndMetadata:
    return OffsetAndMetadata(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp,
                             value.expire_timestamp, log_offset, producer_epoch)


class GroupCoordinator:
    def __init__(self, services: GroupServices, timer: CoordinatorTimer | None = None) -> None:
        self.s = services
        # Session, rebalance and join timers (also the consumer groups'): a test's fake clock.
        self.timer: CoordinatorTimer = timer or LoopTimer()
        self.groups: dict[str, GroupMetadata] = {}
        self.ownership = PartitionOwnership(services.metadata_is_current)
        self.active = False
        self.tasks = BackgroundTasks("group-coordinator")  # loads, writes no request awaits, cleanup
        # The other group types sharing these partitions (share groups); see :mod:`.extension`.
        self.other_group_types: list[GroupTypeOwner] = []
        self.consumer = ConsumerGroupCoordinator(self)

    # --- configuration --------------------------------------------------------------------------

    @property
    def min_session_timeout_ms(self) -> int:
        return self.s.config("group.min.session.timeout.ms")

    @property
    def max_session_timeout_ms(self) -> int:
        return self.s.config("group.max.session.timeout.ms")

    @property
    def initial_rebalance_delay_ms(self) -> int:
        return self.s.config("group.initial.rebalance.delay.ms")

    @property
    def max_group_size(self) -> int:
        return self.s.config("group.max.size")

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start answering, and load every ``__consumer_offsets`` partition led here."""
        self.active = True
        led = self.s.led_partitions(OFFSETS_TOPIC)
        elected = [(p, epoch) for p, epoch in sorted(led.items()) if self.ownership.begin_load(p, epoch)]
        if elected:
            self.tasks.spawn(self._load_partitions(elected))
        self.tasks.every(self.s.config("offsets.retention.check.interval.ms"), self.cleanup_expired_offsets,
                          minimum_ms=100)

    async def stop(self) -> None:
        self.active = False
        await self.tasks.stop()
        for group in list(self.groups.values()):
            self._shutdown_group(group, ErrorCode.not_coordinator)
        self.groups.clear()
        for owner in self.other_group_types:
            owner.shutdown()
        self.ownership.clear()

    def on_become_leader(self, partition: int, epoch: int) -> None:
        """This broker now leads ``__consumer_offsets`` ``partition`` at ``epoch``: load it
        (Kafka's ``onElection``)."""
        if self.ownership.begin_load(partition, epoch):
            self._unload_groups(partition)  # anything left from an older epoch
            self.tasks.spawn(self._load_partitions([(partition, epoch)]))

    def on_resign(self, partition: int, epoch: int | None = None) -> None:
        """Leadership of ``partition`` moved away: drop its groups (Kafka's ``onResignation``)."""
        if self.ownership.resign(partition, epoch):
            self._unload_groups(partition)

    def _unload_groups(self, partition: int) -> None:
        n = self._num_partitions()
        unloaded = 0
        for group in list(self.groups.values()):
            if n is not None and partition_for(group.group_id, n) == partition:
                self._shutdown_group(group, ErrorCode.not_coordinator)
                del self.groups[group.group_id]
                unloaded += 1
        for owner in self.other_group_types:
            owner.unload(partition)
        if unloaded:
            log.info("group_partition_unloaded", topic=OFFSETS_TOPIC, partition=partition, groups=unloaded)

    def _shutdown_group(self, group: GroupMetadata, error: int) -> None:
        """Cancel a group's timers and answer its parked requests (unload or shutdown)."""
        if group.consumer is not None:
            self.consumer.forget(group.group_id)
        self._cancel_join_timer(group)
        self._cancel_sync_timer(group)
        for handle in group.pending_member_timers.values():
            handle.cancel()
        group.pending_member_timers.clear()
        for member in group.members.values():
            if member.heartbeat_timer is not None:
                member.heartbeat_timer.cancel()
                member.heartbeat_timer = None
            _respond(member.join_waiter, join_error(member.member_id, error))
            _respond(member.sync_waiter, sync_result(error))

    # --- ownership ------------------------------------------------------------------------------

    def _num_partitions(self) -> int | None:
        return self.s.partition_count(OFFSETS_TOPIC)

    def _ensure_offsets_topic(self) -> int:
        n = self._num_partitions()
        if n is None:
            n = self.s.create_internal_topic(
                OFFSETS_TOPIC, self.s.config("offsets.topic.num.partitions"),
                {"cleanup.policy": "compact", "segment.bytes": str(self.s.config("offsets.topic.segment.bytes"))},
                self.s.config("offsets.topic.replication.factor"))
            # Created here (one node): fresh partitions hold nothing to load, they are ours at once.
            for p, epoch in self.s.led_partitions(OFFSETS_TOPIC).items():
                self.ownership.own(p, epoch)
            log.info("offsets_topic_created", topic=OFFSETS_TOPIC, partitions=n)
        return n

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self._ensure_offsets_topic())

    def coordinator_error(self, group_id: str) -> int:
        """0 when this broker coordinates ``group_id`` (FindCoordinator), else the error code."""
        return self._validate_group_status(group_id, allow_empty=True)

    def _validate_group_status(self, group_id: str | None, *, allow_empty: bool) -> int:
        """Kafka's ``validateGroupStatus``: INVALID_GROUP_ID, then activity, loading, ownership.

        ``allow_empty``: OffsetCommit, OffsetFetch, DescribeGroups and DeleteGroups accept "".
        """
        if group_id is None or (not allow_empty and group_id == ""):
            return ErrorCode.invalid_group_id
        if not self.active:
            return ErrorCode.coordinator_not_available
        try:
            partition = self.partition_for(group_id)
        except KafkaError as exc:
            log.warning("offsets_topic_unavailable", error=exc.message)
            return ErrorCode.coordinator_not_available
        return self.ownership.status(partition)

    @property
    def is_loading(self) -> bool:
        return self.ownership.is_loading

    # --- group types (a group id belongs to one) ------------------------------------------------

    def _other_owner(self, group_id: str) -> GroupTypeOwner | None:
        return next((o for o in self.other_group_types if o.owns(group_id)), None)

    def owns_classic_group(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and not group.is_(DEAD)

    def partition_of(self, group_id: str) -> int | None:
        n = self._num_partitions()
        return None if n is None else partition_for(group_id, n)

    async def append_records(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> tuple[int, int]:
        """For the other group types: :meth:`_append` of plain records."""
        return await self._append(group_id, records)

    # --- loading --------------------------------------------------------------------------------

    async def _load_partitions(self, partitions: list[tuple[int, int]]) -> None:
        """Replay each (partition, epoch) elected here, unless it resigned meanwhile."""
        started = time.monotonic()
        # One partition gained by an election is logged only if it held something (below).
        quiet = len(partitions) == 1
        (log.debug if quiet else log.info)("group_metadata_load_started", topic=OFFSETS_TOPIC,
                                           partitions=len(partitions))
        total_groups = total_offsets = 0
        last_report = started
        for done, (p, epoch) in enumerate(partitions, 1):
            t0 = time.monotonic()
            if t0 - last_report >= LOAD_PROGRESS_INTERVAL_S:
                last_report = t0
                log.info("group_metadata_load_progress", topic=OFFSETS_TOPIC, partitions_loaded=done - 1,
                         partitions=len(partitions), groups=total_groups, offsets=total_offsets)
            try:
                plog = self.s.local_log(OFFSETS_TOPIC, p)
            except KeyError:
                plog = None
            loaded = None if plog is None else await load_with_retry(
                lambda plog=plog: read_offsets_partition(plog), topic=OFFSETS_TOPIC, partition=p)
            if loaded is None or self.ownership.loading.get(p) != epoch:  # failed, or resigned meanwhile
                self.ownership.finish_load(p, epoch, False)
                continue
            try:
                groups, offsets = self._apply_loaded(loaded)
            except Exception:
                log.exception("group_metadata_load_failed", topic=OFFSETS_TOPIC, partition=p)
                self.ownership.finish_load(p, epoch, False)
                continue
            self.ownership.finish_load(p, epoch, True)
            total_groups += groups
            total_offsets += offsets
            if loaded.records:
                log.debug("group_metadata_partition_loaded", topic=OFFSETS_TOPIC, partition=p, epoch=epoch,
                         records=loaded.records, end_offset=loaded.end_offset, groups=groups,
                         offsets=offsets, skipped=loaded.skipped, progress=f"{done}/{len(partitions)}",
                         seconds=round(time.monotonic() - t0, 3))
        quiet = quiet and not total_groups and not total_offsets
        (log.debug if quiet else log.info)(
            "group_metadata_load_finished", topic=OFFSETS_TOPIC, partitions=len(partitions),
            groups=total_groups, offsets=total_offsets, seconds=round(time.monotonic() - started, 3))

    def _apply_loaded(self, loaded: LoadedPartition) -> tuple[int, int]:
        """Build the groups of one partition (Kafka's ``loadGroup`` + ``onGroupLoaded``)."""
        offsets_by_group: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        for key, (log_offset, value) in loaded.offsets.items():
            offsets_by_group.setdefault(key.group, {})[(key.topic, key.partition)] = _to_offset(value, log_offset)
        pending_by_group: dict[str, dict[int, dict[tuple[str, int], OffsetAndMetadata]]] = {}
        for producer_id, entries in loaded.pending_txn.items():
            for key, (log_offset, value, producer_epoch) in entries.items():
                pending_by_group.setdefault(key.group, {}).setdefault(producer_id, {})[
                    (key.topic, key.partition)] = _to_offset(value, log_offset, producer_epoch)
        count = 0
        for group_id, consumer_group in self.consumer.build_loaded(loaded.consumer_records).items():
            group = GroupMetadata(group_id)
            group.consumer = consumer_group
            group.offsets = offsets_by_group.pop(group_id, {})
            group.pending_txn_offsets = pending_by_group.pop(group_id, {})
            # Converting a group tombstones the other kind, so this is only a leftover.
            loaded.groups.pop(group_id, None)
            self._install_loaded_group(group)
            if self.groups.get(group_id) is group:
                self.consumer.on_loaded(group)
            count += 1
        for group_id, value in loaded.groups.items():
            group = self._group_from_value(group_id, value)
            group.offsets = offsets_by_group.pop(group_id, {})
            group.pending_txn_offsets = pending_by_group.pop(group_id, {})
            self._install_loaded_group(group)
            count += 1
        for group_id in set(offsets_by_group) | set(pending_by_group):
            group = GroupMetadata(group_id)
            group.offsets = offsets_by_group.get(group_id, {})
            group.pending_txn_offsets = pending_by_group.get(group_id, {})
            self._install_loaded_group(group)
            count += 1
        for owner in self.other_group_types:
            count += owner.replay_loaded(loaded.other_records)
        return count, len(loaded.offsets)

    def _group_from_value(self, group_id: str, value: GroupMetadataValue) -> GroupMetadata:
        group = GroupMetadata(group_id, state=STABLE if value.members else EMPTY,
                              generation_id=value.generation, protocol_type=value.protocol_type or None,
                              protocol_name=value.protocol, leader_id=value.leader,
                              current_state_timestamp=(value.current_state_timestamp
                                                       if value.current_state_timestamp >= 0 else None))
        for m in value.members:
            member = MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                    m.rebalance_timeout, m.session_timeout, value.protocol_type,
                                    [(value.protocol or "", m.subscription)], m.assignment)
            group.add(member)
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    def _install_loaded_group(self, group: GroupMetadata) -> None:
        existing = self.groups.get(group.group_id)
        if existing is not None:
            # A group used by simple consumers meanwhile: keep the live one (Kafka's putIfNotExists).
            log.warning("group_already_cached_during_load", group=group.group_id)
            return
        self.groups[group.group_id] = group
        for member in group.members.values():
            self._schedule_heartbeat(group, member)

    # --- timers -------------------------------------------------------------------------------

    def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata,
                            timeout_ms: int | None = None) -> None:
        """Kafka's ``completeAndScheduleNextHeartbeatExpiration``."""
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_timer = self.timer.schedule(timeout, self._on_heartbeat_expired, group, member)

    def _remove_heartbeat(self, member: MemberMetadata) -> None:
        """Kafka's ``removeHeartbeatForLeavingMember``."""
        member.is_leaving = True
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None

    def _on_heartbeat_expired(self, group: GroupMetadata, member: MemberMetadata) -> None:
        """Kafka's ``onExpireHeartbeat``."""
        member.heartbeat_timer = None
        if self.groups.get(group.group_id) is not group or group.is_(DEAD):
            return
        if group.members.get(member.member_id) is not member or member.has_satisfied_heartbeat:
            return
        log.info("member_session_expired", group=group.group_id, member_id=member.member_id,
                 generation=group.generation_id, session_timeout_ms=member.session_timeout_ms,
                 state=group.state.value)
        self._remove_member_and_update_group(
            group, member, f"removing member {member.member_id} on heartbeat expiration")

    def _add_pending_member_expiration(self, group: GroupMetadata, member_id: str, timeout_ms: int) -> None:
        old = group.pending_member_timers.pop(member_id, None)
        if old is not None:
            old.cancel()
        group.pending_member_timers[member_id] = self.timer.schedule(
            timeout_ms, self._on_pending_member_expired, group, member_id)

    def _on_pending_member_expired(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_member_timers.pop(member_id, None)
        if group.is_pending_member(member_id):
            log.info("pending_member_expired", group=group.group_id, member_id=member_id)
            self._remove_pending_member_and_update_group(group, member_id)

    def _remove_pending_member_and_update_group(self, group: GroupMetadata, member_id: str) -> None:
        group.remove_pending_member(member_id)
        handle = group.pending_member_timers.pop(member_id, None)
        if handle is not None:
            handle.cancel()
        if group.is_(PREPARING):
            self._try_complete_join(group)

    def _cancel_join_timer(self, group: GroupMetadata) -> None:
        dj = group.join_timer
        if dj is not None and dj.handle is not None:
            dj.handle.cancel()
        group.join_timer = None

    def _cancel_sync_timer(self, group: GroupMetadata) -> None:
        if group.sync_timer is not None:
            group.sync_timer.cancel()
        group.sync_timer = None

    # --- rebalance ------------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        """Kafka's ``prepareRebalance``."""
        if group.is_(COMPLETING):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._cancel_sync_timer(group)
        group.pending_sync_members.clear()
        self._cancel_join_timer(group)
        was_empty = group.is_(EMPTY)
        group.transition_to(PREPARING)
        log.info("group_preparing_rebalance", group=group.group_id, generation=group.generation_id,
                 members=group.size, reason=reason)
        if was_empty:
            delay = self.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            self._schedule_join(group, _DelayedJoin(None, True, delay, remaining), delay)
        else:
            self._schedule_join(group, _DelayedJoin(None, False), group.rebalance_timeout_ms)
            self._try_complete_join(group)

    def _schedule_join(self, group: GroupMetadata, dj: _DelayedJoin, delay_ms: int) -> None:
        dj.handle = self.timer.schedule(delay_ms, self._on_join_timer, group, dj)
        group.join_timer = dj

    def _on_join_timer(self, group: GroupMetadata, dj: _DelayedJoin) -> None:
        if group.join_timer is not dj:
            return
        group.join_timer = None
        if dj.initial and group.new_member_added and dj.remaining_ms != 0:
            # InitialDelayedJoin: new members keep arriving, wait another delay (bounded).
            group.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, dj.remaining_ms)
            remaining = max(dj.remaining_ms - dj.delay_ms, 0)
            self._schedule_join(group, _DelayedJoin(None, True, delay, remaining), delay)
            return
        if not dj.initial:
            log.info("rebalance_timeout_expired", group=group.group_id,
                     not_rejoined=[m.member_id for m in group.not_yet_rejoined_members()])
        self._on_complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        """DelayedJoin.tryComplete: complete as soon as every member has rejoined."""
        dj = group.join_timer
        if dj is None or dj.initial:
            return
        if group.has_all_members_joined():
            self._cancel_join_timer(group)
            self._on_complete_join(group)

    def _on_complete_join(self, group: GroupMetadata) -> None:
        """Kafka's ``onCompleteJoin``: drop who did not rejoin, start the next generation."""
        for member in group.not_yet_rejoined_members():
            if not member.is_static:
                log.info("member_removed_not_rejoined", group=group.group_id, member_id=member.member_id)
                self._remove_heartbeat(member)
                _respond(member.sync_waiter, sync_result(ErrorCode.rebalance_in_progress))
                member.sync_waiter = None
                group.remove(member.member_id)
        if group.is_(DEAD):
            log.info("group_dead_during_rebalance", group=group.group_id)
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            log.error("rebalance_no_members_rejoined", group=group.group_id)
            self._schedule_join(group, _DelayedJoin(None, False), group.rebalance_timeout_ms)
            return
        group.init_next_generation()
        if group.is_(EMPTY):
            log.info("group_empty", group=group.group_id, generation=group.generation_id)
            self.tasks.spawn(self._store_group(group, {}))  # a failure is logged; nobody waits for it
            return
        log.info("group_rebalance_completed", group=group.group_id, generation=group.generation_id,
                 protocol=group.protocol_name, leader=group.leader_id, members=group.size)
        for member in list(group.members.values()):
            result = {"error_code": 0, "generation_id": group.generation_id,
                      "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                      "leader": group.leader_id or "", "skip_assignment": False,
                      "member_id": member.member_id,
                      "members": group.current_member_metadata() if group.is_leader(member.member_id) else []}
            self._invoke_join(group, member, result)
            self._schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)

    def _invoke_join(self, group: GroupMetadata, member: MemberMetadata, result: dict) -> None:
        """Kafka's ``maybeInvokeJoinCallback``."""
        if member.join_waiter is not None:
            _respond(member.join_waiter, result)
            group.set_join_waiter(member, None)

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        self._cancel_sync_timer(group)
        group.sync_timer = self.timer.schedule(group.rebalance_timeout_ms, self._on_expire_pending_sync, group,
                                               group.generation_id)

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._cancel_sync_timer(group)

    def _on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None:
        """Kafka's ``onExpirePendingSync``: members that never sent SyncGroup are removed."""
        group.sync_timer = None
        if generation_id != group.generation_id or group.state not in (COMPLETING, STABLE):
            return
        if not group.pending_sync_members:
            return
        pending = sorted(group.pending_sync_members)
        for member_id in pending:
            member = group.remove(member_id)
            if member is not None:
                self._remove_heartbeat(member)
                _respond(member.sync_waiter, sync_result(ErrorCode.unknown_member_id))
        log.info("pending_sync_expired", group=group.group_id, members=pending)
        self._prepare_rebalance(group, f"removing {pending} on pending sync request expiration")

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata,
                                        reason: str) -> None:
        """Kafka's ``removeMemberAndUpdateGroup``."""
        # A member removed while its JoinGroup is parked learns it with UNKNOWN_MEMBER_ID.
        self._invoke_join(group, member, join_error(UNKNOWN_MEMBER_ID, ErrorCode.unknown_member_id))
        _respond(member.sync_waiter, sync_result(ErrorCode.unknown_member_id))
        member.sync_waiter = None
        self._remove_heartbeat(member)
        group.remove(member.member_id)
        if group.state in (STABLE, COMPLETING):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(PREPARING):
            self._try_complete_join(group)

    def _propagate_assignment(self, group: GroupMetadata, error: int) -> None:
        for member in group.members.values():
            if member.sync_waiter is not None:
                _respond(member.sync_waiter, sync_result(error, group.protocol_type, group.protocol_name,
                                                         member.assignment if not error else b""))
                member.sync_waiter = None
                self._schedule_heartbeat(group, member)

    def _set_and_propagate_assignment(self, group: GroupMetadata, assignment: dict[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, 0)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    # --- JoinGroup ------------------------------------------------------------------------------

    async def join_group(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                         require_known_member_id: bool, client_id: str, client_host: str,
                         rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                         protocols: list[tuple[str, bytes]], reason: str | None = None) -> dict:
        """Kafka's ``handleJoinGroup``; answers when the rebalance completes."""
        error = self._validate_group_status(group_id, allow_empty=False)
        if error:
            return join_error(member_id, error)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return join_error(member_id, ErrorCode.invalid_session_timeout)
        if self._other_owner(group_id) is not None:
            return join_error(UNKNOWN_MEMBER_ID, ErrorCode.inconsistent_group_protocol)  # as Kafka 4
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        if group is None:
            if not is_unknown:
                return join_error(member_id, ErrorCode.unknown_member_id)
            group = self.groups[group_id] = GroupMetadata(group_id)
        if group.consumer is not None:
            if group.consumer.members:
                # Classic members cannot join a live consumer group here (no online migration).
                return join_error(member_id, ErrorCode.group_id_not_found)
            # Kafka's maybeDeleteEmptyConsumerGroup: an empty consumer group becomes classic.
            self.consumer.forget(group_id)
            tombstones = self.consumer.tombstone_records(group.consumer)
            group.consumer = None
            self.tasks.spawn(self._append(group_id, tombstones))
            log.info("empty_consumer_group_converted", group=group_id)
        fut = asyncio.get_running_loop().create_future()
        args = {"group_instance_id": group_instance_id, "client_id": client_id, "client_host": client_host,
                "rebalance_timeout_ms": rebalance_timeout_ms, "session_timeout_ms": session_timeout_ms,
                "protocol_type": protocol_type, "protocols": list(protocols), "fut": fut,
                "reason": reason or "joining the group"}
        if not self._accept_joining_member(group, member_id):
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member_and_update_group(group, member, "group max size reached")
            _respond(fut, join_error(UNKNOWN_MEMBER_ID, ErrorCode.group_max_size_reached))
        elif is_unknown:
            self._do_new_member_join(group, require_known_member_id=require_known_member_id, **args)
        else:
            self._do_current_member_join(group, member_id=member_id, **args)
        if group.is_(PREPARING):
            self._try_complete_join(group)
        return await asyncio.shield(fut)

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        """Kafka's ``acceptJoiningMember`` (group.max.size)."""
        if group.state in (EMPTY, DEAD):
            return True
        if group.is_(PREPARING):
            return ((group.has(member_id) and group.get(member_id).is_awaiting_join)
                    or group.num_members_awaiting_join < self.max_group_size)
        return group.has(member_id) or group.size < self.max_group_size

    def _do_new_member_join(self, group: GroupMetadata, *, require_known_member_id: bool,
                            group_instance_id: str | None, client_id: str, fut, **args) -> None:
        """Kafka's ``doNewMemberJoinGroup`` (the member has no id yet)."""
        if group.is_(DEAD):
            _respond(fut, join_error(UNKNOWN_MEMBER_ID, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(args["protocol_type"], {n for n, _ in args["protocols"]}):
            _respond(fut, join_error(UNKNOWN_MEMBER_ID, ErrorCode.inconsistent_group_protocol))
            return
        new_member_id = f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"
        if group_instance_id is not None:
            self._do_static_member_join(group, new_member_id, group_instance_id, client_id, fut, **args)
        elif require_known_member_id:
            # KIP-394: hand out the id first; the member rejoins with it.
            group.add_pending_member(new_member_id)
            self._add_pending_member_expiration(group, new_member_id, args["session_timeout_ms"])
            _respond(fut, join_error(new_member_id, ErrorCode.member_id_required))
        else:
            self._add_member_and_rebalance(group, new_member_id, None, client_id, fut, **args)

    def _do_static_member_join(self, group: GroupMetadata, new_member_id: str, group_instance_id: str,
                               client_id: str, fut, **args) -> None:
        """Kafka's ``doStaticMemberJoinGroup`` (basic): a known instance id takes a new member id."""
        old_member_id = group.current_static_member_id(group_instance_id)
        if old_member_id is None:
            self._add_member_and_rebalance(group, new_member_id, group_instance_id, client_id, fut, **args)
            return
        old = group.get(old_member_id)
        log.info("static_member_rejoined", group=group.group_id, group_instance_id=group_instance_id,
                 old_member_id=old_member_id, new_member_id=new_member_id)
        # The old incarnation's parked requests are fenced.
        self._invoke_join(group, old, join_error(old_member_id, ErrorCode.fenced_instance_id))
        _respond(old.sync_waiter, sync_result(ErrorCode.fenced_instance_id))
        old.sync_waiter = None
        member = group.replace_static_member(group_instance_id, old_member_id, new_member_id)
        member.client_id = client_id
        member.client_host = args["client_host"]
        self._schedule_heartbeat(group, member)
        if group.is_(STABLE) and member.matches(args["protocols"]):
            member.rebalance_timeout_ms = args["rebalance_timeout_ms"]
            member.session_timeout_ms = args["session_timeout_ms"]
            self.tasks.spawn(self._store_static_rejoin(group, group_instance_id, old_member_id, new_member_id, fut))
            return
        if group.state in (STABLE, COMPLETING, PREPARING, EMPTY):
            self._update_member_and_rebalance(group, member, args["protocols"], args["rebalance_timeout_ms"],
                                              args["session_timeout_ms"], fut, args["reason"])

    async def _store_static_rejoin(self, group: GroupMetadata, group_instance_id: str, old_member_id: str,
                                   new_member_id: str, fut) -> None:
        """The rest of Kafka's static rejoin: persist the replacement, then answer."""
        error = await self._store_group(group, {m.member_id: m.assignment for m in group.members.values()})
        if error:
            # Revert the replacement so the old incarnation keeps its place.
            if group.current_static_member_id(group_instance_id) == new_member_id:
                group.replace_static_member(group_instance_id, new_member_id, old_member_id)
            _respond(fut, join_error(UNKNOWN_MEMBER_ID, error))
            return
        is_leader = group.is_leader(new_member_id)
        _respond(fut, {"error_code": 0, "generation_id": group.generation_id,
                       "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                       "leader": group.leader_id or "", "skip_assignment": is_leader,
                       "member_id": new_member_id,
                       "members": group.current_member_metadata() if is_leader else []})

    def _do_current_member_join(self, group: GroupMetadata, *, member_id: str, group_instance_id: str | None,
                                client_id: str, fut, **args) -> None:
        """Kafka's ``doCurrentMemberJoinGroup`` (the member already has an id)."""
        if group.is_(DEAD):
            _respond(fut, join_error(member_id, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(args["protocol_type"], {n for n, _ in args["protocols"]}):
            _respond(fut, join_error(member_id, ErrorCode.inconsistent_group_protocol))
            return
        if group.is_pending_member(member_id):
            if group_instance_id is not None:
                _respond(fut, join_error(member_id, ErrorCode.unknown_server_error))
                return
            self._add_member_and_rebalance(group, member_id, None, client_id, fut, **args)
            return
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error:
            _respond(fut, join_error(member_id, error))
            return
        member = group.get(member_id)
        protocols = args["protocols"]
        if group.is_(PREPARING) or (group.is_(COMPLETING) and not member.matches(protocols)) or \
                (group.is_(STABLE) and (group.is_leader(member_id) or not member.matches(protocols))):
            self._update_member_and_rebalance(group, member, protocols, args["rebalance_timeout_ms"],
                                              args["session_timeout_ms"], fut, args["reason"])
        elif group.state in (COMPLETING, STABLE):
            # Same metadata: the member just missed the response, hand out this generation again.
            is_leader = group.is_leader(member_id) and group.is_(COMPLETING)
            _respond(fut, {"error_code": 0, "generation_id": group.generation_id,
                           "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                           "leader": group.leader_id or "", "skip_assignment": False,
                           "member_id": member_id,
                           "members": group.current_member_metadata() if is_leader else []})
        else:  # Empty
            _respond(fut, join_error(member_id, ErrorCode.unknown_member_id))

    def _add_member_and_rebalance(self, group: GroupMetadata, member_id: str, group_instance_id: str | None,
                                  client_id: str, fut, *, client_host: str, rebalance_timeout_ms: int,
                                  session_timeout_ms: int, protocol_type: str,
                                  protocols: list[tuple[str, bytes]], reason: str) -> None:
        """Kafka's ``addMemberAndRebalance``."""
        member = MemberMetadata(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                                session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        if group.is_(PREPARING) and group.generation_id == 0:
            group.new_member_added = True
        handle = group.pending_member_timers.pop(member_id, None)
        if handle is not None:
            handle.cancel()
        group.add(member, fut)
        log.info("member_joined", group=group.group_id, member_id=member_id, client_id=client_id,
                 client_host=client_host, group_instance_id=group_instance_id,
                 session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms)
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id} ({reason})")

    def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata,
                                     protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                                     session_timeout_ms: int, fut, reason: str) -> None:
        """Kafka's ``updateMemberAndRebalance``."""
        if member.join_waiter is not None and member.join_waiter is not fut:
            # A retried JoinGroup replaces the parked one (whose connection is presumably gone).
            _respond(member.join_waiter, join_error(member.member_id, ErrorCode.rebalance_in_progress))
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, fut)
        self._maybe_prepare_rebalance(group, f"updating metadata for member {member.member_id} ({reason})")

    def _validate_current_member(self, group: GroupMetadata, member_id: str,
                                 group_instance_id: str | None) -> int:
        """Kafka's ``validateCurrentMember``: static id maps to this member, member exists."""
        if group_instance_id is not None:
            current = group.current_static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
            return 0
        if not group.has(member_id):
            return ErrorCode.unknown_member_id
        return 0

    # --- SyncGroup ------------------------------------------------------------------------------

    async def sync_group(self, *, group_id: str, generation_id: int, member_id: str,
                         group_instance_id: str | None, protocol_type: str | None,
                         protocol_name: str | None, assignments: dict[str, bytes]) -> dict:
        """Kafka's ``handleSyncGroup``: the leader's assignment reaches every member."""
        error = self._validate_group_status(group_id, allow_empty=False)
        if error == ErrorCode.coordinator_load_in_progress:
            # The group is still loading: make the member rejoin.
            return sync_result(ErrorCode.rebalance_in_progress)
        if error:
            return sync_result(error)
        group = self.groups.get(group_id)
        if group is None:
            return sync_result(ErrorCode.unknown_member_id)
        fut = asyncio.get_running_loop().create_future()
        assignment = self._do_sync_group(group, generation_id, member_id, group_instance_id, protocol_type,
                                         protocol_name, assignments, fut)
        if assignment is not None:
            await self._store_sync_assignment(group, member_id, assignment)
        return await asyncio.shield(fut)

    async def _store_sync_assignment(self, group: GroupMetadata, leader_id: str, assignment: dict[str, bytes]) -> None:
        """The leader's assignment: persist it, then (same generation, still completing the
        rebalance) hand it to every member and go Stable (Kafka's storeGroup callback)."""
        generation = group.generation_id
        error = await self._store_group(group, assignment)
        if not (group.is_(COMPLETING) and group.generation_id == generation):
            return  # the group moved on (or was unloaded) while the write was in flight
        if error:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(
                group, f"error when storing group assignment during SyncGroup (member: {leader_id})")
            return
        self._set_and_propagate_assignment(group, assignment)
        group.transition_to(STABLE)
        log.info("group_stable", group=group.group_id, generation=group.generation_id, members=group.size)

    def _do_sync_group(self, group: GroupMetadata, generation_id: int, member_id: str,
                       group_instance_id: str | None, protocol_type: str | None, protocol_name: str | None,
                       assignments: dict[str, bytes], fut) -> dict[str, bytes] | None:
        """Kafka's ``doSyncGroup``; the leader's assignment when the group metadata is to be written."""
        if group.is_(DEAD):
            _respond(fut, sync_result(ErrorCode.coordinator_not_available))
            return None
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error:
            _respond(fut, sync_result(error))
        elif generation_id != group.generation_id:
            _respond(fut, sync_result(ErrorCode.illegal_generation))
        elif (protocol_type is not None and group.protocol_type != protocol_type) or \
                (protocol_name is not None and group.protocol_name != protocol_name):
            _respond(fut, sync_result(ErrorCode.inconsistent_group_protocol))
        elif group.is_(EMPTY):
            _respond(fut, sync_result(ErrorCode.unknown_member_id))
        elif group.is_(PREPARING):
            _respond(fut, sync_result(ErrorCode.rebalance_in_progress))
        elif group.is_(COMPLETING):
            member = group.get(member_id)
            if member.sync_waiter is not None:
                _respond(member.sync_waiter, sync_result(ErrorCode.rebalance_in_progress))
            member.sync_waiter = fut
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                assignment = {m: assignments.get(m, b"") for m in group.members}
                missing = [m for m in group.members if m not in assignments]
                if missing:
                    log.warning("sync_group_assignment_missing_members", group=group.group_id,
                                generation=group.generation_id, missing=missing)
                return assignment
        else:  # Stable
            self._remove_pending_sync_member(group, member_id)
            member = group.get(member_id)
            _respond(fut, sync_result(0, group.protocol_type, group.protocol_name, member.assignment))
            self._schedule_heartbeat(group, member)
        return None

    # --- Heartbeat, LeaveGroup ----------------------------------------------------------------

    def heartbeat(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int) -> int:
        """Kafka's ``handleHeartbeat``."""
        error = self._validate_group_status(group_id, allow_empty=False)
        if error == ErrorCode.coordinator_load_in_progress:
            return 0  # the group is still loading: respond blindly
        if error:
            return error
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(EMPTY):
            return ErrorCode.unknown_member_id
        self._schedule_heartbeat(group, group.get(member_id))
        if group.is_(PREPARING):
            return ErrorCode.rebalance_in_progress
        return 0

    def leave_group(self, *, group_id: str, members: list[tuple[str, str | None]],
                    reason: str | None = None) -> tuple[int, list[tuple[str, str | None, int]]]:
        """Kafka's ``handleLeaveGroup``: (top-level error, per member (id, instance id, error))."""
        error = self._validate_group_status(group_id, allow_empty=False)
        if error:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return 0, [(m, i, ErrorCode.unknown_member_id) for m, i in members]
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available, []
        why = reason or "the consumer is being closed"
        results = []
        for member_id, instance_id in members:
            if member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal by group instance id.
                current = group.current_static_member_id(instance_id)
                if current is None:
                    results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                    continue
                self._remove_current_member(group, current, why)
                results.append((member_id, instance_id, 0))
            elif group.is_pending_member(member_id):
                self._remove_pending_member_and_update_group(group, member_id)
                results.append((member_id, instance_id, 0))
            else:
                error = self._validate_current_member(group, member_id, instance_id)
                if not error:
                    self._remove_current_member(group, member_id, why)
                results.append((member_id, instance_id, error))
        return 0, results

    def _remove_current_member(self, group: GroupMetadata, member_id: str, reason: str) -> None:
        member = group.get(member_id)
        log.info("member_left", group=group.group_id, member_id=member_id, reason=reason)
        self._remove_member_and_update_group(
            group, member, f"removing member {member_id} on LeaveGroup; client reason: {reason}")

    # --- offsets --------------------------------------------------------------------------------

    async def commit_offsets(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                             generation_id: int, offsets: dict[tuple[str, int], OffsetAndMetadata],
                             api_version: int = 9) -> dict[tuple[str, int], int]:
        """Kafka's ``handleCommitOffsets``: error per partition, after the append."""
        error = self._validate_group_status(group_id, allow_empty=True)
        if error:
            return {tp: error for tp in offsets}
        group = self.groups.get(group_id)
        if group is None and self._other_owner(group_id) is not None:
            return {tp: ErrorCode.group_id_not_found for tp in offsets}  # "is not a consumer group"
        if group is not None and group.consumer is not None:
            error = self.consumer.validate_offset_commit(group.consumer, member_id, generation_id,
                                                         transactional=False, api_version=api_version)
            if error:
                return {tp: error for tp in offsets}
            return await self._store_offsets(group, offsets)
        if group is None:
            if generation_id >= 0:
                # A commit from an older generation of a group that no longer exists.
                return {tp: ErrorCode.illegal_generation for tp in offsets}
            # Not relying on Kafka for group management: keep offsets only.
            group = self.groups[group_id] = GroupMetadata(group_id)
        if group.is_(DEAD):
            return {tp: ErrorCode.coordinator_not_available for tp in offsets}
        if not (generation_id < 0 and group.is_(EMPTY)):
            error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id,
                                                 transactional=False)
            if error:
                return {tp: error for tp in offsets}
            if group.is_(COMPLETING):
                # The member has its JoinGroup answer but not its assignment yet.
                return {tp: ErrorCode.rebalance_in_progress for tp in offsets}
            # Stable or PreparingRebalance: a commit counts as a heartbeat.
            self._schedule_heartbeat(group, group.get(member_id))
        return await self._store_offsets(group, offsets)

    def _validate_offset_commit(self, group: GroupMetadata, generation_id: int, member_id: str,
                                group_instance_id: str | None, *, transactional: bool) -> int:
        """Kafka's ``validateOffsetCommit``."""
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_current_member(group, member_id, group_instance_id)
            if error:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
            return 0
        if not transactional and not group.is_(EMPTY):
            # Only members may commit for a group that has members.
            return ErrorCode.unknown_member_id
        return 0

    async def txn_offset_commit(self, *, group_id: str, producer_id: int, producer_epoch: int,
                                member_id: str, group_instance_id: str | None, generation_id: int,
                                offsets: dict[tuple[str, int], OffsetAndMetadata],
                                verification_guard: object | None = None) -> dict[tuple[str, int], int]:
        """Kafka's ``handleTxnCommitOffsets``.

        The offsets are appended in a transactional batch and stay pending (invisible to
        OffsetFetch, UNSTABLE_OFFSET_COMMIT with require_stable) until
        :meth:`complete_txn_offset_commits` learns the outcome from the marker. The handler's
        KIP-890 ``verification_guard`` goes with the append (INVALID_TXN_STATE if the
        transaction ended while it was verified).
        """
        error = self._validate_group_status(group_id, allow_empty=True)
        if error:
            return {tp: error for tp in offsets}
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = GroupMetadata(group_id)
        if group.consumer is not None:
            error = self.consumer.validate_offset_commit(group.consumer, member_id, generation_id,
                                                         transactional=True, api_version=-1,
                                                         instance_id=group_instance_id)
        else:
            error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id,
                                                 transactional=True)
        if error:
            return {tp: error for tp in offsets}
        return await self._store_offsets(group, offsets, producer_id=producer_id, producer_epoch=producer_epoch,
                                         verification_guard=verification_guard)

    def accepts_txn_markers(self, offsets_partition: int) -> bool:
        """Whether a marker may land on ``offsets_partition`` now: only once it is loaded here.

        A marker appended while the partition loads would sit past what the load read, and
        its completion would find none of the loaded groups: the aborted transaction's offsets
        would stay pending until the producer id's next COMMIT. Kafka 4 refuses the marker
        (its runtime's COORDINATOR_LOAD_IN_PROGRESS, sent back as NOT_LEADER_OR_FOLLOWER) and
        the transaction coordinator retries it."""
        return self.ownership.status(offsets_partition) == 0

    def complete_txn_offset_commits(self, offsets_partition: int, producer_id: int, is_commit: bool,
                                    producer_epoch: int = -1) -> None:
        """A COMMIT/ABORT marker for ``producer_id`` at ``producer_epoch`` landed on
        ``offsets_partition`` (Kafka's ``scheduleHandleTxnCompletion``): apply or drop its
        pending offsets."""
        n = self._num_partitions()
        if n is None:
            return
        for group in self.groups.values():
            if partition_for(group.group_id, n) == offsets_partition and producer_id in group.pending_txn_offsets:
                count, discarded = group.complete_pending_txn_offset_commit(producer_id, is_commit, producer_epoch)
                log.info("txn_offsets_completed", group=group.group_id, producer_id=producer_id,
                         producer_epoch=producer_epoch, committed=is_commit, partitions=count)
                if discarded:
                    log.warning("txn_offsets_discarded", group=group.group_id, producer_id=producer_id,
                                producer_epoch=producer_epoch, partitions=discarded,
                                reason="not written by the committed transaction")

    async def _store_offsets(self, group: GroupMetadata, offsets: dict[tuple[str, int], OffsetAndMetadata],
                             *, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                             verification_guard: object | None = None) -> dict[tuple[str, int], int]:
        """Kafka's ``storeOffsets``: append, then make the offsets visible, then answer."""
        max_metadata = self.s.config("offset.metadata.max.bytes")
        results: dict[tuple[str, int], int] = {}
        valid: dict[tuple[str, int], OffsetAndMetadata] = {}
        now = now_ms()
        for tp, commit in offsets.items():
            if commit.metadata is not None and len(commit.metadata.encode("utf-8")) > max_metadata:
                results[tp] = ErrorCode.offset_metadata_too_large
                continue
            commit.commit_timestamp = now
            commit.producer_epoch = producer_epoch
            valid[tp] = commit
        if not valid:
            return results
        records = [offset_commit_record(group.group_id, topic, partition,
                                        OffsetCommitValue(c.offset, c.leader_epoch, c.metadata or "",
                                                          c.commit_timestamp))
                   for (topic, partition), c in valid.items()]
        transactional = producer_id != NO_PRODUCER_ID
        if transactional:
            group.prepare_txn_offset_commit(producer_id, valid)
        else:
            group.prepare_offset_commit(valid)

        def in_local_log(base_offset: int) -> None:
            # Where the batch sits in the log orders it against the producer's marker: a marker
            # that lands while the batch is still being replicated comes after it, and a COMMIT
            # must apply it (as replaying the log would).
            if transactional:
                for c in valid.values():
                    c.log_offset = base_offset

        error, base_offset = await self._append(group.group_id, records, producer_id=producer_id,
                                                producer_epoch=producer_epoch, transactional=transactional,
                                                verification_guard=verification_guard, on_appended=in_local_log)
        if transactional and not error:
            await self._txn_offsets_delay_fault_point()
        if error:
            log.warning("offset_commit_append_failed", group=group.group_id, error=error_name(error))
        for tp, commit in valid.items():
            if error:
                if transactional:
                    group.fail_pending_txn_offset_commit(producer_id, tp, commit)
                else:
                    group.fail_pending_offset_write(tp, commit)
                results[tp] = append_error(error, too_large=ErrorCode.invalid_commit_offset_size)
                continue
            commit.log_offset = base_offset
            if transactional:
                if not group.on_txn_offset_commit_append(producer_id, tp, commit):
                    log.info("txn_offset_commit_completed_after_its_transaction", group=group.group_id,
                             producer_id=producer_id, producer_epoch=producer_epoch, topic=tp[0],
                             partition=tp[1], log_offset=base_offset)
            else:
                group.on_offset_commit_append(tp, commit)
            results[tp] = 0
        return results

    async def _txn_offsets_delay_fault_point(self) -> None:
        """Test fault point ``group.txn.offsets.delay:<ms>``: a TxnOffsetCommit's append
        completes that much later, as when a paused follower holds the high watermark."""
        delay_ms = int(fault_points(self.s.config("test.fault.points")).get(TXN_OFFSETS_DELAY_FAULT) or 0)
        if delay_ms:
            log.warning("txn_offsets_delayed_by_fault_point", seconds=delay_ms / 1000)
            await asyncio.sleep(delay_ms / 1000)

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None,
                      require_stable: bool = False, member_id: str | None = None, member_epoch: int = -1
                      ) -> tuple[int, list[tuple[tuple[str, int], OffsetAndMetadata | None, int]]]:
        """Kafka's ``handleFetchOffsets``: (error, [(tp, committed or None, partition error)]);
        a consumer group checks the member id and epoch (OffsetFetch v9+)."""
        error = self._validate_group_status(group_id, allow_empty=True)
        if error:
            return error, []
        group = self.groups.get(group_id)
        if group is None and self._other_owner(group_id) is not None:
            return ErrorCode.group_id_not_found, []  # Kafka: "Group <id> is not a consumer group."
        if group is not None and group.consumer is not None:
            error = self.consumer.validate_offset_fetch(group.consumer, member_id, member_epoch)
            if error:
                return error, []
        if group is None or group.is_(DEAD):
            return 0, [(tp, None, 0) for tp in (partitions or [])]
        if partitions is None:
            return 0, [(tp, commit, 0) for tp, commit in sorted(group.offsets.items())]
        out = []
        for tp in partitions:
            if require_stable and group.has_pending_offset_commits(tp):
                out.append((tp, None, ErrorCode.unstable_offset_commit))
            else:
                out.append((tp, group.offsets.get(tp), 0))
        return 0, out

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                             ) -> tuple[int, dict[tuple[str, int], int]]:
        """Kafka's ``OffsetMetadataManager.deleteOffsets`` (OffsetDelete): (group error,
        {tp: error}). The partitions of a topic the group is subscribed to get
        GROUP_SUBSCRIBED_TO_TOPIC; the others succeed, and those with a committed (or pending
        transactional) offset are tombstoned with acks=all before the offsets are forgotten.
        The group itself stays (an Empty group without offsets dies at the next cleanup)."""
        error = self._validate_group_status(group_id, allow_empty=False)
        if error:
            return error, {}
        group = self.groups.get(group_id)
        error = _validate_offset_delete(group)
        if error:
            return error, {}
        results: dict[tuple[str, int], int] = {}
        doomed: list[tuple[str, int]] = []
        for tp in partitions:
            if group.is_subscribed_to_topic(tp[0]):
                results[tp] = ErrorCode.group_subscribed_to_topic
                continue
            results[tp] = 0
            if group.has_offset_or_pending_txn_offset(tp):
                doomed.append(tp)
        if doomed:
            records = [offset_commit_record(group_id, topic, partition, None) for topic, partition in doomed]
            error, base_offset = await self._append(group_id, records)
            if error:
                log.warning("offset_delete_append_failed", group=group_id, error=error_name(error))
                return append_error(error), {}
            for tp in doomed:
                group.remove_offset(tp, base_offset)
            log.info("offsets_deleted", group=group_id, partitions=len(doomed))
        return 0, results

    # --- DescribeGroups, ListGroups, DeleteGroups ---------------------------------------------

    def describe_group(self, group_id: str) -> dict:
        """Kafka's ``handleDescribeGroup`` + ``GroupMetadata.summary``."""
        error = self._validate_group_status(group_id, allow_empty=True)
        result = {"error_code": error, "group_id": group_id, "group_state": "", "protocol_type": "",
                  "protocol_data": "", "members": []}
        if error:
            return result
        group = self.groups.get(group_id)
        if group is None or group.consumer is not None:
            result["group_state"] = DEAD.value
            if group is not None or self._other_owner(group_id) is not None:
                # Kafka's classicGroup(): "Group %s is not a classic group."
                result["error_message"] = f"Group {group_id} is not a classic group."
            return result
        result["group_state"] = group.state.value
        result["protocol_type"] = group.protocol_type or ""
        stable = group.is_(STABLE)
        if stable:
            result["protocol_data"] = group.protocol_name or ""
        result["members"] = [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
             "client_host": m.client_host,
             "member_metadata": _safe_metadata(m, group.protocol_name) if stable else b"",
             "member_assignment": m.assignment if stable else b""}
            for m in group.members.values()]
        return result

    def list_groups(self, states: set[str] | None = None,
                    types: set[str] | None = None) -> tuple[int, list[dict]]:
        """Kafka's ``handleListGroups``; filters are case-insensitive as in Kafka 4."""
        if not self.active:
            return ErrorCode.coordinator_not_available, []
        error = ErrorCode.coordinator_load_in_progress if self.is_loading else 0
        out = [g for owner in self.other_group_types for g in owner.list_groups(states, types)]
        wanted_types = {t.lower() for t in types} if types else None
        wanted = {s.lower() for s in states} if states else None
        for group in self.groups.values():
            if wanted_types is not None and group.group_type not in wanted_types:
                continue
            if group.consumer is not None:
                entry = self.consumer.list_entry(group.consumer)
                if wanted is None or entry["group_state"].lower() in wanted:
                    out.append(entry)
                continue
            if group.is_(DEAD) or (wanted is not None and group.state.value.lower() not in wanted):
                continue
            out.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                        "group_state": group.state.value, "group_type": "classic"})
        return error, out

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        """Kafka's ``handleDeleteGroups``: only Empty groups; offsets and metadata tombstoned."""
        results: dict[str, int] = {}
        eligible: list[GroupMetadata] = []
        for group_id in group_ids:
            error = self._validate_group_status(group_id, allow_empty=True)
            if error:
                results[group_id] = error
                continue
            group = self.groups.get(group_id)
            other = self._other_owner(group_id) if group is None else None
            if other is not None:
                results[group_id] = await other.delete_group(group_id)
            elif group is None or group.is_(DEAD):
                results[group_id] = ErrorCode.group_id_not_found
            elif group.consumer is not None and group.consumer.members:
                results[group_id] = ErrorCode.non_empty_group  # ConsumerGroup.validateDeleteGroup
            elif group.is_(EMPTY):
                group.transition_to(DEAD)
                eligible.append(group)
            else:
                results[group_id] = ErrorCode.non_empty_group
        for group in eligible:
            results[group.group_id] = await self._cleanup_group(group, group.remove_all_offsets())
            log.info("group_deleted", group=group.group_id, generation=group.generation_id)
        return results

    async def _cleanup_group(self, group: GroupMetadata, removed_offsets: list[tuple[str, int]]) -> int:
        """Kafka's ``cleanupGroupMetadata`` for one group: tombstones, then forget a dead group."""
        if _is_empty(group) and not group.has_offsets() and not group.pending_members:
            group.transition_to(DEAD)
        records = [offset_commit_record(group.group_id, t, p, None) for t, p in removed_offsets]
        if group.is_(DEAD) and self.groups.get(group.group_id) is group:
            self._shutdown_group(group, ErrorCode.coordinator_not_available)
            del self.groups[group.group_id]
            # Groups only used for offset storage (generation 0) never wrote metadata.
            if group.consumer is not None:
                records.extend(self.consumer.tombstone_records(group.consumer))
            elif group.generation_id > 0:
                records.append(group_metadata_record(group.group_id, None))
        if not records:
            return 0
        error, _ = await self._append(group.group_id, records)
        if error:
            # As in Kafka: the tombstones are retried by the next cleanup; the group is gone here.
            log.warning("group_tombstones_append_failed", group=group.group_id, error=error_name(error))
        return 0

    async def cleanup_expired_offsets(self, now: int | None = None) -> int:
        """Kafka's ``cleanupGroupMetadata``: expire offsets of Empty and simple groups after
        ``offsets.retention.minutes``; an Empty group without offsets dies and is forgotten."""
        now = now_ms() if now is None else now
        retention_ms = self.s.config("offsets.retention.minutes") * 60_000
        removed_total = 0
        for group in list(self.groups.values()):
            if group.is_(DEAD) or self.ownership.status(partition_for(group.group_id, self._num_partitions() or 1)):
                continue
            expired = _expired_offsets(group, now, retention_ms)
            for tp in expired:
                del group.offsets[tp]
            if expired or (_is_empty(group) and not group.has_offsets() and not group.pending_members):
                removed_total += len(expired)
                if expired:
                    log.info("offsets_expired", group=group.group_id, partitions=len(expired))
                await self._cleanup_group(group, expired)
        return removed_total

    # --- the log --------------------------------------------------------------------------------

    async def _store_group(self, group: GroupMetadata, assignment: dict[str, bytes]) -> int:
        """Kafka's ``storeGroup``: append the group's metadata; 0 or the error for the caller."""
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "", generation=group.generation_id,
            protocol=group.protocol_name, leader=group.leader_id,
            current_state_timestamp=group.current_state_timestamp or now_ms(),
            members=[MemberMetadataValue(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                         m.rebalance_timeout_ms, m.session_timeout_ms,
                                         _safe_metadata(m, group.protocol_name),
                                         assignment.get(m.member_id, b""))
                     for m in group.members.values()] if group.protocol_name is not None else [])
        error, _ = await self._append(group.group_id, [group_metadata_record(group.group_id, value)])
        if error:
            log.warning("group_metadata_append_failed", group=group.group_id, generation=group.generation_id,
                        error=error_name(error))
            return append_error(error)
        return 0

    async def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]], *,
                      producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                      transactional: bool = False, verification_guard: object | None = None,
                      on_appended: Callable[[int], None] | None = None) -> tuple[int, int]:
        """Append one batch to the group's ``__consumer_offsets`` partition with acks=all:
        (0, base offset), or (error, -1); NOT_COORDINATOR when the partition is no longer owned
        at the epoch it was owned at when the write was decided."""
        try:
            partition = self.partition_for(group_id)
        except KafkaError as exc:
            return exc.code, -1
        epoch = self.ownership.epoch(partition)
        if epoch is None:
            return self.ownership.status(partition), -1
        batch = build_batch(records, timestamp=now_ms(), producer_id=producer_id,
                            producer_epoch=producer_epoch, transactional=transactional)
        error, base_offset = await self.s.append_at(OFFSETS_TOPIC, partition, bytes(batch),
                                                    self.s.config("offsets.commit.timeout.ms"),
                                                    verification_guard=verification_guard, on_appended=on_appended)
        if not error and not self.ownership.is_current(partition, epoch):
            error = ErrorCode.not_leader_or_follower  # leadership moved while the write was in flight
        return error, base_offset


def _safe_metadata(member: MemberMetadata, protocol: str | None) -> bytes:
    try:
        return member.metadata(protocol)
    except KeyError:
        return b""


def _validate_offset_delete(group: GroupMetadata | None) -> int:
    """Kafka's ``ClassicGroup.validateOffsetDelete``: a group with members must use the
    consumer protocol (whose subscriptions say which topics are in use)."""
    if group is None or group.is_(DEAD):
        return ErrorCode.group_id_not_found
    if not group.is_(EMPTY) and not group.uses_consumer_protocol:
        return ErrorCode.non_empty_group
    return 0


def _is_empty(group: GroupMetadata) -> bool:
    """Empty classic group, or consumer group without members."""
    if group.consumer is not None:
        return not group.consumer.members
    return group.is_(EMPTY)


def _expired_offsets(group: GroupMetadata, now: int, retention_ms: int) -> list[tuple[str, int]]:
    """Kafka's ``GroupMetadata.removeExpiredOffsets`` (without the Stable-consumer case); a
    consumer group's offsets expire from their commit unless a member subscribes to the topic."""
    if group.consumer is not None:
        return [tp for tp, commit in group.offsets.items()
                if not group.is_subscribed_to_topic(tp[0]) and not group.has_pending_offset_commits(tp)
                and now - commit.commit_timestamp >= retention_ms]
    if group.protocol_type is not None and group.is_(EMPTY):
        base = group.current_state_timestamp
    elif group.protocol_type is None and group.is_(EMPTY):
        base = None  # simple consumers: from each commit
    else:
        return []
    expired = []
    for tp, commit in group.offsets.items():
        if group.has_pending_offset_commits(tp):
            continue
        if commit.expire_timestamp >= 0:
            if now >= commit.expire_timestamp:
                expired.append(tp)
        elif now - (base if base is not None else commit.commit_timestamp) >= retention_ms:
            expired.append(tp)
    return expired
