"""The admin handlers in-process: a real Broker object (metadata store, logs; no sockets), each
request built as kio's request entity, each response encoded for its version and decoded
back, so every case also checks the wire layout. Covers what the clients cannot send or
validate client-side: duplicates, ids, the cluster-default resource, cursors, versions.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest
from kio.serial import entity_reader

import broker.handlers  # noqa: F401  (registers the handlers)
from broker.broker import Broker
from broker.config import load_config
from broker.config_admin import ConfigSource
from broker.request_context import RequestContext
from protocol import codec
from protocol.api import REGISTRY, request_class, response_class
from protocol.codec import ZERO_UUID
from protocol.errors import ErrorCode
from protocol.records import build_batch

TOPIC, BROKER = 2, 4


def make_broker(tmp_path, **props) -> Broker:
    config = load_config({"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0",
                          "metrics.listener": "", **props})
    b = Broker(config)
    b.replica_manager.open_all()
    return b


@pytest.fixture
def b(tmp_path):
    brk = make_broker(tmp_path)
    yield brk
    brk.log_manager.close()


def call(brk: Broker, key: int, version: int, body: dict):
    """Run the handler for ``key`` v``version``; return the decoded kio response."""
    request = codec.build(request_class(key, version), body)
    header = codec.RequestHeader(key, version, 1, "unit", 0)
    result = asyncio.run(REGISTRY[key].handler(RequestContext(brk, header, None), request))
    raw = codec.encode_body(key, version, result)
    resp, size = entity_reader(response_class(key, version))(raw, 0)
    assert size == len(raw)
    return resp


def produce(brk: Broker, topic: str, n: int, partition: int = 0) -> None:
    for i in range(n):
        brk.replica_manager.append(topic, partition, bytes(build_batch([(b"k", b"v%d" % i)], timestamp=1000)))


# --------------------------------------------------------------------------- CreateTopics
def _creatable(name: str, partitions: int = 2) -> dict:
    return {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
            "configs": [{"name": "retention.ms", "value": "1000"}]}


def test_create_topics_answers_each_topic_created_refused_or_only_validated(b):
    b.control.replication.create_local_topic("exists", 1, {})
    body = {"timeout": 1000, "topics": [_creatable("new"), _creatable("exists"), _creatable("dup"),
                                        _creatable("dup"), _creatable("none", 0)]}
    dry = call(b, 19, 7, {**body, "validate_only": True})
    assert [(t.name, t.error_code, t.topic_id) for t in dry.topics][:2] == [
        ("new", ErrorCode.none, None), ("exists", ErrorCode.topic_already_exists, None)]
    assert "new" not in b.metadata.topics
    resp = call(b, 19, 7, {**body, "validate_only": False})
    by_name = {t.name: t for t in resp.topics}
    assert [t.name for t in resp.topics] == ["new", "exists", "dup", "none"]  # a name given twice: one result
    assert by_name["new"].error_code == ErrorCode.none
    assert by_name["new"].topic_id == b.metadata.topics["new"].uuid and by_name["new"].num_partitions == 2
    assert ("retention.ms", "1000") in {(c.name, c.value) for c in by_name["new"].configs}
    assert (by_name["exists"].error_code, by_name["dup"].error_code, by_name["none"].error_code) == (
        ErrorCode.topic_already_exists, ErrorCode.invalid_request, ErrorCode.invalid_partitions)
    assert b.replica_manager.get("new", 1).log.config.retention_ms == 1000


# --------------------------------------------------------------------------- DeleteTopics
@pytest.mark.parametrize("version", [1, 3, 4, 5])
def test_delete_topics_by_name_all_versions(b, version):
    b.control.replication.create_local_topic("a", 2, {})
    resp = call(b, 20, version, {"topic_names": ["a", "missing"], "timeout": 1000})
    codes = {r.name: r.error_code for r in resp.responses}
    assert codes == {"a": ErrorCode.none, "missing": ErrorCode.unknown_topic_or_partition}
    assert "a" not in b.metadata.topics and ("a", 0) not in b.replica_manager.partitions


def test_delete_topics_v6_by_id_and_errors(b):
    t = b.control.replication.create_local_topic("byid", 1, {})
    b.control.replication.create_local_topic("dup", 1, {})
    b.control.replication.create_local_topic("__consumer_offsets", 1, {})
    missing = uuid.uuid4()
    resp = call(b, 20, 6, {"timeout": 1000, "topics": [
        {"name": None, "topic_id": t.uuid},
        {"name": None, "topic_id": missing},
        {"name": "dup", "topic_id": ZERO_UUID}, {"name": "dup", "topic_id": ZERO_UUID},
        {"name": "x", "topic_id": t.uuid},
        {"name": None, "topic_id": ZERO_UUID},
        {"name": "__consumer_offsets", "topic_id": ZERO_UUID},
    ]})
    got = [(r.name, r.topic_id, r.error_code, r.error_message) for r in resp.responses]
    assert got[0] == ("byid", t.uuid, ErrorCode.none, None)
    assert got[1][1:3] == (missing, ErrorCode.unknown_topic_id)
    assert got[2] == ("dup", None, ErrorCode.invalid_request, "Duplicate topic name.")  # zero id reads as None
    assert got[3][2] == ErrorCode.invalid_request and "both" in got[3][3]
    assert got[4][2] == ErrorCode.invalid_request and "Neither" in got[4][3]
    assert got[5][0] == "__consumer_offsets" and got[5][2] == ErrorCode.invalid_request
    assert len(got) == 6
    assert set(b.metadata.topics) == {"dup", "__consumer_offsets"}


@pytest.mark.parametrize("version,code", [(2, ErrorCode.invalid_request), (3, ErrorCode.topic_deletion_disabled)])
def test_delete_topics_disabled(tmp_path, version, code):
    brk = make_broker(tmp_path, **{"delete.topic.enable": "false"})
    brk.control.replication.create_local_topic("keep", 1, {})
    resp = call(brk, 20, version, {"topic_names": ["keep"], "timeout": 1000})
    assert [(r.name, r.error_code) for r in resp.responses] == [("keep", code)]
    assert "keep" in brk.metadata.topics


# --------------------------------------------------------------------------- DeleteRecords
@pytest.mark.parametrize("version", [0, 1, 2])
def test_delete_records(b, version):
    b.control.replication.create_local_topic("r", 1, {})
    b.control.replication.create_local_topic("__transaction_state", 1, {})
    produce(b, "r", 6)
    resp = call(b, 21, version, {"timeout": 1000, "topics": [
        {"name": "r", "partitions": [{"partition_index": 0, "offset": 3}, {"partition_index": 9, "offset": 1}]},
        {"name": "__transaction_state", "partitions": [{"partition_index": 0, "offset": 0}]},
    ]})
    parts = {(t.name, p.partition_index): (p.low_watermark, p.error_code) for t in resp.topics for p in t.partitions}
    assert parts == {("r", 0): (3, 0), ("r", 9): (-1, ErrorCode.unknown_topic_or_partition),
                     ("__transaction_state", 0): (-1, ErrorCode.invalid_topic_exception)}
    assert b.replica_manager.get("r", 0).log.log_start_offset == 3
    for offset, expect in [(-5, (-1, ErrorCode.offset_out_of_range)), (7, (-1, ErrorCode.offset_out_of_range)),
                           (-1, (6, 0))]:
        resp = call(b, 21, version, {"timeout": 1000, "topics": [
            {"name": "r", "partitions": [{"partition_index": 0, "offset": offset}]}]})
        p = resp.topics[0].partitions[0]
        assert (p.low_watermark, p.error_code) == expect, offset


# --------------------------------------------------------------------------- CreatePartitions
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_create_partitions(b, version):
    b.control.replication.create_local_topic("p", 1, {})
    resp = call(b, 37, version, {"timeout": 1000, "validate_only": False, "topics": [
        {"name": "p", "count": 3, "assignments": None},
        {"name": "twice", "count": 2, "assignments": None}, {"name": "twice", "count": 3, "assignments": None},
        {"name": "gone", "count": 2, "assignments": None},
    ]})
    codes = [(r.name, r.error_code) for r in resp.results]
    assert codes == [("p", 0), ("twice", ErrorCode.invalid_request), ("gone", ErrorCode.unknown_topic_or_partition)]
    assert len(b.metadata.topics["p"].partitions) == 3 and ("p", 2) in b.replica_manager.partitions
    cases = [
        ({"count": 3, "assignments": None}, ErrorCode.invalid_partitions),
        ({"count": 1, "assignments": None}, ErrorCode.invalid_partitions),
        ({"count": 5, "assignments": [{"broker_ids": [1]}]}, ErrorCode.invalid_replica_assignment),
        ({"count": 4, "assignments": [{"broker_ids": []}]}, ErrorCode.invalid_replica_assignment),
        ({"count": 4, "assignments": [{"broker_ids": [1, 1]}]}, ErrorCode.invalid_replica_assignment),
        ({"count": 4, "assignments": [{"broker_ids": [3]}]}, ErrorCode.invalid_replica_assignment),
    ]
    for spec, code in cases:
        resp = call(b, 37, version, {"timeout": 1000, "validate_only": False, "topics": [{"name": "p", **spec}]})
        assert resp.results[0].error_code == code, spec
    resp = call(b, 37, version, {"timeout": 1000, "validate_only": True,
                                 "topics": [{"name": "p", "count": 4, "assignments": [{"broker_ids": [1]}]}]})
    assert resp.results[0].error_code == 0 and len(b.metadata.topics["p"].partitions) == 3


# --------------------------------------------------------------------------- DescribeConfigs
@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_configs_versions(b, version):
    b.control.replication.create_local_topic("c", 1, {"retention.ms": "1000"})
    body = {"include_synonyms": True, "include_documentation": True, "resources": [
        {"resource_type": TOPIC, "resource_name": "c", "configuration_keys": ["retention.ms", "cleanup.policy"]},
        {"resource_type": TOPIC, "resource_name": "nope", "configuration_keys": None},
        {"resource_type": TOPIC, "resource_name": "bad/name", "configuration_keys": None},
        {"resource_type": BROKER, "resource_name": "1", "configuration_keys": ["log.dirs", "log.retention.hours"]},
        {"resource_type": BROKER, "resource_name": "2", "configuration_keys": None},
        {"resource_type": BROKER, "resource_name": "x", "configuration_keys": None},
        {"resource_type": 8, "resource_name": "1", "configuration_keys": None},
    ]}
    res = call(b, 32, version, body).results
    assert [r.error_code for r in res] == [0, ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_topic_exception,
                                           0, ErrorCode.invalid_request, ErrorCode.invalid_request,
                                           ErrorCode.invalid_request]
    assert res[4].error_message == "Unexpected broker id, expected 1 or empty string, but received 2"
    assert res[5].error_message == "Broker id must be an integer, but it is: x"
    topic = {c.name: c for c in res[0].configs}
    assert set(topic) == {"retention.ms", "cleanup.policy"}
    rm = topic["retention.ms"]
    assert (rm.value, rm.config_source, rm.read_only) == ("1000", ConfigSource.TOPIC_CONFIG, False)
    assert [(s.name, s.source) for s in rm.synonyms] == [("retention.ms", ConfigSource.TOPIC_CONFIG)]
    cp = topic["cleanup.policy"]
    assert [(s.name, s.value, s.source) for s in cp.synonyms] == [("log.cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG)]
    brk = {c.name: c for c in res[3].configs}
    assert brk["log.dirs"].config_source == ConfigSource.STATIC_BROKER_CONFIG and brk["log.dirs"].read_only
    assert brk["log.retention.hours"].value == "168"
    if version >= 3:
        assert cp.config_type == 7 and cp.documentation  # LIST
        assert rm.config_type == 5  # LONG


def test_describe_configs_without_synonyms_or_docs(b):
    b.control.replication.create_local_topic("c", 1, {})
    res = call(b, 32, 4, {"include_synonyms": False, "include_documentation": False, "resources": [
        {"resource_type": TOPIC, "resource_name": "c", "configuration_keys": None}]}).results[0]
    assert len(res.configs) >= 19
    assert all(c.synonyms == () and c.documentation is None for c in res.configs)
    rm = next(c for c in res.configs if c.name == "retention.ms")
    # as Kafka: log.retention.hours is a synonym listed before log.retention.ms, so it is dropped
    assert rm.value == "604800000" and rm.config_source == ConfigSource.DEFAULT_CONFIG


# --------------------------------------------------------------------------- Alter configs
def alter_inc(brk, resources, validate_only=False, version=1):
    return call(brk, 44, version, {"validate_only": validate_only, "resources": resources}).responses


def test_incremental_alter_configs_errors(b):
    b.control.replication.create_local_topic("t", 1, {})
    res = alter_inc(b, [
        {"resource_type": TOPIC, "resource_name": "t", "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "1"},
            {"name": "retention.ms", "config_operation": 0, "value": "2"}]},
        {"resource_type": TOPIC, "resource_name": "u", "configs": [{"name": "retention.ms", "config_operation": 0, "value": None}]},
        {"resource_type": TOPIC, "resource_name": "", "configs": []},
        {"resource_type": TOPIC, "resource_name": "v", "configs": [{"name": "retention.ms", "config_operation": 9, "value": "1"}]},
        {"resource_type": 16, "resource_name": "g", "configs": []},
        {"resource_type": TOPIC, "resource_name": "w", "configs": []},
        {"resource_type": TOPIC, "resource_name": "w", "configs": []},
    ])
    assert [(r.resource_name, r.error_code) for r in res] == [
        ("t", ErrorCode.invalid_request), ("u", ErrorCode.invalid_request), ("", ErrorCode.invalid_request),
        ("v", ErrorCode.invalid_request), ("g", ErrorCode.invalid_request),
        ("w", ErrorCode.invalid_request), ("w", ErrorCode.invalid_request)]
    assert res[0].error_message == "Error due to duplicate config keys"
    assert res[1].error_message == "Null value not supported for : retention.ms"
    assert res[5].error_message == "Each resource must appear at most once."


def test_incremental_alter_configs_topic_ops(b):
    b.control.replication.create_local_topic("t", 1, {"segment.bytes": "1048576"})
    ok = alter_inc(b, [{"resource_type": TOPIC, "resource_name": "t", "configs": [
        {"name": "cleanup.policy", "config_operation": 2, "value": "compact"},
        {"name": "segment.bytes", "config_operation": 1, "value": None},
        {"name": "flush.ms", "config_operation": 1, "value": None},
        {"name": "retention.bytes", "config_operation": 0, "value": "1024"}]}])
    assert ok[0].error_code == 0
    assert b.metadata.topics["t"].configs == {"cleanup.policy": "delete,compact", "retention.bytes": "1024"}
    log_cfg = b.replica_manager.get("t", 0).log.config
    assert log_cfg.retention_bytes == 1024 and log_cfg.compact and log_cfg.segment_bytes == 1073741824
    # SUBTRACT may empty the list: valid in Kafka 4.x (no deletion, no compaction).
    emptied = alter_inc(b, [{"resource_type": TOPIC, "resource_name": "t", "configs": [
        {"name": "cleanup.policy", "config_operation": 3, "value": "delete,compact"}]}])
    assert emptied[0].error_code == 0 and b.metadata.topics["t"].configs["cleanup.policy"] == ""
    log_cfg = b.replica_manager.get("t", 0).log.config
    assert not log_cfg.compact and not log_cfg.delete
    bad = alter_inc(b, [{"resource_type": TOPIC, "resource_name": "t", "configs": [
        {"name": "cleanup.policy", "config_operation": 2, "value": "archive"}]}])
    assert bad[0].error_code == ErrorCode.invalid_config and "cleanup.policy" in bad[0].error_message
    bad = alter_inc(b, [{"resource_type": TOPIC, "resource_name": "missing", "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "x"}]}])
    assert bad[0].error_code == ErrorCode.invalid_config  # values are checked before existence, as Kafka


def test_dynamic_broker_configs(b):
    b.control.replication.create_local_topic("t", 1, {})
    res = alter_inc(b, [
        {"resource_type": BROKER, "resource_name": "", "configs": [
            {"name": "log.retention.ms", "config_operation": 0, "value": "5000"},
            {"name": "log.cleanup.policy", "config_operation": 2, "value": "compact"}]},
        {"resource_type": BROKER, "resource_name": "1", "configs": [
            {"name": "log.retention.ms", "config_operation": 0, "value": "7000"}]},
        {"resource_type": BROKER, "resource_name": "2", "configs": [
            {"name": "log.retention.ms", "config_operation": 0, "value": "7000"}]},
    ]) + alter_inc(b, [
        {"resource_type": BROKER, "resource_name": "1", "configs": [
            {"name": "num.partitions", "config_operation": 0, "value": "7"}]},
    ])
    assert [r.error_code for r in res[:2]] == [0, 0]
    assert res[2].error_message == "Unexpected broker id, expected 1, but received 2"
    assert res[3].error_code == ErrorCode.invalid_request and "num.partitions" in res[3].error_message
    cfg = b.replica_manager.get("t", 0).log.config
    assert cfg.retention_ms == 7000 and cfg.cleanup_policy == "delete,compact"
    rm = next(c for c in call(b, 32, 4, {"include_synonyms": True, "include_documentation": False, "resources": [
        {"resource_type": TOPIC, "resource_name": "t", "configuration_keys": ["retention.ms"]}]}).results[0].configs)
    assert rm.value == "7000" and [(s.name, s.value, s.source) for s in rm.synonyms] == [
        ("log.retention.ms", "7000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG)]
    # legacy AlterConfigs replaces the per-broker set: log.retention.ms falls back to the cluster default
    res = call(b, 33, 2, {"validate_only": False, "resources": [
        {"resource_type": BROKER, "resource_name": "1", "configs": [{"name": "message.max.bytes", "value": "2000"}]}]})
    assert res.responses[0].error_code == 0
    cfg = b.replica_manager.get("t", 0).log.config
    assert cfg.retention_ms == 5000 and cfg.max_message_bytes == 2000
    # a new broker on the same directory starts with them
    b.log_manager.close()
    again = Broker(b.config.__class__(dict(b.dynamic_broker_configs.static), [], []))
    from broker.config_admin import load_dynamic_broker_configs
    load_dynamic_broker_configs(again)
    again.replica_manager.open_all()
    cfg = again.replica_manager.get("t", 0).log.config
    assert (cfg.retention_ms, cfg.max_message_bytes, cfg.cleanup_policy) == (5000, 2000, "delete,compact")
    again.log_manager.close()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_configs_legacy(b, version):
    b.control.replication.create_local_topic("t", 1, {"retention.ms": "1"})
    res = call(b, 33, version, {"validate_only": False, "resources": [
        {"resource_type": TOPIC, "resource_name": "t", "configs": [{"name": "segment.ms", "value": "60000"}]},
        {"resource_type": TOPIC, "resource_name": "t2", "configs": [{"name": "segment.ms", "value": "60000"}]},
        {"resource_type": TOPIC, "resource_name": "t3", "configs": [{"name": "segment.ms", "value": None}]},
    ]}).responses
    assert [r.error_code for r in res] == [0, ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_request]
    assert b.metadata.topics["t"].configs == {"segment.ms": "60000"}


# --------------------------------------------------------------------------- DescribeCluster
@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster(b, version):
    resp = call(b, 60, version, {"include_cluster_authorized_operations": True, "endpoint_type": 1,
                                 "include_fenced_brokers": True})
    assert resp.error_code == 0 and resp.cluster_id == b.cluster_id and resp.controller_id == 1
    assert [(x.broker_id, x.port, getattr(x, "is_fenced", False)) for x in resp.brokers] == [(1, b.port, False)]
    assert resp.cluster_authorized_operations == 8096  # CREATE..IDEMPOTENT_WRITE minus READ/WRITE/DELETE
    resp = call(b, 60, version, {"include_cluster_authorized_operations": False})
    assert resp.cluster_authorized_operations == -2147483648


def test_describe_cluster_endpoint_types(b):
    assert call(b, 60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2}).error_code \
        == ErrorCode.mismatched_endpoint_type
    assert call(b, 60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 9}).error_code \
        == ErrorCode.unsupported_endpoint_type
    assert call(b, 60, 2, {"include_cluster_authorized_operations": False, "endpoint_type": 2,
                           "include_fenced_brokers": False}).error_code == ErrorCode.mismatched_endpoint_type


# --------------------------------------------------------------------------- DescribeTopicPartitions
def dtp(brk, topics, limit=2000, cursor=None):
    return call(brk, 75, 0, {"topics": [{"name": t} for t in topics], "response_partition_limit": limit,
                             "cursor": cursor})


def summary(resp):
    nc = resp.next_cursor
    return ([(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in resp.topics],
            (nc.topic_name, nc.partition_index) if nc is not None else None)


def test_describe_topic_partitions_pages(b):
    b.control.replication.create_local_topic("a", 2, {})
    b.control.replication.create_local_topic("b", 3, {})
    b.control.replication.create_local_topic("c", 1, {})
    # limit used up exactly at the end of a topic: the cursor points at the next topic
    assert summary(dtp(b, [], limit=2)) == ([("a", 0, [0, 1])], ("b", 0))
    assert summary(dtp(b, [], limit=2, cursor={"topic_name": "b", "partition_index": 0})) == \
        ([("b", 0, [0, 1])], ("b", 2))
    assert summary(dtp(b, [], limit=2, cursor={"topic_name": "b", "partition_index": 2})) == \
        ([("b", 0, [2]), ("c", 0, [0])], None)
    assert summary(dtp(b, ["c", "zz", "a", "bad/name"])) == \
        ([("a", 0, [0, 1]), ("bad/name", ErrorCode.invalid_topic_exception, []), ("c", 0, [0]),
          ("zz", ErrorCode.unknown_topic_or_partition, [])], None)
    assert summary(dtp(b, [], limit=0))[0] == [("a", 0, [0])]  # clamped to at least 1
    t = dtp(b, ["a"]).topics[0]
    assert t.topic_id == b.metadata.topics["a"].uuid and not t.is_internal
    p = t.partitions[0]
    assert (p.leader_id, p.replica_nodes, p.isr_nodes, p.eligible_leader_replicas) == (1, (1,), (1,), ())


def test_describe_topic_partitions_bad_cursor(b):
    b.control.replication.create_local_topic("a", 2, {})
    resp = dtp(b, ["a"], cursor={"topic_name": "b", "partition_index": 0})
    assert [(t.name, t.error_code) for t in resp.topics] == [("a", ErrorCode.invalid_request)]
    resp = dtp(b, ["a"], cursor={"topic_name": "a", "partition_index": -1})
    assert [(t.name, t.error_code) for t in resp.topics] == [("a", ErrorCode.invalid_request)]


# --------------------------------------------------------------------------- AlterReplicaLogDirs
@pytest.mark.parametrize("version", [1, 2])
def test_alter_replica_log_dirs(b, version):
    b.control.replication.create_local_topic("t", 3, {})
    del b.replica_manager.partitions[("t", 2)]  # a partition of the cluster with no replica here
    here = os.path.abspath(b.config.log_dir)
    too_long = "x" * 220  # "<topic>-0.<32 hex>-future" is over 255 characters

    def alter(*dirs: tuple[str, dict[str, list[int]]]) -> dict[tuple[str, int], int]:
        r = call(b, 34, version, {"dirs": [{"path": path, "topics": [{"name": t, "partitions": ps}
                                                                     for t, ps in topics.items()]}
                                           for path, topics in dirs]})
        return {(t.topic_name, p.partition_index): p.error_code for t in r.results for p in t.partitions}

    assert alter((here, {"t": [0, 1, 2, 7], "nope": [0], too_long: [0]})) == {
        ("t", 0): 0, ("t", 1): 0, ("t", 2): ErrorCode.replica_not_available,
        ("t", 7): ErrorCode.unknown_topic_or_partition, ("nope", 0): ErrorCode.unknown_topic_or_partition,
        (too_long, 0): ErrorCode.invalid_topic_exception}
    for elsewhere in ("/elsewhere", here + "/", "data"):
        assert alter((elsewhere, {"t": [0], "nope": [0]})) == {("t", 0): ErrorCode.log_dir_not_found,
                                                               ("nope", 0): ErrorCode.log_dir_not_found}
    assert alter(("/elsewhere", {"t": [0]}), (here, {"t": [0]})) == {("t", 0): 0}  # the last dir named wins
    assert alter() == {}
