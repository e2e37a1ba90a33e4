"""Share-group membership: ShareGroupHeartbeat, ShareGroupDescribe, listing and deleting share
groups (Kafka's ``GroupMetadataManager.shareGroupHeartbeat`` and friends).

Owns the share groups whose ``__consumer_offsets`` partition this broker leads. It lives beside
the classic :class:`~coordinator.group.coordinator.GroupCoordinator`, which hands it the
partition's ownership, its writes and the records found at load time
(:class:`coordinator.group.extension.GroupTypeOwner`); a group id belongs to one group type.

Every change is a list of records (:mod:`.records`) appended with acks=all and then replayed
into the group (:meth:`ShareGroup.replay`), the same code a load runs, one write per group at
a time. A heartbeat: the member joins with epoch 0 and its own member id (KIP-932: the client
generates it), a changed subscription or changed topic metadata bumps the group epoch, a group
epoch above the assignment epoch recomputes the target assignment (:mod:`.assignor`), and the
member is reconciled to it at once (share groups revoke nothing). A member is fenced when it
leaves (epoch -1) or misses ``share.session.timeout.ms``.

Differs from Kafka: Kafka first initializes the share-partition state of newly assigned
partitions through the persister (InitializeShareGroupState) and only assigns them once that
completed, so a first heartbeat usually comes back with an empty assignment; here the data path
initializes a share-partition lazily on its first ShareFetch (from ``share.auto.offset.reset``),
so the partitions are recorded as initialized (``ShareGroupStatePartitionMetadata``) and
assigned in the same write. The target assignment is computed on the heartbeat that needs it
(Kafka may delay it by ``group.share.assignment.interval.ms``).
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from coordinator.runtime import BackgroundTasks, CoordinatorTimer, error_name
from coordinator.services import ConfigReader
from protocol.errors import ErrorCode

from . import records as rec
from .assignor import ASSIGNOR_NAME, assign
from .group import GROUP_TYPE, PROTOCOL_TYPE, ShareGroup, ShareGroupMember, ShareGroupState

log = structlog.get_logger("coordinator.share")

LEAVE_GROUP_MEMBER_EPOCH = -1


class ShareStateManager(Protocol):
    """What membership needs from the share-partition data path (branch share-fetch)."""

    async def delete_group_state(self, group_id: str) -> None:
        """Forget every share-partition state of ``group_id`` (DeleteGroups)."""

    def group_state_exists(self, group_id: str) -> bool:
        """Whether any share-partition state of ``group_id`` exists."""


class NoShareState:
    """The default until the data path is wired in: there is no share-partition state."""

    async def delete_group_state(self, group_id: str) -> None:
        return None

    def group_state_exists(self, group_id: str) -> bool:
        return False


class ShareGroupServices(ConfigReader, Protocol):
    def group_config_value(self, group_id: str, name: str) -> Any:
        """The effective value of a group config (``share.session.timeout.ms``...): the group's
        override set with IncrementalAlterConfigs, else the broker's ``group.share.*`` value."""

    def topic_info(self, name: str) -> tuple[uuid.UUID, int] | None:
        """(topic id, partition count) of an existing topic."""

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id, None if it does not exist."""


class GroupHost(Protocol):
    """What the classic group coordinator lends the share groups living beside it."""

    def coordinator_error(self, group_id: str) -> int:
        """0 when this broker coordinates ``group_id`` and its partition is loaded."""

    def owns_classic_group(self, group_id: str) -> bool:
        """Whether ``group_id`` is a classic group."""

    def partition_of(self, group_id: str) -> int | None:
        """The group's ``__consumer_offsets`` partition, None if the topic does not exist."""

    async def append(self, group_id: str, records: list[rec.Record]) -> tuple[int, int]:
        """Append to the group's partition with acks=all: (0, base offset) or (the error the
        coordinator answers, e.g. COORDINATOR_NOT_AVAILABLE for too few replicas, -1)."""

    @property
    def timer(self) -> CoordinatorTimer:
        """The coordinator's timers (the share members' sessions run on them too)."""


class ShareGroupError(Exception):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True)
class _Write:
    """Records to append, with their decoded form to replay once they are durable."""

    items: list[tuple[rec.ShareRecordKey, Any, rec.Record]]

    def add(self, record: rec.Record) -> None:
        key_bytes, value_bytes = record
        key = rec.decode_key(key_bytes)
        value = None if value_bytes is None else rec.decode_value(key.record_type, value_bytes)
        self.items.append((key, value, record))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _metadata_hash(topics: dict[str, tuple[uuid.UUID, int]]) -> int:
    """A signed 64-bit digest of the subscribed topics that exist (0 for none, as Kafka)."""
    if not topics:
        return 0
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(topics):
        topic_id, partitions = topics[name]
        h.update(f"{name}\0{topic_id}\0{partitions}\0".encode())
    return int.from_bytes(h.digest(), "big", signed=True)


def _invalid(message: str) -> ShareGroupError:
    return ShareGroupError(ErrorCode.invalid_request, message)


def validate_heartbeat(group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                       subscribed_topic_names: list[str] | None) -> None:
    """Kafka's ``throwIfShareGroupHeartbeatRequestIsInvalid`` (GroupCoordinatorService)."""
    if member_id == "":
        raise _invalid("MemberId can't be empty.")
    if group_id == "":
        raise _invalid("GroupId can't be empty.")
    if rack_id == "":
        raise _invalid("RackId can't be empty.")
    if member_epoch == 0:
        if not subscribed_topic_names:
            raise _invalid("SubscribedTopicNames must be set in first request.")
    elif member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise _invalid("MemberEpoch is invalid.")


class ShareGroupCoordinator:
    def __init__(self, host: GroupHost, services: ShareGroupServices,
                 state: ShareStateManager | None = None) -> None:
        self.host = host
        self.s = services
        self.state: ShareStateManager = state or NoShareState()
        self.groups: dict[str, ShareGroup] = {}
        self.tasks = BackgroundTasks("share-groups")

    # --- configuration ---------------------------------------------------------------------

    def session_timeout_ms(self, group_id: str) -> int:
        return self.s.group_config_value(group_id, "share.session.timeout.ms")

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.s.group_config_value(group_id, "share.heartbeat.interval.ms")

    # --- group lookup (a group id belongs to one type) -------------------------------------

    def owns(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and group.group_epoch > 0

    def _group_or_maybe_create(self, group_id: str, create: bool) -> ShareGroup:
        """Kafka's ``getOrMaybeCreateShareGroup``."""
        group = self.groups.get(group_id)
        if self.host.owns_classic_group(group_id):
            raise ShareGroupError(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
        if group is None:
            if not create:
                raise ShareGroupError(ErrorCode.group_id_not_found, f"Share group {group_id} not found.")
            group = self.groups[group_id] = ShareGroup(group_id)  # forgotten again if its first write fails
        return group

    def _described_group(self, group_id: str) -> ShareGroup:
        """Kafka's ``shareGroup(groupId, committedOffset)``."""
        if self.owns(group_id):
            return self.groups[group_id]
        if self.host.owns_classic_group(group_id):
            raise ShareGroupError(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
        raise ShareGroupError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")

    # --- ShareGroupHeartbeat ------------------------------------------------------------------

    async def heartbeat(self, *, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                        subscribed_topic_names: list[str] | None, client_id: str, client_host: str) -> dict:
        """Kafka's ``GroupCoordinatorService.shareGroupHeartbeat``: the response fields."""
        try:
            validate_heartbeat(group_id, member_id, member_epoch, rack_id, subscribed_topic_names)
            error = self.host.coordinator_error(group_id)
            if error:
                raise ShareGroupError(error)
            if member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return await self._leave(group_id, member_id)
            group = self._group_or_maybe_create(group_id, create=member_epoch == 0)
            async with group.lock:
                return await self._heartbeat(group, member_id, member_epoch, rack_id,
                                             subscribed_topic_names, client_id, client_host)
        except ShareGroupError as exc:
            return {"error_code": exc.code, "error_message": exc.message, "member_id": None,
                    "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}

    async def _heartbeat(self, group: ShareGroup, member_id: str, member_epoch: int, rack_id: str | None,
                         subscribed_topic_names: list[str] | None, client_id: str, client_host: str) -> dict:
        """Kafka's private ``shareGroupHeartbeat``: member, group epoch, target, reconcile."""
        if self.groups.get(group.group_id) is not group:  # unloaded or deleted while we waited
            raise ShareGroupError(self.host.coordinator_error(group.group_id) or ErrorCode.not_coordinator)
        self._throw_if_full(group, member_id)
        member = self._member_or_maybe_subscribe(group, member_id, member_epoch, create=member_epoch == 0)
        assigned_before = member.assigned_partitions  # replaced, never mutated, by the replay
        updated = ShareGroupMember(
            member_id, member.member_epoch, member.previous_member_epoch,
            rack_id if rack_id is not None else member.rack_id, client_id, client_host,
            frozenset(subscribed_topic_names) if subscribed_topic_names is not None
            else member.subscribed_topic_names, member.assigned_partitions)
        write = _Write([])
        is_new = member_id not in group.members
        bump = False
        if is_new or not updated.same_metadata(member):
            write.add(rec.member_metadata_record(group.group_id, member_id, updated.metadata_value()))
            if updated.subscribed_topic_names != member.subscribed_topic_names or is_new:
                bump = True
        subscriptions = {mid: m.subscribed_topic_names for mid, m in group.members.items()}
        subscriptions[member_id] = updated.subscribed_topic_names
        topics = self._topics(frozenset().union(*subscriptions.values()))
        metadata_hash = _metadata_hash(topics)
        group_epoch = group.group_epoch
        if bump or metadata_hash != group.metadata_hash:
            group_epoch += 1
            write.add(rec.group_metadata_record(group.group_id, rec.GroupMetadataValue(group_epoch, metadata_hash)))
            log.info("share_group_epoch_bumped", group=group.group_id, epoch=group_epoch)
        if group_epoch > group.assignment_epoch:
            target = self._update_target_assignment(group, group_epoch, subscriptions, topics, write)
            target_epoch = group_epoch
        else:
            target = group.target_assignment
            target_epoch = group.assignment_epoch
        member_target = target.get(member_id, {})
        if bump or updated.member_epoch != target_epoch:
            reconciled = rec.CurrentMemberAssignmentValue(target_epoch, updated.member_epoch,
                                                          rec.MEMBER_STATE_STABLE, member_target)
            if (target_epoch, member_target) != (updated.member_epoch, updated.assigned_partitions) or is_new:
                write.add(rec.current_member_assignment_record(group.group_id, member_id, reconciled))
        await self._commit(group, write)
        current = group.members[member_id]
        self._schedule_session_timeout(group, current)
        response = {"error_code": 0, "error_message": None, "member_id": member_id,
                    "member_epoch": current.member_epoch,
                    "heartbeat_interval": self.heartbeat_interval_ms(group.group_id), "assignment": None}
        if member_epoch == 0 or subscribed_topic_names is not None or \
                current.assigned_partitions != assigned_before:
            response["assignment"] = {"topic_partitions": [
                {"topic_id": t, "partitions": sorted(ps)}
                for t, ps in sorted(current.assigned_partitions.items(), key=lambda kv: str(kv[0]))]}
        return response

    def _throw_if_full(self, group: ShareGroup, member_id: str) -> None:
        """Kafka's ``throwIfShareGroupIsFull``."""
        max_size = self.s.config("group.share.max.size")
        if len(group.members) >= max_size and (member_id == "" or member_id not in group.members):
            raise ShareGroupError(ErrorCode.group_max_size_reached,
                                  f"The share group has reached its maximum capacity of {max_size} members.")

    @staticmethod
    def _member_or_maybe_subscribe(group: ShareGroup, member_id: str, member_epoch: int,
                                   create: bool) -> ShareGroupMember:
        """Kafka's ``getOrMaybeSubscribeShareGroupMember`` + ``throwIfShareGroupMemberEpochIsInvalid``
        (epoch 0, a rejoin, is not checked)."""
        member = group.members.get(member_id)
        if member is None:
            if not create:
                raise ShareGroupError(ErrorCode.unknown_member_id,
                                      f"Member {member_id} is not a member of group {group.group_id}.")
            log.info("share_group_member_joining", group=group.group_id, member_id=member_id)
            return ShareGroupMember(member_id)
        if member_epoch == 0:   # a rejoin with the same member id (KIP-1082) is not fenced
            return member
        if member_epoch > member.member_epoch:
            raise ShareGroupError(
                ErrorCode.fenced_member_epoch,
                f"The share group member has a greater member epoch ({member_epoch}) than the one known by "
                f"the group coordinator ({member.member_epoch}). The member must abandon all its "
                "partitions and rejoin.")
        if member_epoch < member.member_epoch and member_epoch != member.previous_member_epoch:
            raise ShareGroupError(
                ErrorCode.fenced_member_epoch,
                f"The share group member has a smaller member epoch ({member_epoch}) than the one known by "
                f"the group coordinator ({member.member_epoch}), and it does not match the previous member "
                f"epoch ({member.previous_member_epoch}). The member must abandon all its partitions and rejoin.")
        return member

    def _topics(self, names: Iterable[str]) -> dict[str, tuple[uuid.UUID, int]]:
        out = {}
        for name in names:
            meta = self.s.topic_info(name)
            if meta is not None:
                out[name] = meta
        return out

    def _update_target_assignment(self, group: ShareGroup, group_epoch: int,
                                  subscriptions: dict[str, frozenset[str]],
                                  topics: dict[str, tuple[uuid.UUID, int]], write: _Write) -> dict[str, rec.Assignment]:
        """Kafka's ``updateTargetAssignment``: the changed members' targets, then the epoch;
        and the newly assigned partitions recorded as initialized."""
        target = assign(subscriptions, topics, group.target_assignment)
        for member_id, assignment in sorted(target.items()):
            if group.target_assignment.get(member_id) != assignment:
                write.add(rec.target_assignment_member_record(group.group_id, member_id, assignment))
        write.add(rec.target_assignment_metadata_record(
            group.group_id, rec.TargetAssignmentMetadataValue(group_epoch, _now_ms())))
        self._record_initialized(group, topics, write)
        log.info("share_group_target_assignment", group=group.group_id, epoch=group_epoch, members=len(target))
        return target

    @staticmethod
    def _record_initialized(group: ShareGroup, topics: dict[str, tuple[uuid.UUID, int]], write: _Write) -> None:
        """``ShareGroupStatePartitionMetadata``: every partition of a subscribed topic is
        initialized (lazily, by the data path) from the moment it can be assigned."""
        initialized = dict(group.initialized_topics())
        names = {t.topic_id: t.topic_name for t in (group.state_partitions.initialized
                                                     if group.state_partitions else [])}
        changed = False
        for name, (topic_id, count) in topics.items():
            partitions = initialized.get(topic_id, frozenset()) | frozenset(range(count))
            if partitions != initialized.get(topic_id):
                initialized[topic_id], names[topic_id], changed = partitions, name, True
        if changed:
            value = rec.StatePartitionMetadataValue(initialized=[
                rec.TopicPartitionsInfo(t, names[t], ps) for t, ps in sorted(initialized.items(), key=lambda kv: str(kv[0]))])
            write.add(rec.state_partition_metadata_record(group.group_id, value))

    # --- leaving and fencing ------------------------------------------------------------------

    async def _leave(self, group_id: str, member_id: str) -> dict:
        """Kafka's ``shareGroupLeave``."""
        group = self._group_or_maybe_create(group_id, create=False)
        async with group.lock:
            member = group.members.get(member_id)
            if member is None or self.groups.get(group_id) is not group:
                raise ShareGroupError(ErrorCode.unknown_member_id,
                                      f"Member {member_id} is not a member of group {group_id}.")
            log.info("share_group_member_leaving", group=group_id, member_id=member_id)
            await self._fence(group, member)
        return {"error_code": 0, "error_message": None, "member_id": member_id,
                "member_epoch": LEAVE_GROUP_MEMBER_EPOCH, "heartbeat_interval": 0, "assignment": None}

    async def _fence(self, group: ShareGroup, member: ShareGroupMember) -> None:
        """Kafka's ``shareGroupFenceMember``: the member's records tombstoned, the epoch bumped."""
        group_id, member_id = group.group_id, member.member_id
        write = _Write([])
        write.add(rec.current_member_assignment_record(group_id, member_id, None))
        write.add(rec.target_assignment_member_record(group_id, member_id, None))
        write.add(rec.member_metadata_record(group_id, member_id, None))
        remaining = {mid: m.subscribed_topic_names for mid, m in group.members.items() if mid != member_id}
        metadata_hash = _metadata_hash(self._topics(frozenset().union(*remaining.values())))
        write.add(rec.group_metadata_record(group_id, rec.GroupMetadataValue(group.group_epoch + 1, metadata_hash)))
        if member.session_timer is not None:
            member.session_timer.cancel()
            member.session_timer = None
        await self._commit(group, write)

    def _schedule_session_timeout(self, group: ShareGroup, member: ShareGroupMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        timeout_ms = self.session_timeout_ms(group.group_id)
        member.session_timer = self.host.timer.schedule(timeout_ms, self._on_session_timeout, group, member,
                                                        timeout_ms)

    def _on_session_timeout(self, group: ShareGroup, member: ShareGroupMember, timeout_ms: int) -> None:
        member.session_timer = None
        self.tasks.spawn(self._expire_member(group, member, timeout_ms))

    async def _expire_member(self, group: ShareGroup, member: ShareGroupMember, timeout_ms: int) -> None:
        async with group.lock:
            if self.groups.get(group.group_id) is not group or group.members.get(member.member_id) is not member:
                return
            if member.session_timer is not None:  # it heartbeated while we waited for the lock
                return
            log.info("share_group_member_session_expired", group=group.group_id, member_id=member.member_id,
                     session_timeout_ms=timeout_ms)
            try:
                await self._fence(group, member)
            except ShareGroupError as exc:
                log.warning("share_group_fence_failed", group=group.group_id, member_id=member.member_id,
                            error=error_name(exc.code))

    # --- writing ------------------------------------------------------------------------------

    async def _commit(self, group: ShareGroup, write: _Write) -> None:
        """Append the records, then replay them into the group; ShareGroupError on failure."""
        if write.items:
            error, _ = await self.host.append(group.group_id, [r for _, _, r in write.items])
            if error:
                log.warning("share_group_append_failed", group=group.group_id, error=error_name(error))
                if group.group_epoch == 0 and self.groups.get(group.group_id) is group:
                    del self.groups[group.group_id]  # a group never written does not exist
                raise ShareGroupError(error)
        for key, value, _ in write.items:
            group.replay(key, value)

    # --- loading ------------------------------------------------------------------------------

    def replay_loaded(self, records: Iterable[rec.Record]) -> int:
        """Build the share groups from one partition's records, in log order (Kafka's replay
        of share-group records, then ``onLoaded``: session timeouts for every member)."""
        touched: set[str] = set()
        for key_bytes, value_bytes in records:
            key = rec.decode_key(key_bytes)
            if key is None:
                continue
            value = None if value_bytes is None else rec.decode_value(key.record_type, value_bytes)
            if key.record_type == rec.GROUP_METADATA and value is None:
                self._forget(key.group_id)
                touched.discard(key.group_id)
                continue
            group = self.groups.get(key.group_id)
            if group is None:
                if value is None:
                    continue  # a tombstone of a group already gone
                group = self.groups[key.group_id] = ShareGroup(key.group_id)
            group.replay(key, value)
            touched.add(key.group_id)
        for group_id in list(touched):
            group = self.groups[group_id]
            if group.group_epoch == 0 and not group.members:
                del self.groups[group_id]
                touched.discard(group_id)
                continue
            for member in group.members.values():
                if member.session_timer is None:
                    timeout_ms = self.session_timeout_ms(group_id)
                    member.session_timer = self.host.timer.schedule(timeout_ms, self._on_session_timeout,
                                                                    group, member, timeout_ms)
        return len(touched)

    def unload(self, partition: int) -> None:
        """Leadership of ``partition`` moved: forget its share groups."""
        for group_id in [g for g in self.groups if self.host.partition_of(g) == partition]:
            self._forget(group_id)

    def shutdown(self) -> None:
        for group_id in list(self.groups):
            self._forget(group_id)
        self.tasks.cancel()

    def _forget(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is None:
            return
        for member in group.members.values():
            if member.session_timer is not None:
                member.session_timer.cancel()
                member.session_timer = None

    # --- ShareGroupDescribe, ListGroups, DeleteGroups -----------------------------------------

    def describe(self, group_id: str) -> dict:
        """Kafka's ``shareGroupDescribe`` for one group (without authorized operations)."""
        out = {"group_id": group_id, "error_code": 0, "error_message": None, "group_state": "",
               "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": []}
        if group_id == "":
            out["error_code"] = ErrorCode.invalid_group_id
            return out
        try:
            error = self.host.coordinator_error(group_id)
            if error:
                raise ShareGroupError(error)
            group = self._described_group(group_id)
        except ShareGroupError as exc:
            out.update(error_code=exc.code, error_message=exc.message)
            return out
        out.update(group_state=group.state.value, group_epoch=group.group_epoch,
                   assignment_epoch=group.assignment_epoch, assignor_name=ASSIGNOR_NAME,
                   members=[self._describe_member(m) for m in group.members.values()])
        return out

    def _describe_member(self, member: ShareGroupMember) -> dict:
        topics = []
        for topic_id, partitions in sorted(member.assigned_partitions.items(), key=lambda kv: str(kv[0])):
            name = self.s.topic_name(topic_id)
            if name is not None:  # Kafka leaves out topics no longer in the metadata image
                topics.append({"topic_id": topic_id, "topic_name": name, "partitions": sorted(partitions)})
        return {"member_id": member.member_id, "rack_id": member.rack_id, "member_epoch": member.member_epoch,
                "client_id": member.client_id, "client_host": member.client_host,
                "subscribed_topic_names": sorted(member.subscribed_topic_names),
                "assignment": {"topic_partitions": topics}}

    def list_groups(self, states: set[str] | None, types: set[str] | None) -> list[dict]:
        """The share groups for ListGroups (filters case-insensitive, as Kafka)."""
        if types and GROUP_TYPE not in {t.lower() for t in types}:
            return []
        wanted = {s.lower() for s in states} if states else None
        return [{"group_id": g.group_id, "protocol_type": PROTOCOL_TYPE, "group_state": g.state.value,
                 "group_type": GROUP_TYPE}
                for g in self.groups.values()
                if g.group_epoch > 0 and (wanted is None or g.state.value.lower() in wanted)]

    async def delete_group(self, group_id: str) -> int:
        """DeleteGroups of a share group: NON_EMPTY_GROUP while it has members; else its
        share-partition state is deleted, then its records are tombstoned and it is forgotten."""
        group = self.groups.get(group_id)
        if group is None or not self.owns(group_id):
            return ErrorCode.group_id_not_found
        async with group.lock:
            if self.groups.get(group_id) is not group:
                return ErrorCode.group_id_not_found
            if group.members:
                return ErrorCode.non_empty_group
            try:
                await self.state.delete_group_state(group_id)
            except Exception:
                log.exception("share_group_state_delete_failed", group=group_id)
                return ErrorCode.unknown_server_error
            records = [rec.target_assignment_metadata_record(group_id, None)]
            if group.state_partitions is not None:
                records.append(rec.state_partition_metadata_record(group_id, None))
            records.append(rec.group_metadata_record(group_id, None))
            error, _ = await self.host.append(group_id, records)
            if error:
                log.warning("share_group_delete_append_failed", group=group_id, error=error_name(error))
                return error
            group.transition_to(ShareGroupState.DEAD)
            self._forget(group_id)
        log.info("share_group_deleted", group=group_id)
        return 0
