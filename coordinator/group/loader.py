"""Replaying a ``__consumer_offsets`` partition: what the group coordinator loads on start.

Owns the pure part of Kafka's ``GroupMetadataManager.doLoadGroupsAndOffsets``: read every batch
of one partition log from its start, last value per key wins, tombstones delete, and offsets
written inside a transaction wait for their producer's COMMIT/ABORT marker (a committed one
replaces a plain commit only if it sits later in the log; a COMMIT applies only offsets written
at its transaction's producer epoch, as the live completion does, which the replay infers:
see :func:`transaction_epoch`). No state and no event loop, so it
runs in a worker thread; :class:`~coordinator.group.coordinator.GroupCoordinator` turns the
result into groups.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from protocol.records import CONTROL_COMMIT, decode_records

from .consumer_records import ConsumerGroupKey, decode_consumer_key, decode_consumer_value
from .metadata import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)

if TYPE_CHECKING:
    from storage.log import Log


@dataclass(slots=True)
class LoadedPartition:
    """What one ``__consumer_offsets`` partition holds, last value per key (built off the loop)."""

    offsets: dict[OffsetCommitKey, tuple[int, OffsetCommitValue]] = field(default_factory=dict)
    groups: dict[str, GroupMetadataValue] = field(default_factory=dict)
    removed_groups: set[str] = field(default_factory=set)
    # producer id -> key -> (log offset, value, producer epoch), until the producer's marker
    pending_txn: dict[int, dict[OffsetCommitKey, tuple[int, OffsetCommitValue, int]]] = \
        field(default_factory=dict)
    # Records of the other group types (share groups, ...), in log order, for their owners.
    other_records: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    # KIP-848 consumer-group records in log order, replayed by the consumer coordinator.
    consumer_records: list[tuple[ConsumerGroupKey, object]] = field(default_factory=list)
    records: int = 0
    skipped: int = 0
    end_offset: int = 0


def transaction_epoch(marker_epoch: int, pending_epochs) -> int:
    """The producer epoch a COMMIT marker's transaction wrote its offsets at. The marker does not
    say which transaction version wrote it: under version 1 its own epoch; under version 2,
    whose coordinator bumps the epoch to write the markers, the one before. The pending
    offsets tell: version 2 never writes at the marker's epoch before that marker."""
    return marker_epoch if any(e == marker_epoch for e in pending_epochs) else marker_epoch - 1


def read_offsets_partition(plog: Log) -> LoadedPartition:
    """Replay one ``__consumer_offsets`` log (Kafka's ``doLoadGroupsAndOffsets``).

    Pure over the log bytes, so it can run in a worker thread: last value per key wins,
    tombstones delete, transactional offsets wait for their producer's marker.
    """
    out = LoadedPartition()
    end = plog.log_end_offset
    out.end_offset = end
    for segment, pos, header in plog.batches(plog.log_start_offset, end):
        buf = segment.read_batch(pos, header)
        _, records = decode_records(buf, 0)
        if header.is_control:
            if records and records[0].key is not None and len(records[0].key) >= 4:
                control_type = struct.unpack_from(">h", records[0].key, 2)[0]
                pending = out.pending_txn.pop(header.producer_id, {})
                if control_type == CONTROL_COMMIT:
                    txn_epoch = transaction_epoch(header.producer_epoch, (e for _, _, e in pending.values()))
                    for key, (log_offset, value, producer_epoch) in pending.items():
                        if producer_epoch < txn_epoch:
                            continue  # an earlier transaction's (as GroupMetadata's completion)
                        current = out.offsets.get(key)
                        if current is None or current[0] < log_offset:
                            out.offsets[key] = (log_offset, value)
            continue
        for rec in records:
            out.records += 1
            if rec.key is None:
                out.skipped += 1
                continue
            key = decode_key(rec.key)
            if isinstance(key, OffsetCommitKey):
                value = None if rec.value is None else decode_offset_commit_value(rec.value)
                if header.is_transactional:
                    pending = out.pending_txn.setdefault(header.producer_id, {})
                    if value is None:
                        pending.pop(key, None)
                    else:
                        pending[key] = (header.base_offset, value, header.producer_epoch)
                elif value is None:
                    out.offsets.pop(key, None)
                    # As Kafka 4's replay: a plain tombstone also drops the key's pending
                    # transactional offsets (OffsetDelete writes one for those too).
                    for pending in out.pending_txn.values():
                        pending.pop(key, None)
                else:
                    out.offsets[key] = (header.base_offset, value)
            elif isinstance(key, GroupMetadataKey):
                if rec.value is None:
                    out.groups.pop(key.group, None)
                    out.removed_groups.add(key.group)
                else:
                    out.groups[key.group] = decode_group_metadata_value(rec.value)
                    out.removed_groups.discard(key.group)
            else:
                consumer_key = decode_consumer_key(rec.key)
                if consumer_key is None:  # share / streams group records: their owners replay them
                    out.other_records.append((rec.key, rec.value))
                    continue
                value = None if rec.value is None else decode_consumer_value(consumer_key.record_type, rec.value)
                if rec.value is not None and value is None:
                    out.skipped += 1  # a type we do not keep (partition metadata, regexes)
                    continue
                out.consumer_records.append((consumer_key, value))
    return out
