"""KIP-848 consumer groups against a real broker process.

confluent-kafka (librdkafka 2.16) consumers with ``group.protocol=consumer`` share a topic's
partitions and take over a leaving member's partitions; raw ConsumerGroupHeartbeat requests pin
Kafka 4.3.1's validation errors and messages, the member epoch checks of OffsetCommit, what
ConsumerGroupDescribe / ListGroups / DescribeGroups report for a consumer group, and that a
member keeps its epoch and assignment across a broker restart (kill -9).
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer

from protocol.errors import ErrorCode
from tests.support.clients import create_topic
from tests.support.raw import RawClient

DEADLINE_S = 60


def _wait(condition, what: str, deadline_s: float = DEADLINE_S):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _consumer(bootstrap: str, group: str, topic: str) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    return c


def _owned(c: Consumer) -> set[int]:
    c.poll(0.2)
    return {tp.partition for tp in c.assignment()}


def _heartbeat(c: RawClient, group: str, member_id: str, epoch: int, *, topics=("t",), owned=(),
               version: int = 1, **extra):
    fields = {"group_id": group, "member_id": member_id, "member_epoch": epoch, "instance_id": None,
              "rack_id": None, "rebalance_timeout": 30000, "subscribed_topic_names": None if topics is None else list(topics),
              "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": list(owned)}
    fields.update(extra)
    return c.call(68, version, fields)


def _join(c: RawClient, group: str, topic: str, topic_id):
    """Join with a fresh member id and heartbeat until the member owns its target partitions."""
    member_id = uuid.uuid4().hex
    resp = _heartbeat(c, group, member_id, 0, topics=[topic])
    assert resp.error_code == 0, resp
    owned = [{"topic_id": tp.topic_id, "partitions": list(tp.partitions)} for tp in resp.assignment.topic_partitions]
    return member_id, resp.member_epoch, owned


def _topic_id(c: RawClient, topic: str):
    resp = c.call(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    return resp.topics[0].topic_id


def test_consumers_share_partitions_and_take_over_when_one_leaves(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=6)
    group = f"g848-{uuid.uuid4().hex[:8]}"
    a = _consumer(broker.bootstrap, group, topic_name)
    b = _consumer(broker.bootstrap, group, topic_name)
    try:
        def split():
            pa, pb = _owned(a), _owned(b)
            return (pa, pb) if pa and pb and not pa & pb and pa | pb == set(range(6)) else None
        pa, pb = _wait(split, "both members to own disjoint halves")
        assert {len(pa), len(pb)} == {3}
        b.close()
        _wait(lambda: _owned(a) == set(range(6)), "the remaining member to take every partition")
    finally:
        a.close()


def test_heartbeat_validation_errors_are_kafkas(broker):
    with RawClient(broker.bootstrap) as c:
        resp = _heartbeat(c, "g", "", 0)
        assert (resp.error_code, resp.error_message) == (ErrorCode.invalid_request, "MemberId can't be empty.")
        resp = _heartbeat(c, "g", "m", 0, rebalance_timeout=-1)
        assert resp.error_message == "RebalanceTimeoutMs must be provided in first request."
        resp = _heartbeat(c, "g", "m", 0, subscribed_topic_names=None)
        assert resp.error_message == ("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                                      "when (re-)joining.")
        resp = _heartbeat(c, "g", "m", -3)
        assert (resp.error_code, resp.error_message) == (ErrorCode.invalid_request, "MemberEpoch is invalid.")
        resp = _heartbeat(c, "g", "m", 0, server_assignor="nope")
        assert resp.error_code == ErrorCode.unsupported_assignor
        assert resp.error_message == "ServerAssignor nope is not supported. Supported assignors: uniform, range."
        resp = _heartbeat(c, f"missing-{uuid.uuid4().hex}", "m", 5)
        assert resp.error_code == ErrorCode.group_id_not_found


def test_member_epochs_fence_stale_heartbeats_and_commits(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    group = f"g848-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.bootstrap) as c:
        member_id, epoch, owned = _join(c, group, topic_name, None)
        assert epoch >= 1 and sorted(owned[0]["partitions"]) == [0, 1]
        resp = _heartbeat(c, group, member_id, epoch + 1, topics=[topic_name], owned=owned)
        assert resp.error_code == ErrorCode.fenced_member_epoch
        assert "greater member epoch" in resp.error_message

        def commit(member: str, member_epoch: int, version: int = 9):
            r = c.call(8, version, {"group_id": group, "generation_id_or_member_epoch": member_epoch,
                                    "member_id": member, "group_instance_id": None,
                                    "topics": [{"name": topic_name, "partitions": [
                                        {"partition_index": 0, "committed_offset": 1,
                                         "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
            return r.topics[0].partitions[0].error_code
        assert commit(member_id, epoch - 1) == ErrorCode.stale_member_epoch
        assert commit("someone-else", epoch) == ErrorCode.unknown_member_id
        assert commit("", -1) == ErrorCode.unknown_member_id  # the group has members
        assert commit(member_id, epoch) == 0

        described = c.call(69, 1, {"group_ids": [group], "include_authorized_operations": False}).groups[0]
        assert (described.error_code, described.group_state, described.group_epoch) == (0, "Stable", epoch)
        assert described.assignor_name == "uniform"
        (m,) = described.members
        assert (m.member_id, m.member_epoch, m.member_type) == (member_id, epoch, 1)
        assert sorted(m.assignment.topic_partitions[0].partitions) == [0, 1]
        assert m.assignment.topic_partitions[0].topic_name == topic_name

        listed = c.call(16, 5, {"states_filter": [], "types_filter": ["consumer"]})
        assert {(g.group_id, g.group_type, g.protocol_type) for g in listed.groups} >= {(group, "consumer", "consumer")}
        classic = c.call(16, 5, {"states_filter": [], "types_filter": ["classic"]})
        assert group not in {g.group_id for g in classic.groups}

        d = c.call(15, 6, {"groups": [group], "include_authorized_operations": False}).groups[0]
        assert (d.error_code, d.error_message) == (ErrorCode.group_id_not_found, f"Group {group} is not a classic group.")

        assert c.call(42, 2, {"groups_names": [group]}).results[0].error_code == ErrorCode.non_empty_group
        resp = _heartbeat(c, group, member_id, -1, topics=None)
        assert (resp.error_code, resp.member_epoch) == (0, -1)
        assert commit("", -1) == 0  # an empty group takes commits from outside
        assert c.call(42, 2, {"groups_names": [group]}).results[0].error_code == 0


def test_member_keeps_epoch_and_assignment_across_restart(own_broker, topic_name):
    b = own_broker()
    create_topic(b.bootstrap, topic_name, partitions=3)
    group = f"g848-{uuid.uuid4().hex[:8]}"
    with RawClient(b.bootstrap) as c:
        member_id, epoch, owned = _join(c, group, topic_name, None)
        resp = _heartbeat(c, group, member_id, epoch, topics=[topic_name], owned=owned)
        assert resp.error_code == 0 and resp.member_epoch == epoch
    b.restart(kill=True)

    def heartbeat_after_restart():
        with RawClient(b.bootstrap) as c:
            r = _heartbeat(c, group, member_id, epoch, topics=[topic_name], owned=owned)
            return None if r.error_code in (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator,
                                            ErrorCode.coordinator_not_available) else r
    resp = _wait(heartbeat_after_restart, "the group to be loaded again")
    assert (resp.error_code, resp.member_id, resp.member_epoch) == (0, member_id, epoch)
    assert sorted(resp.assignment.topic_partitions[0].partitions) == [0, 1, 2]


@pytest.mark.parametrize("version", [0])
def test_v0_coordinator_makes_up_the_member_id(broker, topic_name, version):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    with RawClient(broker.bootstrap) as c:
        resp = _heartbeat(c, f"g848-{uuid.uuid4().hex[:8]}", "", 0, topics=[topic_name], version=version)
        assert resp.error_code == 0 and resp.member_id and resp.member_epoch == 1


def test_group_config_sets_the_heartbeat_interval(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    group = f"g848-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.bootstrap) as c:
        resp = _heartbeat(c, group, uuid.uuid4().hex, 0, topics=[topic_name])
        assert resp.heartbeat_interval.total_seconds() * 1000 == 5000  # group.consumer.heartbeat.interval.ms
        altered = c.call(44, 1, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
            {"name": "consumer.heartbeat.interval.ms", "config_operation": 0, "value": "7000"}]}],
            "validate_only": False})
        assert altered.responses[0].error_code == 0
        resp = _heartbeat(c, group, uuid.uuid4().hex, 0, topics=[topic_name])
        assert resp.heartbeat_interval.total_seconds() * 1000 == 7000


def test_an_empty_consumer_group_becomes_classic_when_a_classic_member_joins(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    group = f"g848-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.bootstrap) as c:
        member_id = uuid.uuid4().hex
        assert _heartbeat(c, group, member_id, 0, topics=[topic_name]).error_code == 0
        classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                            "auto.offset.reset": "earliest"})
        try:
            classic.subscribe([topic_name])
            classic.poll(1.0)
            # The group has a consumer-protocol member: a classic member cannot join.
            assert not classic.assignment()
            assert _heartbeat(c, group, member_id, -1, topics=None).error_code == 0
            _wait(lambda: _owned(classic) == {0}, "the classic member to own the partition")
        finally:
            classic.close()
        listed = c.call(16, 5, {"states_filter": [], "types_filter": ["classic"]})
        assert group in {g.group_id for g in listed.groups}
