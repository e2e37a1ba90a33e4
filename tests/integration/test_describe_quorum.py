"""DescribeQuorum: the metadata quorum in KRaft's terms (``__cluster_metadata``-0)."""

from __future__ import annotations

from kafka import KafkaAdminClient

from protocol.errors import ErrorCode
from tests.support.raw import RawClient


def quorum(bootstrap: str) -> dict:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return admin.describe_metadata_quorum()
    finally:
        admin.close()


def test_describe_metadata_quorum_names_the_controller_and_its_epoch(own_broker):
    b = own_broker()
    (topic,) = quorum(b.bootstrap)["topics"]
    (p,) = topic["partitions"]
    assert (topic["topic_name"], p["partition_index"], p["error"], p["leader_id"]) == ("__cluster_metadata", 0, None, 1)
    assert [v["replica_id"] for v in p["current_voters"]] == [1] and p["observers"] == []
    assert p["current_voters"][0]["log_end_offset"] == p["high_watermark"] >= 1
    epoch = p["leader_epoch"]
    b.restart(kill=True)  # the broker takes the controller role again: a new epoch
    (p,) = quorum(b.bootstrap)["topics"][0]["partitions"]
    assert p["leader_epoch"] == epoch + 1


def test_describe_quorum_of_another_partition_is_unknown(broker):
    with RawClient(broker.bootstrap) as c:
        r = c.call(55, 2, {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 1}]}]})
    (topic,) = r.topics
    assert [p.error_code for p in topic.partitions] == [ErrorCode.unknown_topic_or_partition]
