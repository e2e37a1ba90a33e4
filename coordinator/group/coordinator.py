"""The group coordinator service: which groups this broker coordinates, their
``__consumer_offsets`` partitions, loading, the log, and the admin APIs across group types.

Owns: the groups whose ``__consumer_offsets`` partition this broker leads (created on first
use, as Kafka does on FindCoordinator), rebuilt from it when this broker becomes the partition's
leader (:mod:`.loader`; ``COORDINATOR_LOAD_IN_PROGRESS`` until the partition is loaded,
``NOT_COORDINATOR`` once leadership moved, see :mod:`coordinator.runtime`); appending a
group's records with acks=all, where the completion checks that the partition is still owned at
the epoch the write was decided under; routing a group id to its type; DescribeGroups,
ListGroups, DeleteGroups and the expiry of offsets. Kafka 4's split, as
``GroupCoordinatorService`` / ``GroupCoordinatorShard`` delegate:

- :mod:`.classic`: classic groups (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, rebalances);
- :mod:`.consumer_coordinator`: KIP-848 consumer groups (ConsumerGroupHeartbeat, ...);
- :mod:`.offsets`: committed and transactional offsets of every group type;
- share groups (:mod:`coordinator.share`) through the :mod:`.extension` interface.

A group id is either a classic group or a consumer group (``GroupMetadata.consumer``), both
kept in ``groups`` with their offsets; the classic APIs answer for a consumer group as Kafka
does. Timers (sessions, rebalances) run on ``timer``: the event loop's, or a unit test's fake
clock (:class:`coordinator.runtime.ManualTimer`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from protocol.errors import ErrorCode, KafkaError
from protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, build_batch

from ..runtime import (
    BackgroundTasks,
    CoordinatorTimer,
    LoadProgress,
    LoopTimer,
    PartitionOwnership,
    append_then_apply,
    ensure_internal_topic,
    error_name,
    load_partition,
)
from .classic import ClassicGroupManager, safe_metadata
from .consumer_coordinator import ConsumerGroupCoordinator
from .extension import GroupTypeOwner
from .loader import LoadedPartition, read_offsets_partition
from .metadata import (
    OFFSETS_TOPIC,
    OffsetCommitValue,
    group_metadata_record,
    offset_commit_record,
    partition_for,
)
from .offsets import OffsetMetadataManager, expired_offsets
from .services import GroupServices
from .state import GroupMetadata, GroupState, OffsetAndMetadata, now_ms

log = structlog.get_logger("coordinator.group")

EMPTY, STABLE, DEAD = GroupState.EMPTY, GroupState.STABLE, GroupState.DEAD


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
        self.tasks = BackgroundTasks("group-coordinator", self.timer)  # writes no request awaits, cleanup
        self.loads = BackgroundTasks("group-coordinator-loads")  # partition loads (``loads.join()``)
        # The other group types sharing these partitions (share groups); see :mod:`.extension`.
        self.other_group_types: list[GroupTypeOwner] = []
        self.classic = ClassicGroupManager(self)
        self.consumer = ConsumerGroupCoordinator(self)
        self.offsets = OffsetMetadataManager(self)

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start answering, and load every ``__consumer_offsets`` partition led here."""
        self.active = True
        led = self.s.led_partitions(OFFSETS_TOPIC)
        elected = [(p, epoch) for p, epoch in sorted(led.items()) if self.ownership.begin_load(p, epoch)]
        if elected:
            self.loads.spawn(self._load_partitions(elected))
        self.tasks.every(self.s.config("offsets.retention.check.interval.ms"), self.cleanup_expired_offsets,
                          minimum_ms=100)

    async def stop(self) -> None:
        self.active = False
        await self.loads.stop()
        await self.tasks.stop()
        for group in list(self.groups.values()):
            self.classic.shutdown_group(group, ErrorCode.not_coordinator)
        self.groups.clear()
        for owner in self.other_group_types:
            owner.shutdown()
        self.ownership.clear()

    def on_become_leader(self, partition: int, epoch: int) -> None:
        """This broker now leads ``__consumer_offsets`` ``partition`` at ``epoch``: load it
        (Kafka's ``onElection``)."""
        if self.ownership.begin_load(partition, epoch):
            self._unload_groups(partition)  # anything left from an older epoch
            self.loads.spawn(self._load_partitions([(partition, epoch)]))

    def on_resign(self, partition: int, epoch: int | None = None) -> None:
        """Leadership of ``partition`` moved away: drop its groups (Kafka's ``onResignation``)."""
        if self.ownership.resign(partition, epoch):
            self._unload_groups(partition)

    def _unload_groups(self, partition: int) -> None:
        n = self.num_partitions()
        unloaded = 0
        for group in list(self.groups.values()):
            if n is not None and partition_for(group.group_id, n) == partition:
                self.classic.shutdown_group(group, ErrorCode.not_coordinator)
                del self.groups[group.group_id]
                unloaded += 1
        for owner in self.other_group_types:
            owner.unload(partition)
        if unloaded:
            log.info("group_partition_unloaded", topic=OFFSETS_TOPIC, partition=partition, groups=unloaded)

    # --- ownership ------------------------------------------------------------------------------

    def num_partitions(self) -> int | None:
        return self.s.partition_count(OFFSETS_TOPIC)

    def _ensure_offsets_topic(self) -> int:
        return ensure_internal_topic(
            self.s, OFFSETS_TOPIC, self.s.config("offsets.topic.num.partitions"),
            {"cleanup.policy": "compact", "segment.bytes": str(self.s.config("offsets.topic.segment.bytes"))},
            self.s.config("offsets.topic.replication.factor"), self.ownership.own)

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self._ensure_offsets_topic())

    def coordinator_error(self, group_id: str) -> int:
        """0 when this broker coordinates ``group_id`` (FindCoordinator), else the error code."""
        return self.validate_group_status(group_id, allow_empty=True)

    def validate_group_status(self, group_id: str | None, *, allow_empty: bool) -> int:
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

    def other_owner(self, group_id: str) -> GroupTypeOwner | None:
        return next((o for o in self.other_group_types if o.owns(group_id)), None)

    def owns_classic_group(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and not group.is_(DEAD)

    def partition_of(self, group_id: str) -> int | None:
        n = self.num_partitions()
        return None if n is None else partition_for(group_id, n)

    # --- loading --------------------------------------------------------------------------------

    async def _load_partitions(self, partitions: list[tuple[int, int]]) -> None:
        """Replay each (partition, epoch) elected here, unless it resigned meanwhile."""
        # One partition gained by an election is logged only if it held something.
        progress = LoadProgress("group_metadata", OFFSETS_TOPIC, len(partitions), quiet=len(partitions) == 1)
        total_groups = total_offsets = 0
        for done, (p, epoch) in enumerate(partitions, 1):
            progress.report(done - 1, groups=total_groups, offsets=total_offsets)
            t0 = time.monotonic()
            try:
                plog = self.s.local_log(OFFSETS_TOPIC, p)
            except KeyError:
                self.ownership.finish_load(p, epoch, False)
                continue
            result = await load_partition(self.ownership, p, epoch, lambda plog=plog: read_offsets_partition(plog),
                                          lambda loaded: (loaded, *self._apply_loaded(loaded)), topic=OFFSETS_TOPIC)
            if result is None:  # failed, or resigned meanwhile
                continue
            loaded, groups, offsets = result
            total_groups += groups
            total_offsets += offsets
            if loaded.records:
                log.debug("group_metadata_partition_loaded", topic=OFFSETS_TOPIC, partition=p, epoch=epoch,
                          records=loaded.records, end_offset=loaded.end_offset, groups=groups,
                          offsets=offsets, skipped=loaded.skipped, progress=f"{done}/{len(partitions)}",
                          seconds=round(time.monotonic() - t0, 3))
        progress.finished(groups=total_groups, offsets=total_offsets)

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
            group = self.classic.group_from_value(group_id, value)
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

    def _install_loaded_group(self, group: GroupMetadata) -> None:
        existing = self.groups.get(group.group_id)
        if existing is not None:
            # A group used by simple consumers meanwhile: keep the live one (Kafka's putIfNotExists).
            log.warning("group_already_cached_during_load", group=group.group_id)
            return
        self.groups[group.group_id] = group
        for member in group.members.values():
            self.classic.schedule_heartbeat(group, member)

    # --- DescribeGroups, ListGroups, DeleteGroups ---------------------------------------------

    def describe_group(self, group_id: str) -> dict:
        """Kafka's ``handleDescribeGroup`` + ``GroupMetadata.summary``."""
        error = self.validate_group_status(group_id, allow_empty=True)
        result = {"error_code": error, "group_id": group_id, "group_state": "", "protocol_type": "",
                  "protocol_data": "", "members": []}
        if error:
            return result
        group = self.groups.get(group_id)
        if group is None or group.consumer is not None:
            result["group_state"] = DEAD.value
            if group is not None or self.other_owner(group_id) is not None:
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
             "member_metadata": safe_metadata(m, group.protocol_name) if stable else b"",
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
            error = self.validate_group_status(group_id, allow_empty=True)
            if error:
                results[group_id] = error
                continue
            group = self.groups.get(group_id)
            other = self.other_owner(group_id) if group is None else None
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
            self.classic.shutdown_group(group, ErrorCode.coordinator_not_available)
            del self.groups[group.group_id]
            # Groups only used for offset storage (generation 0) never wrote metadata.
            if group.consumer is not None:
                records.extend(self.consumer.tombstone_records(group.consumer))
            elif group.generation_id > 0:
                records.append(group_metadata_record(group.group_id, None))
        if not records:
            return 0
        error, _ = await self.append(group.group_id, records)
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
            if group.is_(DEAD) or self.ownership.status(partition_for(group.group_id, self.num_partitions() or 1)):
                continue
            expired = expired_offsets(group, now, retention_ms)
            for tp in expired:
                del group.offsets[tp]
            if expired or (_is_empty(group) and not group.has_offsets() and not group.pending_members):
                removed_total += len(expired)
                if expired:
                    log.info("offsets_expired", group=group.group_id, partitions=len(expired))
                await self._cleanup_group(group, expired)
        return removed_total

    # --- the log --------------------------------------------------------------------------------
    async def append(self, group_id: str, records: list[tuple[bytes, bytes | None]], *,
                      producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                      transactional: bool = False, verification_guard: object | None = None,
                      on_appended: Callable[[int], None] | None = None,
                      too_large: int = ErrorCode.unknown_server_error) -> tuple[int, int]:
        """Append one batch to the group's ``__consumer_offsets`` partition with acks=all, at
        the epoch the partition is owned at now (the runtime's :func:`append_then_apply`; the
        caller applies it on success): (0, base offset), or (the error a coordinator answers,
        -1), NOT_COORDINATOR when the epoch moved while the write was in flight."""
        try:
            partition = self.partition_for(group_id)
        except KafkaError as exc:
            return exc.code, -1
        batch = bytes(build_batch(records, timestamp=now_ms(), producer_id=producer_id,
                                  producer_epoch=producer_epoch, transactional=transactional))
        base_offset = -1

        async def write() -> int:
            nonlocal base_offset
            error, base_offset = await self.s.append_at(
                OFFSETS_TOPIC, partition, batch, self.s.config("offsets.commit.timeout.ms"),
                verification_guard=verification_guard, on_appended=on_appended)
            if error:
                log.info("offsets_topic_append_failed", group=group_id, partition=partition, error=error_name(error))
            return error

        error = await append_then_apply(self.ownership, partition, write, too_large=too_large)
        return error, -1 if error else base_offset


def _is_empty(group: GroupMetadata) -> bool:
    """Empty classic group, or consumer group without members."""
    if group.consumer is not None:
        return not group.consumer.members
    return group.is_(EMPTY)
