"""ACLs on three nodes: an ACL created through one broker lives in etcd and every broker
enforces it; brokers replicate to each other as User:ANONYMOUS, whose follower fetches need
CLUSTER_ACTION on the cluster, not READ on the topic (so a topic ACL leaves replication alone,
as on Kafka with ``super.users`` unset)."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from protocol.errors import ErrorCode
from tests.support.clients import admin, create_topic
from tests.support.cluster import start_cluster, wait_for, wait_isr_complete
from tests.support.raw import RawClient

pytestmark = pytest.mark.cluster

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "allow.everyone.if.no.acl.found": "true"}


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("acl-cluster")), **AUTHORIZER)
    yield c
    c.stop()


def on_topic(topic: str, operation, permission) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:*", "*", operation, permission)


def metadata_error(address: str, topic: str) -> int:
    with RawClient(address) as raw:
        response = raw.call(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})
    return response.topics[0].error_code


def test_an_acl_created_on_one_broker_is_enforced_by_every_broker(acl_cluster):
    topic = "acl-everywhere"
    create_topic(acl_cluster.bootstrap, topic, partitions=3, replication_factor=3)
    first = acl_cluster.node(1).address
    client = admin(first)
    for future in client.create_acls([on_topic(topic, AclOperation.ALL, AclPermissionType.DENY)]).values():
        future.result(10)
    for node in acl_cluster.nodes.values():
        wait_for(lambda node=node: metadata_error(node.address, topic) == ErrorCode.topic_authorization_failed,
                 30, f"node {node.node_id} to refuse the topic")


def test_a_topic_acl_leaves_replication_alone(acl_cluster):
    topic = "acl-replicated"
    create_topic(acl_cluster.bootstrap, topic, partitions=1, replication_factor=3)
    wait_isr_complete(acl_cluster, topic)
    client = admin(acl_cluster.bootstrap)
    acls = [on_topic(topic, AclOperation.WRITE, AclPermissionType.ALLOW),
            on_topic(topic, AclOperation.DESCRIBE, AclPermissionType.ALLOW),
            on_topic(topic, AclOperation.READ, AclPermissionType.DENY)]
    for future in client.create_acls(acls).values():
        future.result(10)
    # acks=all with min.insync.replicas=2: only answered if the followers could fetch.
    producer = Producer({"bootstrap.servers": acl_cluster.bootstrap, "acks": "all", "message.timeout.ms": 30000})
    results = []
    for i in range(20):
        producer.produce(topic, b"v%d" % i, on_delivery=lambda err, _msg: results.append(err))
    assert producer.flush(40) == 0
    assert results == [None] * 20
    wait_isr_complete(acl_cluster, topic)
