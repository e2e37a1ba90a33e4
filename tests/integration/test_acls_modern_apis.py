"""ACLs on the APIs of modern groups, SCRAM and the quorum: the checks Kafka's KafkaApis makes
(GROUP READ / DESCRIBE, TOPIC READ / DESCRIBE, CLUSTER DESCRIBE / ALTER), with raw requests."""

from __future__ import annotations

import datetime
import uuid

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from protocol.errors import ErrorCode
from tests.integration.test_acls import AUTHORIZER, create_acls
from tests.support.clients import create_topic
from tests.support.raw import RawClient


def deny(resource_type: ResourceType, name: str, operation: AclOperation) -> AclBinding:
    return AclBinding(resource_type, name, ResourcePatternType.LITERAL, "User:*", "*", operation,
                      AclPermissionType.DENY)


def heartbeat(c: RawClient, api_key: int, group: str, topics: list[str]):
    fields = {"group_id": group, "member_id": str(uuid.uuid4()), "member_epoch": 0, "rack_id": None,
              "subscribed_topic_names": topics}
    if api_key == 68:
        fields.update(instance_id=None, rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_regex=None,
                      server_assignor=None, topic_partitions=[])
    return c.call(api_key, 1, fields)


def test_modern_group_apis_need_the_group_and_topic_acls(own_broker):
    b = own_broker(**AUTHORIZER)
    open_topic, closed_topic = f"open-{uuid.uuid4().hex[:6]}", f"closed-{uuid.uuid4().hex[:6]}"
    create_topic(b.bootstrap, open_topic)
    create_topic(b.bootstrap, closed_topic)
    create_acls(b.bootstrap, deny(ResourceType.GROUP, "closed-group", AclOperation.READ),
                deny(ResourceType.TOPIC, closed_topic, AclOperation.DESCRIBE))
    with RawClient(b.bootstrap) as c:
        for api_key in (68, 76):  # ConsumerGroupHeartbeat, ShareGroupHeartbeat
            assert heartbeat(c, api_key, "closed-group", [open_topic]).error_code == ErrorCode.group_authorization_failed
            assert heartbeat(c, api_key, f"g-{api_key}", [closed_topic]).error_code == ErrorCode.topic_authorization_failed
            assert heartbeat(c, api_key, f"g-{api_key}", [open_topic]).error_code == 0
        share_fetch = c.call(78, 1, {"group_id": "closed-group", "member_id": str(uuid.uuid4()),
                                     "share_session_epoch": 0, "max_wait": datetime.timedelta(0), "min_bytes": 1,
                                     "max_records": 10, "batch_size": 10, "topics": [],
                                     "forgotten_topics_data": []})
        assert share_fetch.error_code == ErrorCode.group_authorization_failed


def test_scram_and_quorum_need_cluster_acls(own_broker):
    b = own_broker(**AUTHORIZER)
    quorum = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}
    with RawClient(b.bootstrap) as c:  # no ACL on the cluster: allow.everyone.if.no.acl.found
        assert c.call(50, 0, {"users": None}).error_code == 0
        assert c.call(55, 2, quorum).error_code == 0
    # Any ACL on the cluster resource ends "no ACL found": without an ALLOW, DESCRIBE is refused
    # too (Kafka's StandardAuthorizer).
    create_acls(b.bootstrap, deny(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER))
    with RawClient(b.bootstrap) as c:
        altered = c.call(51, 0, {"deletions": [], "upsertions": [
            {"name": "alice", "mechanism": 1, "iterations": 8192, "salt": b"s", "salted_password": b"p" * 32}]})
        assert [(r.user, r.error_code) for r in altered.results] == [("alice", ErrorCode.cluster_authorization_failed)]
        assert c.call(50, 0, {"users": None}).error_code == ErrorCode.cluster_authorization_failed
        assert c.call(55, 2, quorum).error_code == ErrorCode.cluster_authorization_failed


def test_a_regex_subscription_only_gets_the_topics_the_member_may_describe(own_broker):
    """Kafka's TopicRegexResolver keeps the regex matches the heartbeat's principal may DESCRIBE."""
    b = own_broker(**AUTHORIZER)
    suffix = uuid.uuid4().hex[:6]
    open_topic, closed_topic = f"rx-open-{suffix}", f"rx-closed-{suffix}"
    create_topic(b.bootstrap, open_topic, partitions=2)
    create_topic(b.bootstrap, closed_topic, partitions=2)
    create_acls(b.bootstrap, deny(ResourceType.TOPIC, closed_topic, AclOperation.DESCRIBE))
    with RawClient(b.bootstrap) as c:
        metadata = c.call(3, 12, {"topics": [{"name": open_topic, "topic_id": None}], "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": False})
        open_id = metadata.topics[0].topic_id
        resp = c.call(68, 1, {"group_id": f"g-rx-{suffix}", "member_id": str(uuid.uuid4()), "member_epoch": 0,
                              "instance_id": None, "rack_id": None, "rebalance_timeout": datetime.timedelta(seconds=30),
                              "subscribed_topic_names": None, "subscribed_topic_regex": f"rx-.*-{suffix}",
                              "server_assignor": None, "topic_partitions": []})
        assert resp.error_code == 0
        assert [(tp.topic_id, sorted(tp.partitions)) for tp in resp.assignment.topic_partitions] == [(open_id, [0, 1])]
