"""confluent-kafka's ShareConsumer (KIP-932) against kbroker: membership (ShareGroupHeartbeat),
the data path (ShareFetch / ShareAcknowledge) and share-group offsets administration together."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from protocol.errors import ErrorCode
from tests.support.raw import RawClient


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"share-consumer-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    return name


def _group(bootstrap: str) -> str:
    """A share group that starts at the earliest offset (share.auto.offset.reset)."""
    group = f"share-group-{uuid.uuid4().hex[:8]}"
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.incremental_alter_configs([res]).values():
        f.result(10)
    return group


def _produce(bootstrap: str, topic: str, n: int) -> list[bytes]:
    values = [b"v-%d" % i for i in range(n)]
    p = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        p.produce(topic, v)
    assert p.flush(10) == 0
    return values


def _consumer(bootstrap: str, group: str, topic: str, **conf) -> ShareConsumer:
    sc = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                        "share.acknowledgement.mode": "explicit", **conf})
    sc.subscribe([topic])
    return sc


def _poll(sc: ShareConsumer, want: int, timeout: float = 30.0, ack: AcknowledgeType | None = None) -> list:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for m in sc.poll(0.5):
            if m.error() is None:
                got.append(m)
                if ack is not None:
                    sc.acknowledge(m, ack)
    return got


@pytest.fixture
def topic(broker):
    return _topic(broker.bootstrap)


def test_accepted_records_are_not_delivered_again(broker, topic):
    group = _group(broker.bootstrap)
    values = _produce(broker.bootstrap, topic, 5)
    sc = _consumer(broker.bootstrap, group, topic)
    got = _poll(sc, 5, ack=AcknowledgeType.ACCEPT)
    assert sorted(m.value() for m in got) == values
    assert {m.delivery_count() for m in got} == {1}
    sc.commit_sync()
    sc.close()
    again = _consumer(broker.bootstrap, group, topic)
    assert _poll(again, 1, timeout=5.0, ack=AcknowledgeType.ACCEPT) == []
    again.close()


def test_released_records_come_back_with_a_higher_delivery_count(broker, topic):
    group = _group(broker.bootstrap)
    _produce(broker.bootstrap, topic, 1)
    sc = _consumer(broker.bootstrap, group, topic)
    first = _poll(sc, 1, ack=AcknowledgeType.RELEASE)
    assert [m.delivery_count() for m in first] == [1]
    second = _poll(sc, 1, ack=AcknowledgeType.ACCEPT)
    assert [(m.offset(), m.delivery_count()) for m in second] == [(first[0].offset(), 2)]
    sc.close()


def test_closing_a_consumer_gives_its_unacknowledged_records_to_another(broker, topic):
    group = _group(broker.bootstrap)
    values = _produce(broker.bootstrap, topic, 3)
    a = _consumer(broker.bootstrap, group, topic)
    assert len(_poll(a, 3)) == 3  # acquired, never acknowledged
    a.close()
    b = _consumer(broker.bootstrap, group, topic)
    got = _poll(b, 3, ack=AcknowledgeType.ACCEPT)
    assert sorted(m.value() for m in got) == values
    assert {m.delivery_count() for m in got} == {2}
    b.close()


def test_share_group_offsets_of_an_empty_group_are_deleted(broker, topic):
    group = _group(broker.bootstrap)
    _produce(broker.bootstrap, topic, 2)
    sc = _consumer(broker.bootstrap, group, topic)
    assert len(_poll(sc, 2, ack=AcknowledgeType.ACCEPT)) == 2
    sc.commit_sync()
    with RawClient(broker.bootstrap) as c:
        busy = c.call(92, 0, {"group_id": group, "topics": [{"topic_name": topic}]})
        assert busy.error_code == ErrorCode.non_empty_group
        sc.close()
        deleted = None
        for _ in range(100):  # the member's leave heartbeat lands asynchronously
            deleted = c.call(92, 0, {"group_id": group, "topics": [{"topic_name": topic}]})
            if deleted.error_code != ErrorCode.non_empty_group:
                break
            time.sleep(0.1)
        assert deleted.error_code == 0 and deleted.responses[0].error_code == 0
        twice = c.call(92, 0, {"group_id": group, "topics": [{"topic_name": topic}]})
        assert (twice.responses[0].error_code, twice.responses[0].error_message) == (
            ErrorCode.unknown_topic_or_partition, "There is no offset information to delete.")
        described = c.call(90, 1, {"groups": [{"group_id": group, "topics": [{"topic_name": topic,
                                                                              "partitions": [0]}]}]})
        assert described.groups[0].topics[0].partitions[0].start_offset == -1
        unknown = c.call(92, 0, {"group_id": f"no-{group}", "topics": [{"topic_name": topic}]})
        assert unknown.error_code == ErrorCode.group_id_not_found
    again = _consumer(broker.bootstrap, group, topic)  # starts over from earliest
    assert len(_poll(again, 2, ack=AcknowledgeType.ACCEPT)) == 2
    again.close()


def test_share_group_offsets_of_a_classic_group_are_refused(broker, topic):
    group = f"classic-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.bootstrap) as c:
        c.call(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                      "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                          {"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
                           "committed_metadata": ""}]}]})
        altered = c.call(91, 0, {"group_id": group, "topics": [
            {"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 0}]}]})
        deleted = c.call(92, 0, {"group_id": group, "topics": [{"topic_name": topic}]})
    for answer in (altered, deleted):
        assert (answer.error_code, answer.error_message) == (ErrorCode.group_id_not_found,
                                                             f"Group {group} is not a share group.")
