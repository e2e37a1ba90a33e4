"""Record codecs for KIP-848 consumer groups in ``__consumer_offsets``, Kafka 4.3.1's schemas.

Owns the encoding of the consumer-group records the coordinator writes and their decoding at
load time. The schemas are Kafka's ``group-coordinator/src/main/resources/common/message``
JSON files as shipped in kafka-group-coordinator-4.3.1.jar: a key is an int16 record type
(the schema's ``apiKey``) followed by the key fields (not flexible); a value is an int16
version (0 for all of these) followed by the fields in the flexible encoding (compact strings
and arrays, tagged fields).

- 3 ``ConsumerGroupMetadata``: key GroupId; value Epoch int32, MetadataHash int64 (tag 0).
- 4 ``ConsumerGroupPartitionMetadata``: replaced by MetadataHash in 4.1 (KIP-1101); Kafka
  4.3.1 no longer writes it and neither do we (a loaded one is skipped).
- 5 ``ConsumerGroupMemberMetadata``: key GroupId, MemberId; value InstanceId?, RackId?,
  ClientId, ClientHost, SubscribedTopicNames []string, SubscribedTopicRegex?,
  RebalanceTimeoutMs int32, ServerAssignor?, ClassicMemberMetadata (tag 0, never written:
  classic members in consumer groups are not supported here).
- 6 ``ConsumerGroupTargetAssignmentMetadata``: key GroupId; value AssignmentEpoch int32,
  AssignmentTimestamp int64 (tag 0, KIP-1263).
- 7 ``ConsumerGroupTargetAssignmentMember``: key GroupId, MemberId; value
  TopicPartitions [] of (TopicId uuid, Partitions []int32).
- 8 ``ConsumerGroupCurrentMemberAssignment``: key GroupId, MemberId; value MemberEpoch,
  PreviousMemberEpoch int32, State int8, AssignedPartitions and PartitionsPendingRevocation
  [] of (TopicId uuid, Partitions []int32, AssignmentEpochs []int32 (tag 0, not written)).
- 16 ``ConsumerGroupRegularExpression``: not written (regexes are resolved again on load).

A tombstone (null value) deletes what the key names.

Differs from Kafka: MetadataHash is our own 64-bit hash of the subscribed topics' names, ids
and partition counts, not Kafka's Murmur3 over the metadata image; a group loaded from a
Kafka-written log therefore sees a hash change and rebalances once.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from .record_codec import RecordFormatError, RecordReader, RecordWriter

CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_GROUP_REGULAR_EXPRESSION = 16

CONSUMER_RECORD_TYPES = frozenset({
    CONSUMER_GROUP_METADATA, CONSUMER_GROUP_PARTITION_METADATA, CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, CONSUMER_GROUP_REGULAR_EXPRESSION})

# Topic id -> partitions, as Kafka keeps assignments.
Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(slots=True, frozen=True)
class ConsumerGroupKey:
    """The key of any consumer-group record: its type, the group and (member records) the member."""

    record_type: int
    group_id: str
    member_id: str | None = None


@dataclass(slots=True)
class GroupEpochValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(slots=True)
class TargetAssignmentEpochValue:
    assignment_epoch: int
    assignment_timestamp: int = 0


@dataclass(slots=True)
class TargetAssignmentMemberValue:
    partitions: Assignment = field(default_factory=dict)


@dataclass(slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: Assignment = field(default_factory=dict)
    partitions_pending_revocation: Assignment = field(default_factory=dict)


ConsumerGroupValue = (GroupEpochValue | MemberMetadataValue | TargetAssignmentEpochValue
                      | TargetAssignmentMemberValue | CurrentAssignmentValue)


# --- writing ---------------------------------------------------------------------------------

def _key_bytes(key: ConsumerGroupKey) -> bytes:
    w = RecordWriter().i16(key.record_type).string(key.group_id)
    if key.member_id is not None:
        w.string(key.member_id)
    return bytes(w.out)


def _write_topic_partitions(w: RecordWriter, assignment: Assignment) -> None:
    w.uvarint(len(assignment) + 1)
    for topic_id in sorted(assignment, key=str):
        w.uuid(topic_id).int32s(assignment[topic_id]).no_tags()


def _value_bytes(value: ConsumerGroupValue) -> bytes:
    w = RecordWriter().i16(0)
    if isinstance(value, GroupEpochValue):
        w.i32(value.epoch)
        if value.metadata_hash:
            w.uvarint(1).uvarint(0).uvarint(8).i64(value.metadata_hash)
        else:
            w.no_tags()
    elif isinstance(value, MemberMetadataValue):
        w.compact_string(value.instance_id).compact_string(value.rack_id)
        w.compact_string(value.client_id).compact_string(value.client_host)
        w.uvarint(len(value.subscribed_topic_names) + 1)
        for name in value.subscribed_topic_names:
            w.compact_string(name)
        w.compact_string(value.subscribed_topic_regex).i32(value.rebalance_timeout_ms)
        w.compact_string(value.server_assignor)
        w.no_tags()
    elif isinstance(value, TargetAssignmentEpochValue):
        w.i32(value.assignment_epoch)
        if value.assignment_timestamp:
            w.uvarint(1).uvarint(0).uvarint(8).i64(value.assignment_timestamp)
        else:
            w.no_tags()
    elif isinstance(value, TargetAssignmentMemberValue):
        _write_topic_partitions(w, value.partitions)
        w.no_tags()
    elif isinstance(value, CurrentAssignmentValue):
        w.i32(value.member_epoch).i32(value.previous_member_epoch).i8(value.state)
        _write_topic_partitions(w, value.assigned_partitions)
        _write_topic_partitions(w, value.partitions_pending_revocation)
        w.no_tags()
    else:  # pragma: no cover - the union above is closed
        raise TypeError(type(value))
    return bytes(w.out)


def consumer_group_record(key: ConsumerGroupKey, value: ConsumerGroupValue | None) -> tuple[bytes, bytes | None]:
    """(key, value) bytes of one consumer-group record; ``value=None`` is its tombstone."""
    return _key_bytes(key), None if value is None else _value_bytes(value)


# --- reading ---------------------------------------------------------------------------------

def decode_consumer_key(buf: bytes) -> ConsumerGroupKey | None:
    """The key of a consumer-group record, None when ``buf`` is another record type."""
    r = RecordReader(buf)
    record_type = r.i16()
    if record_type not in CONSUMER_RECORD_TYPES:
        return None
    group_id = r.string()
    member_id = None
    if record_type in (CONSUMER_GROUP_MEMBER_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                       CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, CONSUMER_GROUP_REGULAR_EXPRESSION):
        member_id = r.string()  # the regex record's second field is the expression
    return ConsumerGroupKey(record_type, group_id, member_id)


def _read_topic_partitions(r: RecordReader) -> Assignment:
    out: Assignment = {}
    for _ in range(r.array_len()):
        topic_id = r.uuid()
        parts = r.int32s()
        r.tags()
        if parts:
            out[topic_id] = parts
    return out


def decode_consumer_value(record_type: int, buf: bytes) -> ConsumerGroupValue | None:
    """The value of a consumer-group record of ``record_type``; None for types we do not keep."""
    r = RecordReader(buf, flexible=True)
    version = r.i16()
    if version != 0:
        raise RecordFormatError(f"unknown consumer group record version {version} (type {record_type})")
    if record_type == CONSUMER_GROUP_METADATA:
        epoch = r.i32()
        tags = r.tags()
        return GroupEpochValue(epoch, struct.unpack(">q", tags[0])[0] if 0 in tags else 0)
    if record_type == CONSUMER_GROUP_MEMBER_METADATA:
        instance_id = r.nullable_string()
        rack_id = r.nullable_string()
        client_id = r.string()
        client_host = r.string()
        names = [r.string() for _ in range(r.array_len())]
        regex = r.nullable_string()
        rebalance_timeout = r.i32()
        assignor = r.nullable_string()
        r.tags()
        return MemberMetadataValue(instance_id, rack_id, client_id, client_host, names, regex,
                                   rebalance_timeout, assignor)
    if record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        epoch = r.i32()
        tags = r.tags()
        return TargetAssignmentEpochValue(epoch, struct.unpack(">q", tags[0])[0] if 0 in tags else 0)
    if record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        return TargetAssignmentMemberValue(_read_topic_partitions(r))
    if record_type == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        member_epoch = r.i32()
        previous = r.i32()
        state = r.i8()
        assigned = _read_topic_partitions(r)
        pending = _read_topic_partitions(r)
        return CurrentAssignmentValue(member_epoch, previous, state, assigned, pending)
    return None
