"""Committed offsets of every group type: OffsetCommit, TxnOffsetCommit, OffsetFetch,
OffsetDelete, and the transaction markers that complete transactional offsets.

Owns Kafka's ``OffsetMetadataManager``: offsets are appended to ``__consumer_offsets`` in Kafka's
record format (:mod:`.metadata`) with acks=all and made visible only once durable (pending
meanwhile: UNSTABLE_OFFSET_COMMIT to require_stable fetches). Which group may commit is the
group type's answer (:mod:`.classic`, :mod:`.consumer_coordinator`); the groups, partitions and
log belong to the :class:`~coordinator.group.coordinator.GroupCoordinator` (``self.c``).

Transactional offset commits: ``txn_offset_commit`` validates and appends the offsets in a
transactional batch (producer id/epoch) and parks them in ``GroupMetadata.pending_txn_offsets``;
when the COMMIT/ABORT marker lands on an ``__consumer_offsets`` partition, WriteTxnMarkers calls
``complete_txn_offset_commits``. Loading already applies markers found in the log, and no
marker lands while a partition loads (:meth:`OffsetMetadataManager.accepts_txn_markers`). The
marker may land before a TxnOffsetCommit's own append has been replicated (its producer fenced
by a new incarnation meanwhile): the append's completion then finds its entry gone and leaves it
so, as Kafka's ``onTxnOffsetCommitAppend`` does, and a COMMIT applies only offsets written at
its transaction's producer epoch.

Differs from Kafka: offsets of a Stable group do not expire (only Empty and simple groups'
offsets do, as in Kafka ``offsets.retention.minutes`` after the group emptied).
"""

from __future__ import annotations

import asyncio

import structlog

from protocol.errors import ErrorCode
from protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

from ..runtime import error_name, fault_points
from .extension import CoordinatorPart
from .metadata import OffsetCommitValue, offset_commit_record, partition_for
from .state import GroupMetadata, GroupState, OffsetAndMetadata, now_ms

TXN_OFFSETS_DELAY_FAULT = "group.txn.offsets.delay"

log = structlog.get_logger("coordinator.group")

EMPTY, DEAD, COMPLETING = GroupState.EMPTY, GroupState.DEAD, GroupState.COMPLETING_REBALANCE


class OffsetMetadataManager(CoordinatorPart):
    """The committed and pending offsets of one :class:`~coordinator.group.coordinator.GroupCoordinator`'s groups."""

    async def commit_offsets(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                             generation_id: int, offsets: dict[tuple[str, int], OffsetAndMetadata],
                             api_version: int = 9) -> dict[tuple[str, int], int]:
        """Kafka's ``handleCommitOffsets``: error per partition, after the append."""
        error = self.c.validate_group_status(group_id, allow_empty=True)
        if error:
            return {tp: error for tp in offsets}
        group = self.groups.get(group_id)
        if group is None and self.c.other_owner(group_id) is not None:
            return {tp: ErrorCode.group_id_not_found for tp in offsets}  # "is not a consumer group"
        if group is not None and group.consumer is not None:
            error = self.c.consumer.validate_offset_commit(group.consumer, member_id, generation_id,
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
            error = self.c.classic.validate_offset_commit(group, generation_id, member_id, group_instance_id,
                                                          transactional=False)
            if error:
                return {tp: error for tp in offsets}
            if group.is_(COMPLETING):
                # The member has its JoinGroup answer but not its assignment yet.
                return {tp: ErrorCode.rebalance_in_progress for tp in offsets}
            # Stable or PreparingRebalance: a commit counts as a heartbeat.
            self.c.classic.schedule_heartbeat(group, group.get(member_id))
        return await self._store_offsets(group, offsets)

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
        error = self.c.validate_group_status(group_id, allow_empty=True)
        if error:
            return {tp: error for tp in offsets}
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = GroupMetadata(group_id)
        if group.consumer is not None:
            error = self.c.consumer.validate_offset_commit(group.consumer, member_id, generation_id,
                                                           transactional=True, api_version=-1,
                                                           instance_id=group_instance_id)
        else:
            error = self.c.classic.validate_offset_commit(group, generation_id, member_id, group_instance_id,
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
        return self.c.ownership.status(offsets_partition) == 0

    def complete_txn_offset_commits(self, offsets_partition: int, producer_id: int, is_commit: bool,
                                    producer_epoch: int = -1) -> None:
        """A COMMIT/ABORT marker for ``producer_id`` at ``producer_epoch`` landed on
        ``offsets_partition`` (Kafka's ``scheduleHandleTxnCompletion``): apply or drop its
        pending offsets."""
        n = self.c.num_partitions()
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

        error, base_offset = await self.c.append(group.group_id, records, producer_id=producer_id,
                                                 producer_epoch=producer_epoch, transactional=transactional,
                                                 verification_guard=verification_guard, on_appended=in_local_log,
                                                 too_large=ErrorCode.invalid_commit_offset_size)
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
                results[tp] = error
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
        error = self.c.validate_group_status(group_id, allow_empty=True)
        if error:
            return error, []
        group = self.groups.get(group_id)
        if group is None and self.c.other_owner(group_id) is not None:
            return ErrorCode.group_id_not_found, []  # Kafka: "Group <id> is not a consumer group."
        if group is not None and group.consumer is not None:
            error = self.c.consumer.validate_offset_fetch(group.consumer, member_id, member_epoch)
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
        error = self.c.validate_group_status(group_id, allow_empty=False)
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
            error, base_offset = await self.c.append(group_id, records)
            if error:
                log.warning("offset_delete_append_failed", group=group_id, error=error_name(error))
                return error, {}
            for tp in doomed:
                group.remove_offset(tp, base_offset)
            log.info("offsets_deleted", group=group_id, partitions=len(doomed))
        return 0, results


def _validate_offset_delete(group: GroupMetadata | None) -> int:
    """Kafka's ``ClassicGroup.validateOffsetDelete``: a group with members must use the
    consumer protocol (whose subscriptions say which topics are in use)."""
    if group is None or group.is_(DEAD):
        return ErrorCode.group_id_not_found
    if not group.is_(EMPTY) and not group.uses_consumer_protocol:
        return ErrorCode.non_empty_group
    return 0


def expired_offsets(group: GroupMetadata, now: int, retention_ms: int) -> list[tuple[str, int]]:
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
