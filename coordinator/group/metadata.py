"""Record codecs for ``__consumer_offsets``: Kafka's own key and value schemas, byte for byte.

Owns the encoding of what the group coordinator writes to its log and the decoding of what it
reads back at load time, so that Kafka's tooling (``kafka-console-consumer --formatter
org.apache.kafka.tools.consumer.OffsetsMessageFormatter`` / ``GroupMetadataMessageFormatter``)
could read our log and we could read Kafka's. The schemas are Kafka's
``group-coordinator/src/main/resources/common/message`` JSON files:

- every key and value starts with an int16 version; the key version doubles as the record type
  (0 and 1: ``OffsetCommitKey``; 2: ``GroupMetadataKey``; 3+: KIP-848 records, not ours);
- ``OffsetCommitKey``: group string, topic string, partition int32;
- ``OffsetCommitValue`` v0-4: offset int64, leaderEpoch int32 (v3+), metadata string,
  commitTimestamp int64, expireTimestamp int64 (v1 only); v4 is flexible;
- ``GroupMetadataKey``: group string;
- ``GroupMetadataValue`` v0-4: protocolType string, generation int32, protocol nullable string,
  leader nullable string, currentStateTimestamp int64 (v2+), members array of MemberMetadata
  (memberId, groupInstanceId nullable (v3+), clientId, clientHost, rebalanceTimeout int32 (v1+),
  sessionTimeout int32, subscription bytes, assignment bytes); v4 is flexible.

We write key version 1 for offsets (as Kafka does), value version 3 for both values (the
newest non-flexible versions, which every Kafka since 2.3 reads); all versions are read. A
tombstone is a record with a null value. ``partition_for`` maps a group to its partition as
Kafka does. ``subscribed_topics`` reads the topics out of a consumer member's JoinGroup
metadata (``ConsumerProtocolSubscription``), which group records carry as ``subscription``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .record_codec import RecordFormatError, RecordReader, RecordWriter

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3


# --- group -> partition ---------------------------------------------------------------------

def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()``: 31*h + c over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % numPartitions``.

    ``Utils.abs`` maps Integer.MIN_VALUE to 0 and is otherwise ``Math.abs``; it is not the
    ``& 0x7fffffff`` of the default producer partitioner (the two differ for negative hashes).
    """
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# --- records ---------------------------------------------------------------------------------

@dataclass(slots=True, frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(slots=True, frozen=True)
class GroupMetadataKey:
    group: str


@dataclass(slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberMetadataValue] = field(default_factory=list)


# --- writing -----------------------------------------------------------------------------------

def encode_offset_commit_key(key: OffsetCommitKey, version: int = OFFSET_COMMIT_KEY_VERSION) -> bytes:
    if version not in (0, 1):
        raise ValueError(f"OffsetCommitKey version {version}")
    return bytes(RecordWriter().i16(version).string(key.group).string(key.topic).i32(key.partition).out)


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    return bytes(RecordWriter().i16(GROUP_METADATA_KEY_VERSION).string(key.group).out)


def encode_offset_commit_value(value: OffsetCommitValue,
                               version: int = OFFSET_COMMIT_VALUE_VERSION) -> bytes:
    """Versions 0-3 (v1 carries the expire timestamp of OffsetCommit v2-4 retention)."""
    w = RecordWriter().i16(version).i64(value.offset)
    if version == 3:
        w.i32(value.leader_epoch)
    elif version not in (0, 1, 2):
        raise ValueError(f"OffsetCommitValue version {version} is not written")
    w.string(value.metadata).i64(value.commit_timestamp)
    if version == 1:
        w.i64(value.expire_timestamp)
    return bytes(w.out)


def encode_group_metadata_value(value: GroupMetadataValue,
                                version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    if version not in (0, 1, 2, 3):
        raise ValueError(f"GroupMetadataValue version {version} is not written")
    w = RecordWriter().i16(version).string(value.protocol_type).i32(value.generation)
    w.string(value.protocol).string(value.leader)
    if version >= 2:
        w.i64(value.current_state_timestamp)
    w.i32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id).string(m.client_host)
        if version >= 1:
            w.i32(m.rebalance_timeout)
        w.i32(m.session_timeout).bytes_(m.subscription).bytes_(m.assignment)
    return bytes(w.out)


# --- reading -----------------------------------------------------------------------------------

def decode_key(buf: bytes) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key of a ``__consumer_offsets`` record; None for record types we do not own."""
    r = RecordReader(buf)
    version = r.i16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.i32())
    if version == 2:
        return GroupMetadataKey(r.string())
    return None


def decode_offset_commit_value(buf: bytes) -> OffsetCommitValue:
    r = RecordReader(buf)
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    r.flexible = version >= 4
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.i64()
    expire_timestamp = r.i64() if version == 1 else -1
    r.tagged_fields()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def decode_group_metadata_value(buf: bytes) -> GroupMetadataValue:
    r = RecordReader(buf)
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    r.flexible = version >= 4
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    current_state_timestamp = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len()):
        member_id = r.string()
        group_instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.tagged_fields()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(MemberMetadataValue(member_id, group_instance_id, client_id, client_host,
                                           rebalance_timeout, session_timeout, subscription, assignment))
    r.tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp,
                              members)


def subscribed_topics(subscription: bytes) -> set[str] | None:
    """The topics of a ``consumer`` protocol member's metadata (Kafka's
    ``ConsumerProtocolSubscription``), read as v0, the prefix of every version, as Kafka's
    ``ClassicGroup.computeSubscribedTopics`` does; None when it does not parse."""
    r = RecordReader(subscription)
    try:
        if r.i16() < 0:
            return None  # "Unsupported subscription version"
        return {r.string() for _ in range(r.array_len())}
    except (RecordFormatError, UnicodeDecodeError):
        return None


def offset_commit_record(group: str, topic: str, partition: int,
                         value: OffsetCommitValue | None) -> tuple[bytes, bytes | None]:
    """(key, value) of one committed offset; ``value=None`` is its tombstone."""
    key = encode_offset_commit_key(OffsetCommitKey(group, topic, partition))
    return key, None if value is None else encode_offset_commit_value(value)


def group_metadata_record(group: str, value: GroupMetadataValue | None) -> tuple[bytes, bytes | None]:
    """(key, value) of a group's metadata; ``value=None`` is its tombstone."""
    key = encode_group_metadata_key(GroupMetadataKey(group))
    return key, None if value is None else encode_group_metadata_value(value)
