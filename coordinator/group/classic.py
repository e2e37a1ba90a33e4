"""Classic groups: JoinGroup, SyncGroup, Heartbeat and LeaveGroup, and the rebalance protocol.

Owns the membership of classic groups (Kafka's ``ClassicGroup`` handling in
``GroupMetadataManager``, formerly ``kafka.coordinator.group.GroupCoordinator``), method by
method; the Kafka method a piece of code mirrors is named in its docstring. The groups
themselves, their partitions, loading and the log belong to the
:class:`~coordinator.group.coordinator.GroupCoordinator` (``self.c``); a classic group's offset
commits are validated here and stored by :mod:`.offsets`.

Concurrency: everything runs on the event loop. A parked JoinGroup or SyncGroup awaits a future
kept on its member (Kafka's ``awaitingJoinCallback`` / ``awaitingSyncCallback``), so it only
holds its own connection. Kafka's purgatories become timers on the coordinator's clock (the
event loop's, or a unit test's fake clock, :class:`coordinator.runtime.ManualTimer`): the session
timeout of each member, the rebalance (DelayedJoin / InitialDelayedJoin), the pending-SyncGroup
expiry (DelayedSync) and the MEMBER_ID_REQUIRED pending-member expiry. A group's metadata is
stored with acks=all before its members are answered, and the append's completion checks that
the group is still in the generation that wrote it, as Kafka's callbacks do.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import structlog

from protocol.errors import ErrorCode

from ..runtime import TimerHandle, error_name
from .extension import CoordinatorPart
from .metadata import GroupMetadataValue, MemberMetadataValue, group_metadata_record
from .state import GroupMetadata, GroupState, MemberMetadata, now_ms

log = structlog.get_logger("coordinator.group")

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

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


def safe_metadata(member: MemberMetadata, protocol: str | None) -> bytes:
    try:
        return member.metadata(protocol)
    except KeyError:
        return b""


@dataclass(slots=True)
class _DelayedJoin:
    """A pending rebalance completion: Kafka's DelayedJoin or (initial=True) InitialDelayedJoin."""

    handle: TimerHandle | None
    initial: bool
    delay_ms: int = 0
    remaining_ms: int = 0


class ClassicGroupManager(CoordinatorPart):
    """The classic groups of one :class:`~coordinator.group.coordinator.GroupCoordinator`."""

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

    def shutdown_group(self, group: GroupMetadata, error: int) -> None:
        """Cancel a group's timers and answer its parked requests (unload or shutdown)."""
        if group.consumer is not None:
            self.c.consumer.forget(group.group_id)
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

    def group_from_value(self, group_id: str, value: GroupMetadataValue) -> GroupMetadata:
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

    # --- timers -------------------------------------------------------------------------------

    def schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata,
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
            self.schedule_heartbeat(group, member)
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
                self.schedule_heartbeat(group, member)

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
        error = self.c.validate_group_status(group_id, allow_empty=False)
        if error:
            return join_error(member_id, error)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return join_error(member_id, ErrorCode.invalid_session_timeout)
        if self.c.other_owner(group_id) is not None:
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
            self.c.consumer.forget(group_id)
            tombstones = self.c.consumer.tombstone_records(group.consumer)
            group.consumer = None
            self.tasks.spawn(self.c.append(group_id, tombstones))
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
        self.schedule_heartbeat(group, member)
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
        self.schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
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
        error = self.c.validate_group_status(group_id, allow_empty=False)
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
            self.schedule_heartbeat(group, member)
        return None

    # --- Heartbeat, LeaveGroup ----------------------------------------------------------------

    def heartbeat(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int) -> int:
        """Kafka's ``handleHeartbeat``."""
        error = self.c.validate_group_status(group_id, allow_empty=False)
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
        self.schedule_heartbeat(group, group.get(member_id))
        if group.is_(PREPARING):
            return ErrorCode.rebalance_in_progress
        return 0

    def leave_group(self, *, group_id: str, members: list[tuple[str, str | None]],
                    reason: str | None = None) -> tuple[int, list[tuple[str, str | None, int]]]:
        """Kafka's ``handleLeaveGroup``: (top-level error, per member (id, instance id, error))."""
        error = self.c.validate_group_status(group_id, allow_empty=False)
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

    def validate_offset_commit(self, group: GroupMetadata, generation_id: int, member_id: str,
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

    async def _store_group(self, group: GroupMetadata, assignment: dict[str, bytes]) -> int:
        """Kafka's ``storeGroup``: append the group's metadata; 0 or the error for the caller."""
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "", generation=group.generation_id,
            protocol=group.protocol_name, leader=group.leader_id,
            current_state_timestamp=group.current_state_timestamp or now_ms(),
            members=[MemberMetadataValue(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                         m.rebalance_timeout_ms, m.session_timeout_ms,
                                         safe_metadata(m, group.protocol_name),
                                         assignment.get(m.member_id, b""))
                     for m in group.members.values()] if group.protocol_name is not None else [])
        error, _ = await self.c.append(group.group_id, [group_metadata_record(group.group_id, value)])
        if error:
            log.warning("group_metadata_append_failed", group=group.group_id, generation=group.generation_id,
                        error=error_name(error))
            return error
        return 0
