"""Share-group state and membership without sockets: the records (Kafka's layouts), the state
machine, and ShareGroupHeartbeat / leave / delete against a fake partition whose appended
records a second coordinator replays, as a restart or a coordinator move does."""

import asyncio
import uuid

import pytest

from coordinator.runtime import ManualTimer
from coordinator.share import records as rec
from coordinator.share.group import IllegalStateTransition, ShareGroup, ShareGroupState
from coordinator.share.membership import ShareGroupCoordinator
from protocol.errors import ErrorCode

T1 = uuid.UUID(int=7)


# --- records ---------------------------------------------------------------------------------

def test_share_group_metadata_record_has_kafkas_layout():
    key, value = rec.group_metadata_record("g", rec.GroupMetadataValue(5, 1))
    assert key == b"\x00\x0b\x00\x01g"  # record type 11, then the group id (int16 length)
    assert value == b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00" * 7 + b"\x01" + b"\x00"  # v0, epoch, hash, no tags


def test_member_metadata_record_is_flexible_with_compact_strings():
    key, value = rec.member_metadata_record("g", "m", rec.MemberMetadataValue(None, "c", "/h", ["t"]))
    assert key == b"\x00\x0a\x00\x01g\x00\x01m"
    assert value == b"\x00\x00" + b"\x00" + b"\x02c" + b"\x03/h" + b"\x02\x02t" + b"\x00"


@pytest.mark.parametrize("record", [
    rec.member_metadata_record("g", "m", rec.MemberMetadataValue("r", "c", "/h", ["a", "b"])),
    rec.group_metadata_record("g", rec.GroupMetadataValue(3, -9)),
    rec.target_assignment_metadata_record("g", rec.TargetAssignmentMetadataValue(3, 1234)),
    rec.target_assignment_member_record("g", "m", {T1: frozenset({0, 2})}),
    rec.current_member_assignment_record("g", "m", rec.CurrentMemberAssignmentValue(3, 2, 0, {T1: frozenset({1})})),
    rec.state_partition_metadata_record("g", rec.StatePartitionMetadataValue(
        initialized=[rec.TopicPartitionsInfo(T1, "t", frozenset({0, 1}))])),
])
def test_records_round_trip(record):
    key = rec.decode_key(record[0])
    value = rec.decode_value(key.record_type, record[1])
    assert key.group_id == "g"
    again = {rec.MEMBER_METADATA: lambda: rec.member_metadata_record("g", "m", value),
             rec.GROUP_METADATA: lambda: rec.group_metadata_record("g", value),
             rec.TARGET_ASSIGNMENT_METADATA: lambda: rec.target_assignment_metadata_record("g", value),
             rec.TARGET_ASSIGNMENT_MEMBER: lambda: rec.target_assignment_member_record("g", "m", value),
             rec.CURRENT_MEMBER_ASSIGNMENT: lambda: rec.current_member_assignment_record("g", "m", value),
             rec.STATE_PARTITION_METADATA: lambda: rec.state_partition_metadata_record("g", value)}
    assert again[key.record_type]() == record


def test_classic_group_records_are_not_share_records():
    assert rec.decode_key(b"\x00\x02\x00\x01g") is None
    assert rec.decode_key(b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00") is None


# --- state machine ---------------------------------------------------------------------------

def test_state_follows_members_and_dead_only_from_empty():
    group = ShareGroup("g")
    assert group.state is ShareGroupState.EMPTY
    key = rec.ShareRecordKey(rec.MEMBER_METADATA, "g", "m")
    group.replay(key, rec.MemberMetadataValue(None, "c", "/h", ["t"]))
    assert group.state is ShareGroupState.STABLE
    with pytest.raises(IllegalStateTransition):
        group.transition_to(ShareGroupState.DEAD)
    group.replay(key, None)
    assert group.state is ShareGroupState.EMPTY
    group.transition_to(ShareGroupState.DEAD)
    assert ShareGroupState.DEAD.valid_previous_states == {ShareGroupState.EMPTY}


# --- membership ------------------------------------------------------------------------------

class FakeHost:
    """One always-owned partition; the appended records are kept in order."""

    def __init__(self, classic=()):
        self.log: list[rec.Record] = []
        self.classic = set(classic)
        self.fail_with = 0
        self.timer = ManualTimer()  # share sessions expire only when a test advances it

    def coordinator_error(self, group_id):
        return 0

    def owns_classic_group(self, group_id):
        return group_id in self.classic

    def partition_of(self, group_id):
        return 0

    async def append(self, group_id, records):
        if self.fail_with:
            return self.fail_with, -1
        self.log.extend(records)
        return 0, len(self.log)


class FakeServices:
    def __init__(self, **config):
        self.topics = {"t1": (T1, 2)}
        self.configs = {"group.share.max.size": 200, **config}

    def config(self, key):
        return self.configs[key]

    def group_config_value(self, group_id, name):
        return {"share.session.timeout.ms": 45000, "share.heartbeat.interval.ms": 5000}[name]

    def topic_info(self, name):
        return self.topics.get(name)

    def topic_name(self, topic_id):
        return next((n for n, (t, _) in self.topics.items() if t == topic_id), None)


def run(coro):
    return asyncio.run(coro)


async def hb(c, member, epoch, topics=None, group="g"):
    return await c.heartbeat(group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
                             subscribed_topic_names=topics, client_id="cid", client_host="/127.0.0.1")


def test_join_assigns_and_a_second_member_bumps_the_epoch_and_shares_the_work():
    async def scenario():
        c = ShareGroupCoordinator(FakeHost(), FakeServices())
        a = await hb(c, "a", 0, ["t1"])
        assert (a["error_code"], a["member_epoch"], a["heartbeat_interval"]) == (0, 1, 5000)
        assert a["assignment"]["topic_partitions"] == [{"topic_id": T1, "partitions": [0, 1]}]
        b = await hb(c, "b", 0, ["t1"])
        assert b["member_epoch"] == 2 and len(b["assignment"]["topic_partitions"][0]["partitions"]) == 1
        a2 = await hb(c, "a", 1)
        assert a2["member_epoch"] == 2 and len(a2["assignment"]["topic_partitions"][0]["partitions"]) == 1
        a3 = await hb(c, "a", 2)
        assert a3["assignment"] is None  # nothing changed, no full request
        described = c.describe("g")
        assert (described["group_state"], described["group_epoch"], described["assignment_epoch"],
                described["assignor_name"]) == ("Stable", 2, 2, "simple")
        c.shutdown()
    run(scenario())


@pytest.mark.parametrize("args, message", [
    (("", 0, ["t1"]), "MemberId can't be empty."),
    (("m", 0, None), "SubscribedTopicNames must be set in first request."),
    (("m", 0, []), "SubscribedTopicNames must be set in first request."),
    (("m", -2, None), "MemberEpoch is invalid."),
])
def test_invalid_heartbeats_get_kafkas_messages(args, message):
    c = ShareGroupCoordinator(FakeHost(), FakeServices())
    out = run(hb(c, *args))
    assert (out["error_code"], out["error_message"]) == (ErrorCode.invalid_request, message)


def test_epoch_and_membership_errors_are_kafkas():
    async def scenario():
        c = ShareGroupCoordinator(FakeHost(classic={"classic"}), FakeServices(**{"group.share.max.size": 1}))
        out = await hb(c, "a", 0, ["t1"], group="classic")
        assert (out["error_code"], out["error_message"]) == (ErrorCode.group_id_not_found,
                                                             "Group classic is not a share group.")
        out = await hb(c, "a", 1, group="none")
        assert (out["error_code"], out["error_message"]) == (ErrorCode.group_id_not_found,
                                                             "Share group none not found.")
        await hb(c, "a", 0, ["t1"])
        out = await hb(c, "x", 1)
        assert out["error_code"] == ErrorCode.group_max_size_reached  # the size check comes first
        assert out["error_message"] == "The share group has reached its maximum capacity of 1 members."
        c.s.configs["group.share.max.size"] = 10
        out = await hb(c, "x", 1)
        assert (out["error_code"], out["error_message"]) == (ErrorCode.unknown_member_id,
                                                             "Member x is not a member of group g.")
        out = await hb(c, "a", 5)
        assert out["error_code"] == ErrorCode.fenced_member_epoch
        assert out["error_message"].startswith("The share group member has a greater member epoch (5)")
        c.shutdown()
    run(scenario())


def test_leave_delete_and_replay_give_the_same_groups():
    async def scenario():
        host = FakeHost()
        c = ShareGroupCoordinator(host, FakeServices())
        await hb(c, "a", 0, ["t1"])
        await hb(c, "b", 0, ["t1"])
        assert await c.delete_group("g") == ErrorCode.non_empty_group
        left = await hb(c, "b", -1)
        assert (left["error_code"], left["member_epoch"]) == (0, -1)
        loaded = ShareGroupCoordinator(FakeHost(), FakeServices())
        assert loaded.replay_loaded(host.log) == 1
        live, replayed = c.groups["g"], loaded.groups["g"]
        assert (replayed.group_epoch, replayed.assignment_epoch, list(replayed.members)) == \
            (live.group_epoch, live.assignment_epoch, ["a"]) == (3, 2, ["a"])
        assert replayed.members["a"].member_epoch == live.members["a"].member_epoch
        assert replayed.initialized_topics() == {T1: frozenset({0, 1})}
        await hb(c, "a", -1)
        assert c.describe("g")["group_state"] == "Empty"
        assert await c.delete_group("g") == 0
        assert c.describe("g")["error_code"] == ErrorCode.group_id_not_found
        again = ShareGroupCoordinator(FakeHost(), FakeServices())
        assert again.replay_loaded(host.log) == 0 and "g" not in again.groups
        c.shutdown()
        loaded.shutdown()
    run(scenario())


def test_a_failed_first_write_leaves_no_group():
    async def scenario():
        host = FakeHost()
        host.fail_with = ErrorCode.coordinator_not_available  # the append's NOT_ENOUGH_REPLICAS, as answered
        c = ShareGroupCoordinator(host, FakeServices())
        out = await hb(c, "a", 0, ["t1"])
        assert out["error_code"] == ErrorCode.coordinator_not_available
        assert "g" not in c.groups and c.list_groups(None, None) == []
    run(scenario())


def test_list_groups_filters_by_type_and_state():
    async def scenario():
        c = ShareGroupCoordinator(FakeHost(), FakeServices())
        await hb(c, "a", 0, ["t1"])
        entry = {"group_id": "g", "protocol_type": "share", "group_state": "Stable", "group_type": "share"}
        assert c.list_groups(None, None) == [entry]
        assert c.list_groups(None, {"Share"}) == [entry]
        assert c.list_groups(None, {"classic"}) == []
        assert c.list_groups({"empty"}, None) == []
        assert c.list_groups({"STABLE"}, None) == [entry]
        c.shutdown()
    run(scenario())
