"""ACLs through real clients: CreateAcls / DescribeAcls / DeleteAcls with confluent-kafka's
AdminClient and Kafka's own ``kafka-acls``, and their enforcement by the StandardAuthorizer
(``authorizer.class.name``) on produce, consume, metadata and the authorized-operations
fields, as Apache Kafka 4.3.1 answers (caller ``User:ANONYMOUS`` on a PLAINTEXT listener).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from protocol.errors import ErrorCode
from tests.support.clients import admin, create_topic
from tests.support.raw import RawClient

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZER = {"authorizer.class.name": STANDARD_AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}
KAFKA_RUN = Path(__file__).resolve().parents[2] / "compat" / "kafka" / "kafka-run.sh"
ANY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)


def deny_all(topic: str, operation=AclOperation.ALL) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:*", "*", operation,
                      AclPermissionType.DENY)


def create_acls(bootstrap: str, *acls: AclBinding) -> None:
    client = admin(bootstrap)  # (kept referenced until the futures are done)
    for future in client.create_acls(list(acls)).values():
        assert future.result(10) is None


def delete_acls(bootstrap: str, *filters: AclBindingFilter) -> list[set]:
    client = admin(bootstrap)
    return [{str(a) for a in f.result(10)} for f in client.delete_acls(list(filters)).values()]


def described(bootstrap: str, acl_filter: AclBindingFilter = ANY_ACL) -> set:
    client = admin(bootstrap)
    return {str(a) for a in client.describe_acls(acl_filter).result(10)}


def produce_one(bootstrap: str, topic: str) -> KafkaError | None:
    """A fresh producer's delivery result for one record (librdkafka caches refusals)."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000})
    results = []
    try:
        producer.produce(topic, b"v", on_delivery=lambda err, _msg: results.append(err))
    except KafkaException as exc:
        return exc.args[0]
    producer.flush(15)
    assert results, "no delivery report"
    return results[0]


@pytest.fixture
def acl_broker(own_broker):
    return own_broker(**AUTHORIZER)


def test_admin_client_creates_describes_and_deletes_acls(acl_broker, topic_name):
    b = acl_broker.bootstrap
    literal = deny_all(topic_name, AclOperation.WRITE)
    prefixed = AclBinding(ResourceType.TOPIC, topic_name[:5], ResourcePatternType.PREFIXED, "User:bob", "*",
                          AclOperation.READ, AclPermissionType.ALLOW)
    group = AclBinding(ResourceType.GROUP, "g1", ResourcePatternType.LITERAL, "User:*", "10.1.2.3",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    create_acls(b, literal, prefixed, group)
    create_acls(b, literal)  # an ACL that exists is a success, and stays one ACL
    assert described(b) == {str(literal), str(prefixed), str(group)}
    # MATCH: every ACL that applies to the named topic (the literal and the covering prefix).
    match = AclBindingFilter(ResourceType.TOPIC, topic_name, ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert described(b, match) == {str(literal), str(prefixed)}
    only_prefixed = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.PREFIXED, None, None,
                                     AclOperation.ANY, AclPermissionType.ANY)
    assert described(b, only_prefixed) == {str(prefixed)}
    # Each filter answers what it matched (the second also what the first deleted), as Kafka.
    assert delete_acls(b, match, ANY_ACL) == [{str(literal), str(prefixed)}, {str(literal), str(prefixed), str(group)}]
    assert described(b) == set()


def test_without_an_authorizer_acl_requests_answer_security_disabled(broker):
    with RawClient(broker.bootstrap) as raw:  # (librdkafka shows this error as an empty result)
        response = raw.call(29, 3, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                                    "principal_filter": None, "host_filter": None, "operation": 1,
                                    "permission_type": 1})
    assert (response.error_code, response.error_message) == (ErrorCode.security_disabled,
                                                             "No Authorizer is configured on the broker")
    with pytest.raises(KafkaException) as err:
        create_acls(broker.bootstrap, deny_all("t"))
    assert err.value.args[0].code() == KafkaError.SECURITY_DISABLED


def test_deny_acl_refuses_producer_and_consumer_until_deleted(acl_broker, topic_name):
    b = acl_broker.bootstrap
    create_topic(b, topic_name)
    assert produce_one(b, topic_name) is None
    create_acls(b, deny_all(topic_name))
    refused = produce_one(b, topic_name)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    delete_acls(b, ANY_ACL)
    assert produce_one(b, topic_name) is None
    # Allowed to describe, denied to read: the consumer gets TOPIC_AUTHORIZATION_FAILED.
    create_acls(b, AclBinding(ResourceType.TOPIC, topic_name, ResourcePatternType.LITERAL, "User:*", "*",
                              AclOperation.DESCRIBE, AclPermissionType.ALLOW),
                deny_all(topic_name, AclOperation.READ))
    consumer = Consumer({"bootstrap.servers": b, "group.id": f"g-{topic_name}", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic_name])
        error = None
        deadline = time.monotonic() + 30
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is not None, "a record was read despite the DENY READ"
                error = msg.error()
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_auto_creation_needs_create_on_the_cluster_or_the_topic(acl_broker, topic_name):
    b = acl_broker.bootstrap

    def on_topic(operation, permission):
        return AclBinding(ResourceType.TOPIC, topic_name, ResourcePatternType.PREFIXED, "User:*", "*", operation,
                          permission)

    def on_cluster(operation, permission):
        return AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:*", "*",
                          operation, permission)

    # (The cluster now has ACLs: what they do not allow is denied, so ALTER for the ACL changes.)
    create_acls(b, on_cluster(AclOperation.CREATE, AclPermissionType.DENY),
                on_cluster(AclOperation.ALTER, AclPermissionType.ALLOW),
                on_topic(AclOperation.WRITE, AclPermissionType.ALLOW),
                on_topic(AclOperation.CREATE, AclPermissionType.DENY))
    refused = produce_one(b, topic_name)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    client = admin(b)
    assert topic_name not in client.list_topics(timeout=10).topics
    create_acls(b, on_topic(AclOperation.CREATE, AclPermissionType.ALLOW))
    delete_acls(b, AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                    AclOperation.CREATE, AclPermissionType.DENY))
    deadline = time.monotonic() + 30
    while (error := produce_one(b, topic_name)) is not None and time.monotonic() < deadline:
        assert error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT), error
    assert error is None


def test_acls_survive_a_kill9_restart(acl_broker, topic_name):
    acl = deny_all(topic_name)
    create_acls(acl_broker.bootstrap, acl)
    acl_broker.restart(kill=True)
    assert described(acl_broker.bootstrap) == {str(acl)}


def test_super_users_are_not_refused(own_broker, topic_name):
    b = own_broker(**AUTHORIZER, **{"super.users": "User:ANONYMOUS"}).bootstrap
    create_topic(b, topic_name)
    create_acls(b, deny_all(topic_name))
    assert produce_one(b, topic_name) is None


def test_authorized_operations_follow_the_acls(acl_broker, topic_name):
    b = acl_broker.bootstrap
    create_topic(b, topic_name)
    create_acls(b, AclBinding(ResourceType.TOPIC, topic_name, ResourcePatternType.LITERAL, "User:*", "*",
                              AclOperation.READ, AclPermissionType.ALLOW))
    from confluent_kafka import TopicCollection

    client = admin(b)
    futures = client.describe_topics(TopicCollection([topic_name]), include_authorized_operations=True)
    ops = {op.name for op in futures[topic_name].result(10).authorized_operations}
    assert ops == {"READ", "DESCRIBE"}


@pytest.mark.kafka_tools
@pytest.mark.skipif(shutil.which("java") is None, reason="Kafka's kafka-acls needs a JVM")
def test_kafka_acls_tool_adds_lists_and_removes(acl_broker, topic_name):
    b = acl_broker.bootstrap

    def kafka_acls(*args: str) -> str:
        res = subprocess.run([str(KAFKA_RUN), "kafka-acls", "--bootstrap-server", b, *args], capture_output=True,
                             text=True, timeout=90, stdin=subprocess.DEVNULL, check=False)
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout

    kafka_acls("--add", "--deny-principal", "User:*", "--operation", "All", "--deny-host", "*", "--topic", topic_name)
    listed = kafka_acls("--list", "--topic", topic_name)
    assert "principal=User:*, host=*, operation=ALL, permissionType=DENY" in listed
    assert described(b) == {str(deny_all(topic_name))}
    kafka_acls("--remove", "--force", "--deny-principal", "User:*", "--operation", "All", "--deny-host", "*",
               "--topic", topic_name)
    assert described(b) == set()


def test_a_denied_transactional_id_fails_init_transactions(acl_broker, topic_name):
    b = acl_broker.bootstrap
    txn_id = f"txn-{topic_name}"
    create_acls(b, AclBinding(ResourceType.TRANSACTIONAL_ID, txn_id, ResourcePatternType.LITERAL, "User:*", "*",
                              AclOperation.WRITE, AclPermissionType.DENY))
    producer = Producer({"bootstrap.servers": b, "transactional.id": txn_id})
    with pytest.raises(KafkaException) as err:
        producer.init_transactions(20)
    assert err.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_a_denied_group_fails_the_consumer(acl_broker, topic_name):
    b = acl_broker.bootstrap
    create_topic(b, topic_name)
    group = f"g-{topic_name}"
    create_acls(b, AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:*", "*",
                              AclOperation.ALL, AclPermissionType.DENY))
    consumer = Consumer({"bootstrap.servers": b, "group.id": group})
    try:
        consumer.subscribe([topic_name])
        error = None
        deadline = time.monotonic() + 30
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is not None:
                error = msg.error()
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()
