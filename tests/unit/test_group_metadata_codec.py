"""__consumer_offsets record codecs: Kafka's exact key/value schemas and group partitioning."""

import pytest

from coordinator.group import metadata as md
from coordinator.group.metadata import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)


def test_offset_commit_key_and_value_fixed_bytes():
    key = md.encode_offset_commit_key(OffsetCommitKey("g", "t", 3))
    assert key == bytes.fromhex("0001" "000167" "000174" "00000003")
    value = md.encode_offset_commit_value(OffsetCommitValue(100, 5, "m", 1_700_000_000_000))
    assert value == bytes.fromhex("0003" "0000000000000064" "00000005" "00016d" "0000018bcfe56800")
    assert md.decode_key(key) == OffsetCommitKey("g", "t", 3)
    assert md.decode_offset_commit_value(value) == OffsetCommitValue(100, 5, "m", 1_700_000_000_000, -1)


def test_group_metadata_key_fixed_bytes():
    key = md.encode_group_metadata_key(GroupMetadataKey("grp"))
    assert key == bytes.fromhex("0002" "0003") + b"grp"
    assert md.decode_key(key) == GroupMetadataKey("grp")


def test_group_metadata_value_v3_fixed_bytes():
    value = GroupMetadataValue("consumer", 2, "range", "m1", 42,
                               [MemberMetadataValue("m1", None, "c", "/h", 300, 100, b"\x01", b"\x02\x03")])
    raw = md.encode_group_metadata_value(value)
    expected = (bytes.fromhex("0003") + b"\x00\x08consumer" + bytes.fromhex("00000002")
                + b"\x00\x05range" + b"\x00\x02m1" + bytes.fromhex("000000000000002a")
                + bytes.fromhex("00000001")
                + b"\x00\x02m1" + bytes.fromhex("ffff") + b"\x00\x01c" + b"\x00\x02/h"
                + bytes.fromhex("0000012c") + bytes.fromhex("00000064")
                + bytes.fromhex("00000001") + b"\x01" + bytes.fromhex("00000002") + b"\x02\x03")
    assert raw == expected
    assert md.decode_group_metadata_value(raw) == value


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_offset_commit_value_round_trip_every_written_version(version):
    value = OffsetCommitValue(2**40, 7 if version == 3 else -1, "meta\u00e9", 123456789,
                              99 if version == 1 else -1)
    assert md.decode_offset_commit_value(md.encode_offset_commit_value(value, version)) == value


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_group_metadata_value_round_trip_every_written_version(version):
    members = [MemberMetadataValue(f"m{i}", "inst" if version >= 3 and i == 0 else None, "client",
                                   "/127.0.0.1", 5000 + i, 5000 + i, b"sub" * i, b"asg" * i) for i in range(3)]
    value = GroupMetadataValue("consumer", 9, "range", "m0", 1234 if version >= 2 else -1, members)
    assert md.decode_group_metadata_value(md.encode_group_metadata_value(value, version)) == value


def test_empty_group_value_has_null_protocol_and_leader():
    value = GroupMetadataValue("consumer", 4, None, None, 5, [])
    raw = md.encode_group_metadata_value(value)
    assert raw[2:2 + 2 + 8 + 4] == b"\x00\x08consumer" + bytes.fromhex("00000004")
    assert md.decode_group_metadata_value(raw) == value


def test_flexible_v4_values_are_read():
    # OffsetCommitValue v4: compact string, tagged fields (one unknown tag skipped).
    raw = (bytes.fromhex("0004" "000000000000000a" "ffffffff") + b"\x02x"
           + bytes.fromhex("0000000000000001") + b"\x01\x00\x02\xaa\xbb")
    assert md.decode_offset_commit_value(raw) == OffsetCommitValue(10, -1, "x", 1, -1)
    # GroupMetadataValue v4 with one member and a null protocol.
    raw = (bytes.fromhex("0004") + b"\x09consumer" + bytes.fromhex("00000001") + b"\x00" + b"\x00"
           + bytes.fromhex("0000000000000007") + b"\x02"
           + b"\x02a" + b"\x00" + b"\x02c" + b"\x02h" + bytes.fromhex("00000010") + bytes.fromhex("00000020")
           + b"\x02\x01" + b"\x01" + b"\x00" + b"\x00")
    value = md.decode_group_metadata_value(raw)
    assert value == GroupMetadataValue("consumer", 1, None, None, 7,
                                       [MemberMetadataValue("a", None, "c", "h", 16, 32, b"\x01", b"")])


def test_unknown_record_types_and_truncation():
    assert md.decode_key(bytes.fromhex("0003") + b"\x00\x01g") is None
    with pytest.raises(md.RecordFormatError):
        md.decode_offset_commit_value(bytes.fromhex("0003") + b"\x00\x00")
    with pytest.raises(md.RecordFormatError):
        md.decode_offset_commit_value(bytes.fromhex("0009") + bytes(20))


def test_records_and_tombstones():
    key, value = md.offset_commit_record("g", "t", 1, None)
    assert value is None and md.decode_key(key) == OffsetCommitKey("g", "t", 1)
    key, value = md.group_metadata_record("g", None)
    assert value is None and md.decode_key(key) == GroupMetadataKey("g")


@pytest.mark.parametrize("s,h", [("", 0), ("a", 97), ("hello", 99162322), ("hello world", 1794106052),
                                 ("Aa", 2112), ("BB", 2112), ("polygenelubricants", -(2**31)),
                                 ("\u00e9t\u00e9", (233 * 31 + 116) * 31 + 233)])
def test_java_string_hash(s, h):
    assert md.java_string_hash(s) == h


def test_java_string_hash_counts_utf16_code_units():
    # U+1F600 is a surrogate pair in Java: 0xD83D, 0xDE00.
    assert md.java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00


def test_partition_for_uses_kafkas_utils_abs():
    assert md.partition_for("polygenelubricants", 50) == 0  # Integer.MIN_VALUE -> 0
    negative = next(g for g in (f"consumer-group-{i}" for i in range(1000)) if md.java_string_hash(g) < 0)
    h = md.java_string_hash(negative)
    assert md.partition_for(negative, 50) == (-h) % 50
    assert all(0 <= md.partition_for(f"group-{i}", 7) < 7 for i in range(200))


def test_subscribed_topics_read_the_v0_prefix_of_any_consumer_subscription():
    v0 = bytes.fromhex("0000" "00000002" "0001") + b"a" + bytes.fromhex("0002") + b"bc" + bytes.fromhex("ffffffff")
    assert md.subscribed_topics(v0) == {"a", "bc"}
    # v3 (Kafka 3.x clients): owned partitions, generation and rack follow; they are not read.
    v3 = bytes.fromhex("0003" "00000001" "0001") + b"t" + bytes.fromhex("ffffffff" "00000000" "00000005" "ffff")
    assert md.subscribed_topics(v3) == {"t"}
    assert md.subscribed_topics(bytes.fromhex("ffff" "00000000")) is None  # negative version
    assert md.subscribed_topics(b"meta") is None  # not a subscription (truncated)
    assert md.subscribed_topics(b"") is None
