"""The admin APIs through real admin clients (confluent-kafka/librdkafka and kafka-python):
DeleteTopics, DeleteRecords, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
CreatePartitions, DescribeCluster, DescribeTopicPartitions, with their effects and their
error codes; the authorized-operations fields of Metadata, DescribeCluster, DescribeGroups and
DescribeTopicPartitions; ListConfigResources and AlterReplicaLogDirs on the wire. Restart and broker-config cases use their own broker; the rest share one.
"""

from __future__ import annotations

import io
import socket
import struct
import time
import uuid

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    ResourceType,
)
from kafka.admin import ConfigResource as KPConfigResource
from kafka.admin import ConfigResourceType as KPConfigResourceType
from kafka.admin import KafkaAdminClient

from protocol.errors import ErrorCode
from tests.support.clients import admin as new_admin
from tests.support.clients import create_topic
from tests.support.raw import RawClient

TIMEOUT = 15
_ADMINS: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _admins_released():
    """The module's clients go with it: the session broker outlives them, and a client left
    alive at exit logs connection errors once that broker stops."""
    yield
    _ADMINS.clear()


def admin(bootstrap: str):
    """One AdminClient per broker address, kept alive: a future of a destroyed client never resolves."""
    if bootstrap not in _ADMINS:
        _ADMINS[bootstrap] = new_admin(bootstrap)
    return _ADMINS[bootstrap]


# --------------------------------------------------------------------------- helpers
def kafka_error(fut) -> KafkaError:
    with pytest.raises(KafkaException) as ei:
        fut.result(timeout=TIMEOUT)
    return ei.value.args[0]


def produce(bootstrap: str, topic: str, n: int, partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    errors = []
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=partition,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(TIMEOUT) == 0
    assert not errors, errors


def first_offset_from_earliest(bootstrap: str, topic: str, partition: int = 0) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, partition, -2)])  # OFFSET_BEGINNING
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            return m.offset()
        raise AssertionError("no record consumed")
    finally:
        c.close()


def describe_topic_configs(bootstrap: str, topic: str, **kw) -> dict[str, ConfigEntry]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return admin(bootstrap).describe_configs([res], **kw)[res].result(timeout=TIMEOUT)


def incremental(bootstrap: str, rtype, name: str, entries: list[tuple[str, str | None, AlterConfigOpType]],
                **kw):
    res = ConfigResource(rtype, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries])
    return admin(bootstrap).incremental_alter_configs([res], **kw)[res]


def raw_request(bootstrap: str, key: int, version: int, body):
    """One request over a plain socket, for what neither client sends (the cluster-default
    BROKER resource, whose name is empty)."""
    from kio.serial import entity_reader, entity_writer

    from protocol.api import (
        request_class,
        request_header_version,
        response_class,
        response_header_version,
    )
    out = io.BytesIO()
    entity_writer(request_class(key, version))(out, body)
    header = struct.pack(">hhih", key, version, 7, 4) + b"test"
    if request_header_version(key, version) >= 2:
        header += b"\x00"
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
        payload = header + out.getvalue()
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        f = sock.makefile("rb")
        (size,) = struct.unpack(">i", f.read(4))
        frame = f.read(size)
    pos = 4 + (1 if response_header_version(key, version) >= 1 else 0)
    return entity_reader(response_class(key, version))(frame, pos)[0]


def raw_describe_configs(bootstrap: str, rtype: int, name: str) -> dict:
    from kio.schema.describe_configs.v4.request import (
        DescribeConfigsRequest,
        DescribeConfigsResource,
    )
    resp = raw_request(bootstrap, 32, 4, DescribeConfigsRequest(
        resources=(DescribeConfigsResource(resource_type=rtype, resource_name=name, configuration_keys=None),),
        include_synonyms=True, include_documentation=True))
    (result,) = resp.results
    assert result.error_code == 0, result
    return {c.name: c for c in result.configs}


def cluster_default_configs(bootstrap: str) -> dict[str, str | None]:
    return {k: c.value for k, c in raw_describe_configs(bootstrap, 4, "").items()}


def alter_cluster_default(bootstrap: str, key: str, value: str | None, op: int = 0):
    from kio.schema.incremental_alter_configs.v1.request import (
        AlterableConfig,
        AlterConfigsResource,
        IncrementalAlterConfigsRequest,
    )
    resp = raw_request(bootstrap, 44, 1, IncrementalAlterConfigsRequest(
        resources=(AlterConfigsResource(resource_type=4, resource_name="", configs=(
            AlterableConfig(name=key, config_operation=op, value=value),)),),
        validate_only=False))
    (result,) = resp.responses
    return result


def kp_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT * 1000)


# --------------------------------------------------------------------------- CreatePartitions
def test_other_clients_are_served_while_a_large_create_topics_makes_its_logs(broker, topic_name):
    """The embedded store makes a CreateTopics' logs off the event loop: while 4000 logs are
    being made, another connection's Metadata already lists the topic (the record is written
    first, as KRaft's is) instead of waiting behind the request, and the create then succeeds
    with every partition led."""
    import threading

    answered: dict[str, object] = {}

    def create() -> None:
        with RawClient(broker.bootstrap, timeout=300) as c:
            r = c.call(19, 7, {"timeout": 300000, "validate_only": False, "topics": [
                {"name": topic_name, "num_partitions": 4000, "replication_factor": 1, "assignments": [],
                 "configs": []}]})
        answered["create"] = r.topics[0].error_code

    creating = threading.Thread(target=create)
    creating.start()
    seen_while_creating = None
    try:
        with RawClient(broker.bootstrap) as other:
            while "create" not in answered and creating.is_alive():
                t = other.call(3, 12, {"topics": [{"name": topic_name, "topic_id": None}],
                                       "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False}).topics[0]
                if t.error_code == 0 and "create" not in answered:
                    seen_while_creating = len(t.partitions)
                    break
    finally:
        creating.join(300)
    try:
        assert answered.get("create") == 0
        assert seen_while_creating == 4000
        with RawClient(broker.bootstrap) as c:
            t = c.call(3, 12, {"topics": [{"name": topic_name, "topic_id": None}], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False}).topics[0]
        assert len(t.partitions) == 4000 and {p.leader_id for p in t.partitions} == {1}
    finally:
        with RawClient(broker.bootstrap, timeout=120) as c:
            c.call(20, 6, {"topics": [{"name": topic_name, "topic_id": None}], "timeout": 60000})


def test_create_partitions(broker, topic_name):
    b = broker.bootstrap
    create_topic(b, topic_name, 1)
    a = admin(b)
    # validate_only changes nothing
    a.create_partitions([NewPartitions(topic_name, 3)], validate_only=True)[topic_name].result(TIMEOUT)
    md = a.list_topics(topic_name, timeout=TIMEOUT)
    assert len(md.topics[topic_name].partitions) == 1

    a.create_partitions([NewPartitions(topic_name, 3)])[topic_name].result(TIMEOUT)
    md = a.list_topics(topic_name, timeout=TIMEOUT)
    assert sorted(md.topics[topic_name].partitions) == [0, 1, 2]
    produce(b, topic_name, 3, partition=2)
    assert first_offset_from_earliest(b, topic_name, partition=2) == 0

    err = kafka_error(a.create_partitions([NewPartitions(topic_name, 2)])[topic_name])
    assert err.code() == KafkaError.INVALID_PARTITIONS and "would not be an increase" in err.str()
    err = kafka_error(a.create_partitions([NewPartitions(topic_name, 3)])[topic_name])
    assert err.code() == KafkaError.INVALID_PARTITIONS and "already has 3" in err.str()
    err = kafka_error(a.create_partitions([NewPartitions(topic_name + "-nope", 4)])[topic_name + "-nope"])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    err = kafka_error(a.create_partitions([NewPartitions(topic_name, 5, replica_assignment=[[1]])])[topic_name])
    assert err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    err = kafka_error(a.create_partitions([NewPartitions(topic_name, 4, replica_assignment=[[7]])])[topic_name])
    assert err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    a.create_partitions([NewPartitions(topic_name, 4, replica_assignment=[[1]])])[topic_name].result(TIMEOUT)

    # the Java admin's describeTopics (DescribeTopicPartitions) through confluent's Metadata view
    from confluent_kafka import TopicCollection
    desc = a.describe_topics(TopicCollection([topic_name]))[topic_name].result(TIMEOUT)
    assert [p.id for p in desc.partitions] == [0, 1, 2, 3]


def test_create_partitions_kafka_python(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    kp = kp_admin(broker.bootstrap)
    try:
        kp.create_partitions({topic_name: 2})
        assert len(kp.describe_topics([topic_name])[0]["partitions"]) == 2
        from kafka.errors import InvalidPartitionsError
        with pytest.raises(InvalidPartitionsError):
            kp.create_partitions({topic_name: 1})
    finally:
        kp.close()
    produce(broker.bootstrap, topic_name, 1, partition=1)


# --------------------------------------------------------------------------- DeleteRecords
def test_delete_records(broker, topic_name):
    b = broker.bootstrap
    create_topic(b, topic_name, 1)
    produce(b, topic_name, 10)
    a = admin(b)
    res = a.delete_records([TopicPartition(topic_name, 0, 4)])
    deleted = next(iter(res.values())).result(TIMEOUT)
    assert deleted.low_watermark == 4
    assert first_offset_from_earliest(b, topic_name) == 4
    c = Consumer({"bootstrap.servers": b, "group.id": "wm"})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=TIMEOUT) == (4, 10)
    finally:
        c.close()
    # below the current start: unchanged
    assert next(iter(a.delete_records([TopicPartition(topic_name, 0, 2)]).values())).result(TIMEOUT).low_watermark == 4
    # above the high watermark
    err = kafka_error(next(iter(a.delete_records([TopicPartition(topic_name, 0, 11)]).values())))
    assert err.code() == KafkaError.OFFSET_OUT_OF_RANGE
    # -1: everything up to the high watermark
    assert next(iter(a.delete_records([TopicPartition(topic_name, 0, -1)]).values())).result(TIMEOUT).low_watermark == 10


def test_delete_records_compacted_topic_refused(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1, {"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic_name, key=b"k", value=b"v")
    p.flush(TIMEOUT)
    res = admin(broker.bootstrap).delete_records([TopicPartition(topic_name, 0, 1)])
    assert kafka_error(next(iter(res.values()))).code() == KafkaError.POLICY_VIOLATION


def test_delete_records_kafka_python(broker, topic_name):
    from kafka.structs import TopicPartition as KPTopicPartition
    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, 5)
    kp = kp_admin(broker.bootstrap)
    try:
        out = kp.delete_records({KPTopicPartition(topic_name, 0): 3})
    finally:
        kp.close()
    assert out[KPTopicPartition(topic_name, 0)]["low_watermark"] == 3


# --------------------------------------------------------------------------- DescribeConfigs
def test_describe_configs_topic(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1, {"retention.ms": "3600000"})
    cfg = describe_topic_configs(broker.bootstrap, topic_name)
    r = cfg["retention.ms"]
    assert r.value == "3600000" and r.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not r.is_default and not r.is_read_only and not r.is_sensitive
    assert next((s.name, s.value, s.source) for s in r.synonyms.values()) == \
        ("retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    cp = cfg["cleanup.policy"]
    assert cp.value == "delete" and cp.source == ConfigSource.DEFAULT_CONFIG.value and cp.is_default
    assert ("log.cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG.value) in \
        [(s.name, s.value, s.source) for s in cp.synonyms.values()]
    assert cfg["segment.bytes"].value == "1073741824"

    res = ConfigResource(ResourceType.TOPIC, topic_name + "-missing")
    err = kafka_error(admin(broker.bootstrap).describe_configs([res])[res])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_configs_broker(broker):
    a = admin(broker.bootstrap)
    res = ConfigResource(ResourceType.BROKER, "1")
    cfg = a.describe_configs([res])[res].result(TIMEOUT)
    assert cfg["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value and cfg["log.dirs"].is_read_only
    assert cfg["num.partitions"].value == "1" and cfg["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value
    assert cfg["delete.topic.enable"].value == "true"
    assert not cfg["log.retention.ms"].is_read_only
    # the cluster-wide default resource (empty name) lists only dynamic defaults
    assert cluster_default_configs(broker.bootstrap) == {}


def test_describe_configs_kafka_python(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1, {"max.message.bytes": "2000000"})
    kp = kp_admin(broker.bootstrap)
    try:
        topic = kp.describe_configs([KPConfigResource(KPConfigResourceType.TOPIC, topic_name)],
                                    include_synonyms=True, config_filter="all")
        brk = kp.describe_configs([KPConfigResource(KPConfigResourceType.BROKER, "1")], config_filter="all")
        only = kp.describe_configs([KPConfigResource(KPConfigResourceType.TOPIC, topic_name,
                                                     configs={"max.message.bytes": None})],
                                   config_filter="all")
    finally:
        kp.close()
    entries = topic["topic"][topic_name]
    assert entries["max.message.bytes"]["value"] == "2000000"
    assert entries["cleanup.policy"]["value"] == "delete"
    assert "log.dirs" in brk["broker"]["1"]
    assert list(only["topic"][topic_name]) == ["max.message.bytes"]


# --------------------------------------------------------------------------- AlterConfigs
def test_incremental_alter_configs_topic(broker, topic_name):
    b = broker.bootstrap
    create_topic(b, topic_name, 1)
    incremental(b, ResourceType.TOPIC, topic_name, [
        ("retention.ms", "60000", AlterConfigOpType.SET),
        ("cleanup.policy", "compact", AlterConfigOpType.APPEND),
    ]).result(TIMEOUT)
    cfg = describe_topic_configs(b, topic_name)
    assert cfg["retention.ms"].value == "60000"
    assert cfg["cleanup.policy"].value == "delete,compact"
    assert cfg["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    incremental(b, ResourceType.TOPIC, topic_name, [
        ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT),
        ("retention.ms", None, AlterConfigOpType.DELETE),
    ]).result(TIMEOUT)
    cfg = describe_topic_configs(b, topic_name)
    assert cfg["cleanup.policy"].value == "compact"
    assert cfg["retention.ms"].value == "604800000" and cfg["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    # validate_only changes nothing
    incremental(b, ResourceType.TOPIC, topic_name, [("retention.ms", "1000", AlterConfigOpType.SET)],
                validate_only=True).result(TIMEOUT)
    assert describe_topic_configs(b, topic_name)["retention.ms"].value == "604800000"

    err = kafka_error(incremental(b, ResourceType.TOPIC, topic_name, [("retention.ms", "soon", AlterConfigOpType.SET)]))
    assert err.code() == KafkaError.INVALID_CONFIG and "retention.ms" in err.str()
    err = kafka_error(incremental(b, ResourceType.TOPIC, topic_name, [("segment.bytes", "1", AlterConfigOpType.SET)]))
    assert err.code() == KafkaError.INVALID_CONFIG and "segment.bytes" in err.str()
    err = kafka_error(incremental(b, ResourceType.TOPIC, topic_name, [("no.such.key", "1", AlterConfigOpType.SET)]))
    assert err.code() == KafkaError.INVALID_CONFIG and "no.such.key" in err.str()
    err = kafka_error(incremental(b, ResourceType.TOPIC, topic_name, [("retention.ms", "1", AlterConfigOpType.APPEND)]))
    assert err.code() == KafkaError.INVALID_CONFIG and "not LIST" in err.str()
    err = kafka_error(incremental(b, ResourceType.TOPIC, topic_name + "-missing",
                                  [("retention.ms", "1", AlterConfigOpType.SET)]))
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_alter_configs_legacy_replaces_overrides(broker, topic_name):
    b = broker.bootstrap
    create_topic(b, topic_name, 1, {"retention.ms": "3600000", "segment.bytes": "1048576"})
    res = ConfigResource(ResourceType.TOPIC, topic_name, set_config={"max.message.bytes": "5000"})
    admin(b).alter_configs([res])[res].result(TIMEOUT)
    cfg = describe_topic_configs(b, topic_name)
    assert cfg["max.message.bytes"].value == "5000"
    assert cfg["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert cfg["segment.bytes"].value == "1073741824"
    bad = ConfigResource(ResourceType.TOPIC, topic_name, set_config={"min.insync.replicas": "0"})
    err = kafka_error(admin(b).alter_configs([bad])[bad])
    assert err.code() == KafkaError.INVALID_CONFIG and "min.insync.replicas" in err.str()


def test_alter_configs_kafka_python(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    kp = kp_admin(broker.bootstrap)
    try:
        kp.alter_configs([KPConfigResource(KPConfigResourceType.TOPIC, topic_name,
                                           configs={"retention.bytes": "123456"})])
    finally:
        kp.close()
    assert describe_topic_configs(broker.bootstrap, topic_name)["retention.bytes"].value == "123456"


def test_broker_configs_read_only_refused(broker):
    err = kafka_error(incremental(broker.bootstrap, ResourceType.BROKER, "1",
                                  [("num.partitions", "3", AlterConfigOpType.SET)]))
    assert err.code() == KafkaError.INVALID_REQUEST and "dynamically" in err.str()


# --------------------------------------------------------------------------- restart persistence
def test_configs_persist_across_restart(own_broker, topic_name):
    bp = own_broker()
    b = bp.bootstrap
    create_topic(b, topic_name, 1)
    incremental(b, ResourceType.TOPIC, topic_name, [("retention.ms", "7200000", AlterConfigOpType.SET)]).result(TIMEOUT)
    # a dynamic cluster-wide default and a per-broker value
    assert alter_cluster_default(b, "log.retention.bytes", "99999999").error_code == 0
    incremental(b, ResourceType.BROKER, "1", [("log.segment.bytes", "2097152", AlterConfigOpType.SET)]).result(TIMEOUT)
    produce(b, topic_name, 5)
    admin(b).delete_records([TopicPartition(topic_name, 0, 2)])
    time.sleep(0.2)

    bp.restart()

    cfg = describe_topic_configs(b, topic_name)
    assert cfg["retention.ms"].value == "7200000"
    assert cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert cfg["retention.bytes"].value == "99999999"
    assert cfg["retention.bytes"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert cfg["segment.bytes"].value == "2097152"
    assert cfg["segment.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    raw = raw_describe_configs(b, 2, topic_name)["segment.bytes"]
    assert [(s.name, s.value, s.source) for s in raw.synonyms] == [
        ("log.segment.bytes", "2097152", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG.value)]
    assert raw.config_type == 3 and raw.documentation  # INT, documented
    assert cluster_default_configs(b) == {"log.retention.bytes": "99999999"}
    bad = alter_cluster_default(b, "log.retention.bytes", "lots")
    assert bad.error_code == KafkaError.INVALID_REQUEST and "log.retention.bytes" in bad.error_message
    assert first_offset_from_earliest(b, topic_name) == 2

    # DELETE returns to the static value
    incremental(b, ResourceType.BROKER, "1", [("log.segment.bytes", None, AlterConfigOpType.DELETE)]).result(TIMEOUT)
    assert describe_topic_configs(b, topic_name)["segment.bytes"].value == "1073741824"


# --------------------------------------------------------------------------- DescribeCluster
def test_describe_cluster(broker):
    d = admin(broker.bootstrap).describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert d.cluster_id and d.controller.id == 1
    assert [(n.id, n.host, n.port) for n in d.nodes] == [(1, "127.0.0.1", broker.port)]
    kp = kp_admin(broker.bootstrap)
    try:
        info = kp.describe_cluster()
    finally:
        kp.close()
    assert info["cluster_id"] == d.cluster_id and info["controller_id"] == 1


# --------------------------------------------------------------------------- DescribeTopicPartitions
def test_describe_topic_partitions_pagination(broker, topic_name):
    a_name, b_name = topic_name + "-a", topic_name + "-b"
    create_topic(broker.bootstrap, a_name, 3)
    create_topic(broker.bootstrap, b_name, 2)
    kp = kp_admin(broker.bootstrap)
    try:
        first = kp.describe_topic_partitions([b_name, a_name], response_partition_limit=2)
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in first["topics"]] == \
            [(a_name, [0, 1])]
        assert first["next_cursor"] == {"topic_name": a_name, "partition_index": 2}
        second = kp.describe_topic_partitions([b_name, a_name], response_partition_limit=2,
                                              cursor=first["next_cursor"])
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in second["topics"]] == \
            [(a_name, [2]), (b_name, [0])]
        assert second["next_cursor"] == {"topic_name": b_name, "partition_index": 1}
        whole = kp.describe_topic_partitions([a_name, b_name, topic_name + "-none"])
        assert whole["next_cursor"] is None
        errors = {t["name"]: t["error_code"] for t in whole["topics"]}
        assert errors == {a_name: 0, b_name: 0, topic_name + "-none": 3}
        p0 = whole["topics"][0]["partitions"][0]
        assert p0["leader_id"] == 1 and p0["replica_nodes"] == [1] and p0["isr_nodes"] == [1]
    finally:
        kp.close()


# --------------------------------------------------------------------------- DeleteTopics
def test_delete_topics(broker, topic_name):
    b = broker.bootstrap
    create_topic(b, topic_name, 2)
    produce(b, topic_name, 3)
    a = admin(b)
    a.delete_topics([topic_name], operation_timeout=10)[topic_name].result(TIMEOUT)
    assert topic_name not in a.list_topics(timeout=TIMEOUT).topics
    res = ConfigResource(ResourceType.TOPIC, topic_name)
    assert kafka_error(a.describe_configs([res])[res]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    err = kafka_error(a.delete_topics([topic_name], operation_timeout=10)[topic_name])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # the name can be reused, starting from offset 0
    create_topic(b, topic_name, 1)
    produce(b, topic_name, 1)
    assert first_offset_from_earliest(b, topic_name) == 0


def test_delete_topics_kafka_python_by_name_and_id(broker, topic_name):
    from kafka.errors import UnknownTopicIdError, UnknownTopicOrPartitionError
    by_name, by_id = topic_name + "-n", topic_name + "-i"
    create_topic(broker.bootstrap, by_name, 1)
    create_topic(broker.bootstrap, by_id, 1)
    kp = kp_admin(broker.bootstrap)
    try:
        topic_id = next(t["topic_id"] for t in kp.describe_topics([by_id]))
        out = kp.delete_topics([by_name, uuid.UUID(str(topic_id))])
        assert {t["name"]: t["error_code"] for t in out["topics"]} == {by_name: 0, by_id: 0}
        with pytest.raises(UnknownTopicOrPartitionError):
            kp.delete_topics([by_name])
        with pytest.raises(UnknownTopicIdError):
            kp.delete_topics([uuid.uuid4()])
    finally:
        kp.close()
    assert not ({by_name, by_id} & set(admin(broker.bootstrap).list_topics(timeout=TIMEOUT).topics))


def test_delete_topics_disabled(own_broker, topic_name):
    bp = own_broker(**{"delete.topic.enable": "false"})
    create_topic(bp.bootstrap, topic_name, 1)
    err = kafka_error(admin(bp.bootstrap).delete_topics([topic_name], operation_timeout=10)[topic_name])
    assert err.code() == KafkaError.TOPIC_DELETION_DISABLED
    assert topic_name in admin(bp.bootstrap).list_topics(timeout=TIMEOUT).topics


# --------------------------------------------------------------------------- authorized operations
# No authorizer: every operation a resource type supports, as Kafka 4.3.1 answers.
TOPIC_OPERATIONS = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
GROUP_OPERATIONS = {"READ", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
CLUSTER_OPERATIONS = {"CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                      "IDEMPOTENT_WRITE"}


def test_authorized_operations_through_confluent_admin(broker, topic_name):
    from confluent_kafka import TopicCollection

    create_topic(broker.bootstrap, topic_name, 1)
    group = f"g-{topic_name}"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    c.commit(offsets=[TopicPartition(topic_name, 0, 1)], asynchronous=False)
    c.close()
    a = admin(broker.bootstrap)
    cluster = a.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert {op.name for op in cluster.authorized_operations} == CLUSTER_OPERATIONS
    [topic] = a.describe_topics(TopicCollection([topic_name]), include_authorized_operations=True).values()
    assert {op.name for op in topic.result(TIMEOUT).authorized_operations} == TOPIC_OPERATIONS
    [described] = a.describe_consumer_groups([group], include_authorized_operations=True).values()
    assert {op.name for op in described.result(TIMEOUT).authorized_operations} == GROUP_OPERATIONS
    assert a.describe_cluster().result(TIMEOUT).authorized_operations is None  # not asked


def test_authorized_operations_on_the_wire(broker, topic_name):
    """The exact bit fields (Utils.to32BitField of the AclOperation codes) and where Kafka
    answers Int32.MinValue instead: not asked, an unknown topic id, a group with an error."""

    create_topic(broker.bootstrap, topic_name, 1)
    not_asked = -2147483648
    with RawClient(broker.bootstrap) as raw:
        def metadata(version: int, topics, **asked):
            return raw.call(3, version, {"topics": topics, "allow_auto_topic_creation": False,
                                         "include_cluster_authorized_operations": False,
                                         "include_topic_authorized_operations": False, **asked})

        r = metadata(8, [{"name": topic_name}, {"name": "no-such-topic"}, {"name": "bad name!"}],
                     include_topic_authorized_operations=True, include_cluster_authorized_operations=True)
        assert [t.topic_authorized_operations for t in r.topics] == [3576, 3576, 3576]
        assert r.cluster_authorized_operations == 8096
        r = metadata(10, [{"name": topic_name, "topic_id": uuid.UUID(int=0)}])
        assert (r.topics[0].topic_authorized_operations, r.cluster_authorized_operations) == (not_asked, not_asked)
        r = metadata(12, [{"name": topic_name, "topic_id": uuid.UUID(int=0)}], include_topic_authorized_operations=True)
        assert [(t.error_code, t.topic_authorized_operations) for t in r.topics] == [(0, 3576)]
        r = metadata(12, [{"name": None, "topic_id": uuid.uuid4()}], include_topic_authorized_operations=True)
        assert [(t.error_code, t.topic_authorized_operations) for t in r.topics] == [(100, not_asked)]
        assert raw.call(60, 1, {"include_cluster_authorized_operations": True,
                                "endpoint_type": 1}).cluster_authorized_operations == 8096
        assert raw.call(60, 0, {"include_cluster_authorized_operations": False}).cluster_authorized_operations \
            == not_asked
        groups = raw.call(15, 5, {"groups": ["never-seen", ""], "include_authorized_operations": True}).groups
        assert [(g.group_state, g.authorized_operations) for g in groups] == [("Dead", 3400), ("Dead", 3400)]
        groups = raw.call(15, 3, {"groups": ["never-seen"], "include_authorized_operations": False}).groups
        assert groups[0].authorized_operations == not_asked
        # v6 (KIP-1043): an unknown group is an error, so it gets no operations.
        groups = raw.call(15, 6, {"groups": ["never-seen"], "include_authorized_operations": True}).groups
        assert [(g.error_code, g.error_message, g.group_state, g.authorized_operations) for g in groups] == [
            (69, "Group never-seen not found.", "Dead", not_asked)]
        r = raw.call(75, 0, {"topics": [{"name": topic_name}, {"name": "no-such-topic"}],
                             "response_partition_limit": 10, "cursor": None})
        assert [(t.name, t.error_code, t.topic_authorized_operations) for t in r.topics] == sorted([
            ("no-such-topic", 3, 3576), (topic_name, 0, 3576)])


# --------------------------------------------------------------------------- ListConfigResources
def test_list_config_resources(broker, topic_name):
    """Pinned against Kafka 4.3.1: v0 lists client-metrics resources only (none here); v1 lists
    broker loggers, brokers, then topics; an unknown type fails the whole request."""

    create_topic(broker.bootstrap, topic_name, 1)
    with RawClient(broker.bootstrap) as raw:
        r = raw.call(74, 0, {})
        assert (r.error_code, r.config_resources) == (0, ())

        def listed(types: list[int]) -> tuple[int, list[tuple[str, int]]]:
            r = raw.call(74, 1, {"resource_types": types})
            return r.error_code, [(c.resource_name, c.resource_type) for c in r.config_resources]

        # The broker is shared: other modules' group configs (type 32) may be listed too.
        groups = listed([32])
        assert groups[0] == 0 and {kind for _, kind in groups[1]} <= {32}
        error, resources = listed([])
        resources = [r for r in resources if r not in groups[1]]
        assert error == 0 and resources[:2] == [("1", 8), ("1", 4)]
        topics = [name for name, kind in resources[2:] if kind == 2]
        assert len(topics) == len(resources) - 2 and topic_name in topics  # in no particular order
        assert listed([4]) == (0, [("1", 4)])
        assert [r for r in listed([32, 8, 4])[1] if r not in groups[1]] == [("1", 8), ("1", 4)]
        assert listed([16]) == (0, [])  # no client-metrics subscriptions
        assert listed([2, 1]) == listed([0]) == (35, [])  # UNSUPPORTED_VERSION


# --------------------------------------------------------------------------- AlterReplicaLogDirs
def test_alter_replica_log_dirs(broker, topic_name):
    """Pinned against Kafka 4.3.1: the broker's own directory (absolute, as DescribeLogDirs
    names it) is a no-op success; any other path is LOG_DIR_NOT_FOUND; unknown partitions
    UNKNOWN_TOPIC_OR_PARTITION; a name too long for the future-log directory
    INVALID_TOPIC_EXCEPTION."""

    create_topic(broker.bootstrap, topic_name, 2)
    with RawClient(broker.bootstrap) as raw:
        [log_dir] = [d.log_dir for d in raw.call(35, 4, {"topics": None}).results]

        def alter(version: int, path: str, topics: dict[str, list[int]]) -> set[tuple[str, int, int]]:
            r = raw.call(34, version, {"dirs": [{"path": path, "topics": [
                {"name": t, "partitions": ps} for t, ps in topics.items()]}]})
            return {(t.topic_name, p.partition_index, p.error_code) for t in r.results for p in t.partitions}

        for version in (1, 2):
            assert alter(version, log_dir, {topic_name: [0, 1, 9], "no-such-topic": [0], "y" * 220: [0]}) == {
                (topic_name, 0, 0), (topic_name, 1, 0), (topic_name, 9, 3), ("no-such-topic", 0, 3),
                ("y" * 220, 0, 17)}
            assert alter(version, log_dir + "/", {topic_name: [0]}) == {(topic_name, 0, 57)}  # LOG_DIR_NOT_FOUND
            assert alter(version, "/elsewhere", {topic_name: [0], "no-such-topic": [0]}) == {
                (topic_name, 0, 57), ("no-such-topic", 0, 57)}


DESCRIBE_QUOTAS_CASES = [  # filter components -> Kafka 4.3.1's (error code, message)
    ([], (0, "")),
    ([("user", 2, None)], (0, "")),
    ([("foo", 2, None)], (ErrorCode.unsupported_version, "Unsupported entity type foo")),
    ([("", 2, None)], (ErrorCode.invalid_request, "Invalid empty entity type.")),
    ([("user", 2, None), ("user", 1, None)],
     (ErrorCode.invalid_request, "Entity type user cannot appear more than once in the filter.")),
    ([("user", 0, None)],
     (ErrorCode.invalid_request, "Request specified MATCH_TYPE_EXACT, but set match string to null.")),
    ([("ip", 2, None), ("client-id", 2, None)],
     (ErrorCode.invalid_request, "Invalid entity filter component combination. IP filter component "
                                 "should not be used with user or clientId filter component.")),
]


@pytest.mark.parametrize("components,expected", DESCRIBE_QUOTAS_CASES)
def test_describe_client_quotas_matches_nothing_and_checks_the_filter(broker, components, expected):
    with RawClient(broker.bootstrap) as c:
        r = c.call(48, 1, {"strict": False, "components": [
            {"entity_type": t, "match_type": m, "match": n} for t, m, n in components]})
    assert (r.error_code, r.error_message) == expected
    assert r.entries == (() if expected[0] == 0 else None)
