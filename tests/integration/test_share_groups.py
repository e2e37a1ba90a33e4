"""Share groups (KIP-932) membership against a real broker: confluent-kafka's ShareConsumer
joins and is assigned, ShareGroupDescribe / ListGroups / DescribeGroups / DeleteGroups answer
as Kafka 4.3.1, a silent member is fenced after the group's session timeout, and the group
with its epochs survives a kill -9."""

import uuid

import pytest
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from protocol.errors import ErrorCode
from tests.support.clients import admin, create_topic
from tests.support.cluster import wait_for
from tests.support.raw import RawClient


def describe(bootstrap: str, group: str):
    with RawClient(bootstrap) as c:
        return c.call(77, 1, {"group_ids": [group], "include_authorized_operations": True}).groups[0]


def heartbeat(c: RawClient, group: str, member: str, epoch: int, topics: list[str] | None = None):
    return c.call(76, 1, {"group_id": group, "member_id": member, "member_epoch": epoch, "rack_id": None,
                          "subscribed_topic_names": topics})


def assigned(described) -> dict[str, dict[str, list[int]]]:
    return {m.member_id: {t.topic_name: list(t.partitions) for t in m.assignment.topic_partitions}
            for m in described.members}


@pytest.fixture
def group_id() -> str:
    return f"share-{uuid.uuid4().hex[:8]}"


def test_share_consumers_join_and_share_a_single_partition(broker, topic_name, group_id):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    consumers = [ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group_id})
                 for _ in range(2)]
    try:
        for sc in consumers:
            sc.subscribe([topic_name])

        def both_assigned():
            for sc in consumers:
                sc.poll(0.1)
            d = describe(broker.bootstrap, group_id)
            return d if d.error_code == 0 and len(d.members) == 2 and \
                all(a == {topic_name: [0]} for a in assigned(d).values()) else None

        d = wait_for(both_assigned, 30, "both share consumers assigned partition 0")
        assert (d.group_state, d.assignor_name, d.authorized_operations) == ("Stable", "simple", 3400)
        assert d.assignment_epoch == d.group_epoch == max(m.member_epoch for m in d.members)
        assert all(m.subscribed_topic_names == (topic_name,) and m.client_host == "/127.0.0.1"
                   for m in d.members)
    finally:
        for sc in consumers:
            sc.close()


def test_share_group_is_listed_and_refused_by_the_classic_apis(broker, topic_name, group_id):
    create_topic(broker.bootstrap, topic_name)
    with RawClient(broker.bootstrap) as c:
        joined = heartbeat(c, group_id, str(uuid.uuid4()), 0, [topic_name])
        assert (joined.error_code, joined.member_epoch) == (0, 1)
        listed = c.call(16, 5, {"states_filter": [], "types_filter": ["share"]}).groups
        assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed
                if g.group_id == group_id] == [(group_id, "share", "Stable", "share")]
        assert group_id not in {g.group_id for g in c.call(16, 5, {"states_filter": [],
                                                                      "types_filter": ["classic"]}).groups}
        assert group_id not in {g.group_id for g in c.call(16, 5, {"states_filter": ["Empty"],
                                                                      "types_filter": []}).groups}
        v6 = c.call(15, 6, {"groups": [group_id], "include_authorized_operations": False}).groups[0]
        assert (v6.error_code, v6.error_message, v6.group_state) == (
            ErrorCode.group_id_not_found, f"Group {group_id} is not a classic group.", "Dead")
        v5 = c.call(15, 5, {"groups": [group_id], "include_authorized_operations": False}).groups[0]
        assert (v5.error_code, v5.group_state) == (0, "Dead")
        join = c.call(11, 9, {"group_id": group_id, "session_timeout": 10000, "rebalance_timeout": 10000,
                              "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                              "protocols": [{"name": "range", "metadata": b""}], "reason": None})
        assert join.error_code == ErrorCode.inconsistent_group_protocol


def test_heartbeat_of_a_classic_group_id_and_bad_requests(broker, topic_name, group_id):
    create_topic(broker.bootstrap, topic_name)
    with RawClient(broker.bootstrap) as c:
        c.call(8, 8, {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                      "group_instance_id": None, "topics": [{"name": topic_name, "partitions": [
                          {"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
                           "committed_metadata": ""}]}]})
        out = heartbeat(c, group_id, str(uuid.uuid4()), 0, [topic_name])
        assert (out.error_code, out.error_message) == (ErrorCode.group_id_not_found,
                                                       f"Group {group_id} is not a share group.")
        out = heartbeat(c, "other-" + group_id, str(uuid.uuid4()), 0, None)
        assert (out.error_code, out.error_message) == (ErrorCode.invalid_request,
                                                       "SubscribedTopicNames must be set in first request.")
        out = heartbeat(c, "other-" + group_id, str(uuid.uuid4()), 3, None)
        assert (out.error_code, out.error_message) == (ErrorCode.group_id_not_found,
                                                       f"Share group other-{group_id} not found.")


def test_a_member_rejoining_with_epoch_0_and_its_member_id_is_not_fenced(broker, topic_name, group_id):
    """KIP-1082: a share consumer keeps its member id and rejoins with epoch 0 (e.g. after
    FENCED_MEMBER_EPOCH); Kafka's throwIfShareGroupMemberEpochIsInvalid does not check epoch 0."""
    create_topic(broker.bootstrap, topic_name)
    member = str(uuid.uuid4())
    with RawClient(broker.bootstrap) as c:
        joined = heartbeat(c, group_id, member, 0, [topic_name])
        assert joined.error_code == 0 and joined.member_epoch > 0
        assert heartbeat(c, group_id, str(uuid.uuid4()), 0, [topic_name]).error_code == 0  # bumps the group
        moved = heartbeat(c, group_id, member, joined.member_epoch, None)
        assert moved.error_code == 0 and moved.member_epoch > joined.member_epoch  # previous epoch is not 0
        again = heartbeat(c, group_id, member, 0, [topic_name])
        assert (again.error_code, again.member_id) == (0, member)
        assert again.member_epoch >= moved.member_epoch
        assert heartbeat(c, group_id, member, again.member_epoch + 5, None).error_code == \
            ErrorCode.fenced_member_epoch


def test_members_leave_then_the_empty_group_is_deleted(broker, topic_name, group_id):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    with RawClient(broker.bootstrap) as c:
        heartbeat(c, group_id, a, 0, [topic_name])
        second = heartbeat(c, group_id, b, 0, [topic_name])
        assert second.member_epoch == 2 and len(second.assignment.topic_partitions[0].partitions) == 1
        assert c.call(42, 2, {"groups_names": [group_id]}).results[0].error_code == ErrorCode.non_empty_group
        for member in (a, b):
            left = heartbeat(c, group_id, member, -1)
            assert (left.error_code, left.member_id, left.member_epoch) == (0, member, -1)
        stale = heartbeat(c, group_id, a, 1)
        assert stale.error_code == ErrorCode.unknown_member_id
        d = describe(broker.bootstrap, group_id)
        assert (d.group_state, d.group_epoch, d.members) == ("Empty", 4, ())
        assert c.call(42, 2, {"groups_names": [group_id]}).results[0].error_code == 0
        gone = describe(broker.bootstrap, group_id)
        assert (gone.error_code, gone.error_message) == (ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        assert c.call(42, 2, {"groups_names": [group_id]}).results[0].error_code == ErrorCode.group_id_not_found


def test_a_silent_member_is_fenced_after_the_groups_session_timeout(own_broker, topic_name, group_id):
    b = own_broker(**{"group.share.min.session.timeout.ms": "1000",
                      "group.share.min.heartbeat.interval.ms": "500"})
    create_topic(b.bootstrap, topic_name)
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=[
        ConfigEntry("share.session.timeout.ms", "1500", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.heartbeat.interval.ms", "500", incremental_operation=AlterConfigOpType.SET)])
    client = admin(b.bootstrap)
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    member = str(uuid.uuid4())
    with RawClient(b.bootstrap) as c:
        joined = heartbeat(c, group_id, member, 0, [topic_name])
        assert (joined.error_code, joined.heartbeat_interval.total_seconds()) == (0, 0.5)
    d = wait_for(lambda: (x := describe(b.bootstrap, group_id)).group_state == "Empty" and x, 30,
                 "the member fenced after 1.5 s without a heartbeat")
    assert d.group_epoch == 2  # the fencing bumped it
    with RawClient(b.bootstrap) as c:
        assert heartbeat(c, group_id, member, 1).error_code == ErrorCode.unknown_member_id


def test_share_group_and_its_epochs_survive_a_restart(own_broker, topic_name, group_id):
    b = own_broker()
    create_topic(b.bootstrap, topic_name, partitions=3)
    a, m2 = str(uuid.uuid4()), str(uuid.uuid4())
    with RawClient(b.bootstrap) as c:
        heartbeat(c, group_id, a, 0, [topic_name])
        heartbeat(c, group_id, m2, 0, [topic_name])
        heartbeat(c, group_id, a, 1)
    before = describe(b.bootstrap, group_id)
    b.restart(kill=True)
    after = wait_for(lambda: (x := describe(b.bootstrap, group_id)).error_code == 0 and x, 30,
                     "the share group loaded again")
    assert (after.group_state, after.group_epoch, after.assignment_epoch) == \
        (before.group_state, before.group_epoch, before.assignment_epoch) == ("Stable", 2, 2)
    assert assigned(after) == assigned(before)
    assert {m.member_id: m.member_epoch for m in after.members} == {a: 2, m2: 2}
    with RawClient(b.bootstrap) as c:
        again = heartbeat(c, group_id, a, 2)
        assert (again.error_code, again.member_epoch) == (0, 2)
