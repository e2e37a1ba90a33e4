"""Share-group records in ``__consumer_offsets``: Kafka's schemas, byte for byte.

Owns the encoding and decoding of the six record types Kafka 4.3.1's group coordinator writes
for a share group (``group-coordinator/src/main/resources/common/message/ShareGroup*.json``).
A key is an int16 record type (the schema's ``apiKey``) followed by its non-flexible fields; a
value is an int16 version (0) followed by flexible fields (compact strings and arrays, tagged
fields at the end); a tombstone is a null value:

- 10 ``ShareGroupMemberMetadata`` (group, member) -> rackId?, clientId, clientHost, subscribedTopicNames
- 11 ``ShareGroupMetadata`` (group) -> epoch, metadataHash
- 12 ``ShareGroupTargetAssignmentMetadata`` (group) -> assignmentEpoch, tag 0 assignmentTimestamp
- 13 ``ShareGroupTargetAssignmentMember`` (group, member) -> [topicId, [partition]]
- 14 ``ShareGroupCurrentMemberAssignment`` (group, member) -> memberEpoch, previousMemberEpoch,
  state (int8), [topicId, [partition]]
- 15 ``ShareGroupStatePartitionMetadata`` (group) -> initializing [topicId, name, [partition]],
  initialized [topicId, name, [partition]], deleting [topicId, name]

Differs from Kafka: the ``metadataHash`` we write is our own 64-bit digest of the subscribed
topics (Kafka's is a Murmur3 over its metadata image); it is only ever compared with itself.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from coordinator.group.record_codec import RecordFormatError, RecordReader, RecordWriter

MEMBER_METADATA, GROUP_METADATA, TARGET_ASSIGNMENT_METADATA = 10, 11, 12
TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT, STATE_PARTITION_METADATA = 13, 14, 15
SHARE_RECORD_TYPES = frozenset(range(10, 16))
MEMBER_STATE_STABLE = 0  # Kafka's MemberState.STABLE: share members never revoke

# topic id -> partitions
Assignment = dict[uuid.UUID, frozenset[int]]

_I64 = struct.Struct(">q")


@dataclass(slots=True, frozen=True)
class ShareRecordKey:
    record_type: int
    group_id: str
    member_id: str | None = None


@dataclass(slots=True)
class MemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]


@dataclass(slots=True)
class GroupMetadataValue:
    epoch: int
    metadata_hash: int


@dataclass(slots=True)
class TargetAssignmentMetadataValue:
    assignment_epoch: int
    assignment_timestamp: int = 0


@dataclass(slots=True)
class CurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: Assignment


@dataclass(slots=True)
class TopicPartitionsInfo:
    topic_id: uuid.UUID
    topic_name: str
    partitions: frozenset[int] = frozenset()


@dataclass(slots=True)
class StatePartitionMetadataValue:
    initializing: list[TopicPartitionsInfo] = field(default_factory=list)
    initialized: list[TopicPartitionsInfo] = field(default_factory=list)
    deleting: list[TopicPartitionsInfo] = field(default_factory=list)


# --- writing ---------------------------------------------------------------------------------

def _key(record_type: int, group_id: str, member_id: str | None = None) -> bytes:
    w = RecordWriter().i16(record_type).string(group_id)
    if member_id is not None:
        w.string(member_id)
    return bytes(w.out)


def _assignment(w: RecordWriter, assignment: Assignment) -> None:
    items = sorted(assignment.items(), key=lambda kv: kv[0].bytes)
    w.uvarint(len(items) + 1)
    for topic_id, partitions in items:
        w.uuid(topic_id).int32s(partitions).no_tags()


def _topics_info(w: RecordWriter, topics: list[TopicPartitionsInfo], with_partitions: bool) -> None:
    w.uvarint(len(topics) + 1)
    for t in topics:
        w.uuid(t.topic_id).compact_string(t.topic_name)
        if with_partitions:
            w.int32s(t.partitions)
        w.no_tags()


Record = tuple[bytes, bytes | None]


def member_metadata_record(group_id: str, member_id: str, value: MemberMetadataValue | None) -> Record:
    if value is None:
        return _key(MEMBER_METADATA, group_id, member_id), None
    w = RecordWriter().i16(0).compact_string(value.rack_id).compact_string(value.client_id)
    w.compact_string(value.client_host).uvarint(len(value.subscribed_topic_names) + 1)
    for name in value.subscribed_topic_names:
        w.compact_string(name)
    return _key(MEMBER_METADATA, group_id, member_id), bytes(w.no_tags().out)


def group_metadata_record(group_id: str, value: GroupMetadataValue | None) -> Record:
    if value is None:
        return _key(GROUP_METADATA, group_id), None
    return _key(GROUP_METADATA, group_id), bytes(RecordWriter().i16(0).i32(value.epoch).i64(value.metadata_hash)
                                                 .no_tags().out)


def target_assignment_metadata_record(group_id: str, value: TargetAssignmentMetadataValue | None) -> Record:
    if value is None:
        return _key(TARGET_ASSIGNMENT_METADATA, group_id), None
    w = RecordWriter().i16(0).i32(value.assignment_epoch)
    if value.assignment_timestamp:
        w.uvarint(1).uvarint(0).uvarint(8).i64(value.assignment_timestamp)  # tag 0, 8 bytes
    else:
        w.no_tags()
    return _key(TARGET_ASSIGNMENT_METADATA, group_id), bytes(w.out)


def target_assignment_member_record(group_id: str, member_id: str, assignment: Assignment | None) -> Record:
    if assignment is None:
        return _key(TARGET_ASSIGNMENT_MEMBER, group_id, member_id), None
    w = RecordWriter().i16(0)
    _assignment(w, assignment)
    return _key(TARGET_ASSIGNMENT_MEMBER, group_id, member_id), bytes(w.no_tags().out)


def current_member_assignment_record(group_id: str, member_id: str,
                                     value: CurrentMemberAssignmentValue | None) -> Record:
    if value is None:
        return _key(CURRENT_MEMBER_ASSIGNMENT, group_id, member_id), None
    w = RecordWriter().i16(0).i32(value.member_epoch).i32(value.previous_member_epoch).i8(value.state)
    _assignment(w, value.assigned_partitions)
    return _key(CURRENT_MEMBER_ASSIGNMENT, group_id, member_id), bytes(w.no_tags().out)


def state_partition_metadata_record(group_id: str, value: StatePartitionMetadataValue | None) -> Record:
    if value is None:
        return _key(STATE_PARTITION_METADATA, group_id), None
    w = RecordWriter().i16(0)
    _topics_info(w, value.initializing, True)
    _topics_info(w, value.initialized, True)
    _topics_info(w, value.deleting, False)
    return _key(STATE_PARTITION_METADATA, group_id), bytes(w.no_tags().out)


# --- reading ---------------------------------------------------------------------------------

def decode_key(buf: bytes) -> ShareRecordKey | None:
    """The key of a share-group record; None for any other ``__consumer_offsets`` record."""
    r = RecordReader(buf)
    record_type = r.i16()
    if record_type not in SHARE_RECORD_TYPES:
        return None
    group_id = r.string()
    member_id = r.string() if record_type in (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER,
                                              CURRENT_MEMBER_ASSIGNMENT) else None
    return ShareRecordKey(record_type, group_id, member_id)


def _value_reader(buf: bytes) -> RecordReader:
    r = RecordReader(buf, flexible=True)
    version = r.i16()
    if version != 0:
        raise RecordFormatError(f"unknown share group record value version {version}")
    return r


def _read_assignment(r: RecordReader) -> Assignment:
    out: Assignment = {}
    for _ in range(r.array_len()):
        topic_id = r.uuid()
        out[topic_id] = r.int32s()
        r.tags()
    return out


def _read_topics_info(r: RecordReader, with_partitions: bool) -> list[TopicPartitionsInfo]:
    out = []
    for _ in range(r.array_len()):
        topic_id, name = r.uuid(), r.compact_string() or ""
        partitions = r.int32s() if with_partitions else frozenset()
        r.tags()
        out.append(TopicPartitionsInfo(topic_id, name, partitions))
    return out


def decode_value(record_type: int, buf: bytes):
    """The value of a share-group record of ``record_type``."""
    r = _value_reader(buf)
    if record_type == MEMBER_METADATA:
        rack, client_id, client_host = r.compact_string(), r.compact_string() or "", r.compact_string() or ""
        names = [r.compact_string() or "" for _ in range(r.array_len())]
        value = MemberMetadataValue(rack, client_id, client_host, names)
    elif record_type == GROUP_METADATA:
        value = GroupMetadataValue(r.i32(), r.i64())
    elif record_type == TARGET_ASSIGNMENT_METADATA:
        epoch = r.i32()
        stamp = r.tags().get(0)
        return TargetAssignmentMetadataValue(epoch, _I64.unpack(stamp)[0] if stamp and len(stamp) == 8 else 0)
    elif record_type == TARGET_ASSIGNMENT_MEMBER:
        value = _read_assignment(r)
    elif record_type == CURRENT_MEMBER_ASSIGNMENT:
        epoch, previous, state = r.i32(), r.i32(), r.i8()
        value = CurrentMemberAssignmentValue(epoch, previous, state, _read_assignment(r))
    elif record_type == STATE_PARTITION_METADATA:
        value = StatePartitionMetadataValue(_read_topics_info(r, True), _read_topics_info(r, True),
                                            _read_topics_info(r, False))
    else:
        raise RecordFormatError(f"not a share group record type: {record_type}")
    r.tags()
    return value
