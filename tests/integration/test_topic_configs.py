"""Topic configs and dynamic broker configs as Kafka 4.3.1 validates and describes them.

The reference is Kafka 4.3.1's LogConfig: every topic config it knows is accepted with its
validator and described back; the wording of each refusal is Kafka's. Raw requests pin the exact
error code and message.
"""

from __future__ import annotations

import time

import pytest

from protocol import records as rb
from protocol.errors import ErrorCode
from tests.support.clients import create_topic
from tests.support.raw import RawClient, produce_request

TOPIC, BROKER = 2, 4

# Kafka 4.3.1 LogConfig.configNames() without its internal keys, each with a valid value that
# differs from the default.
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy": "compact,delete", "compression.gzip.level": "5", "compression.lz4.level": "3",
    "compression.type": "zstd", "compression.zstd.level": "-5", "delete.retention.ms": "1000",
    "file.delete.delay.ms": "1000", "flush.messages": "1000", "flush.ms": "1000",
    "follower.replication.throttled.replicas": "0:1,1:2", "index.interval.bytes": "1024",
    "leader.replication.throttled.replicas": "*", "local.retention.bytes": "-1",
    "local.retention.ms": "1000", "max.compaction.lag.ms": "60000", "max.message.bytes": "2000000",
    "message.timestamp.after.max.ms": "60000", "message.timestamp.before.max.ms": "60000",
    "message.timestamp.type": "LogAppendTime", "min.cleanable.dirty.ratio": "0.2",
    "min.compaction.lag.ms": "1000", "min.insync.replicas": "1", "preallocate": "true",
    "remote.log.copy.disable": "true", "remote.log.delete.on.disable": "true",
    "remote.storage.enable": "false", "retention.bytes": "100000000", "retention.ms": "3600000",
    "segment.bytes": "1048576", "segment.index.bytes": "4096", "segment.jitter.ms": "10",
    "segment.ms": "600000", "unclean.leader.election.enable": "true",
}

# (config, value, Kafka 4.3.1's INVALID_CONFIG message)
REFUSED = [
    ("max.compaction.lag.ms", "0", "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at least 1"),
    ("max.compaction.lag.ms", "abc",
     "Invalid value abc for configuration max.compaction.lag.ms: Not a number of type LONG"),
    ("segment.bytes", "1000", "Invalid value 1000 for configuration segment.bytes: Value must be at least 1048576"),
    ("remote.storage.enable", "true", "Tiered Storage functionality is disabled in the broker. "
                                      "Topic cannot be configured with remote log storage."),
    ("compression.type", "brotli", "Invalid value brotli for configuration compression.type: String must "
                                   "be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("leader.replication.throttled.replicas", "0:x",
     "Invalid value [0:x] for configuration leader.replication.throttled.replicas: "
     "leader.replication.throttled.replicas must be the literal '*' or a list of replicas in the "
     "following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."),
    ("cleanup.policy", "foo", "Invalid value foo for configuration cleanup.policy: String must be one of: compact, delete"),
    ("message.downconversion.enable", "true", "Unknown topic config name: message.downconversion.enable"),
    ("retention.ms", "x", "Invalid value x for configuration retention.ms: Not a number of type LONG"),
]


def alter(c: RawClient, rtype: int, name: str, configs: list[tuple[str, int, str | None]],
          validate_only: bool = False):
    r = c.call(44, 1, {"resources": [{"resource_type": rtype, "resource_name": name, "configs": [
        {"name": k, "config_operation": op, "value": v} for k, op, v in configs]}],
        "validate_only": validate_only})
    return r.responses[0].error_code, r.responses[0].error_message


def describe(c: RawClient, rtype: int, name: str, keys=None) -> dict:
    r = c.call(32, 4, {"resources": [{"resource_type": rtype, "resource_name": name,
                                      "configuration_keys": keys}],
                       "include_synonyms": False, "include_documentation": False})
    assert r.results[0].error_code == 0, r.results[0].error_message
    return {cfg.name: cfg for cfg in r.results[0].configs}


def test_every_kafka_topic_config_is_described_and_accepted(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config=KAFKA_TOPIC_CONFIGS)
    with RawClient(broker.bootstrap) as c:
        described = describe(c, TOPIC, topic_name)
    assert set(described) == set(KAFKA_TOPIC_CONFIGS)
    assert {k: v.value for k, v in described.items()} == KAFKA_TOPIC_CONFIGS
    assert {v.config_source for v in described.values()} == {1}  # TOPIC_CONFIG


@pytest.mark.parametrize("name,value,message", REFUSED, ids=[f"{n}={v}" for n, v, _ in REFUSED])
def test_bad_topic_config_is_refused_in_kafkas_words(broker, topic_name, name, value, message):
    create_topic(broker.bootstrap, topic_name)
    with RawClient(broker.bootstrap) as c:
        assert alter(c, TOPIC, topic_name, [(name, 0, value)]) == (ErrorCode.invalid_config, message)


def test_subtract_may_empty_cleanup_policy(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"cleanup.policy": "delete"})
    with RawClient(broker.bootstrap) as c:
        assert alter(c, TOPIC, topic_name, [("cleanup.policy", 3, "delete")]) == (0, None)
        assert describe(c, TOPIC, topic_name, ["cleanup.policy"])["cleanup.policy"].value == ""


def test_a_missing_topic_is_unknown_before_its_configs_are_checked(broker):
    with RawClient(broker.bootstrap) as c:
        for api, version, entry in ((33, 2, {"name": "max.compaction.lag.ms", "value": "1000"}),
                                    (44, 1, {"name": "max.compaction.lag.ms", "config_operation": 0,
                                             "value": "1000"})):
            r = c.call(api, version, {"resources": [{"resource_type": TOPIC, "resource_name": "no-such-topic",
                                                     "configs": [entry]}], "validate_only": False})
            assert (r.responses[0].error_code, r.responses[0].error_message) == (
                ErrorCode.unknown_topic_or_partition, "The topic 'no-such-topic' does not exist.")
        r = c.call(33, 2, {"resources": [{"resource_type": TOPIC, "resource_name": "no-such-topic",
                                          "configs": [{"name": "no.such.config", "value": "1"}]}],
                           "validate_only": False})
        assert r.responses[0].error_code == ErrorCode.invalid_config  # a bad name comes first, as Kafka


def test_kafka_dynamic_broker_configs_are_accepted_and_described_back(own_broker):
    b = own_broker()
    with RawClient(b.bootstrap) as c:
        assert alter(c, BROKER, "1", [("sasl.kerberos.min.time.before.relogin", 0, "60001"),
                                      ("ssl.key.password", 0, "secret")]) == (0, None)
        got = describe(c, BROKER, "1", ["sasl.kerberos.min.time.before.relogin", "ssl.key.password"])
        relogin, password = got["sasl.kerberos.min.time.before.relogin"], got["ssl.key.password"]
        assert (relogin.value, relogin.config_source, relogin.read_only) == ("60001", 2, False)
        assert (password.value, password.is_sensitive) == (None, True)
        assert alter(c, BROKER, "1", [("sasl.kerberos.min.time.before.relogin", 0, "soon")]) == (
            ErrorCode.invalid_request,
            "Invalid value soon for configuration sasl.kerberos.min.time.before.relogin: Not a number of type LONG")
        assert alter(c, BROKER, "1", [("no.such.broker.config", 0, "1")])[0] == ErrorCode.invalid_request
        # kafka-configs --add-config log.cleaner.threads=2: Kafka resizes its cleaner pool; here
        # the key has no effect, so it is stored and described back.
        assert alter(c, BROKER, "1", [("log.cleaner.threads", 0, "2")]) == (0, None)
        threads = describe(c, BROKER, "1", ["log.cleaner.threads"])["log.cleaner.threads"]
        assert (threads.value, threads.config_source) == ("2", 2)
        assert alter(c, BROKER, "1", [("num.partitions", 0, "3")]) == (
            ErrorCode.invalid_request, "Cannot update these configs dynamically: [num.partitions]")
    b.restart()
    with RawClient(b.bootstrap) as c:  # stored with the others: still there after a restart
        relogin = describe(c, BROKER, "1", ["sasl.kerberos.min.time.before.relogin"])
        assert relogin["sasl.kerberos.min.time.before.relogin"].value == "60001"


def test_a_dynamic_timestamp_bound_applies_to_produce(own_broker, topic_name):
    b = own_broker()
    create_topic(b.bootstrap, topic_name)
    future = int(time.time() * 1000) + 7_200_000
    batch = bytes(rb.build_batch([(b"k", b"v")], timestamp=future))
    with RawClient(b.bootstrap) as c:
        assert c.request(0, 9, produce_request(topic_name, batch)).responses[0].partition_responses[0].error_code \
            == ErrorCode.invalid_timestamp
        assert alter(c, BROKER, "", [("log.message.timestamp.after.max.ms", 0, "86400000")]) == (0, None)
        assert describe(c, TOPIC, topic_name, ["message.timestamp.after.max.ms"])[
            "message.timestamp.after.max.ms"].value == "86400000"
        assert c.request(0, 9, produce_request(topic_name, batch)).responses[0].partition_responses[0].error_code == 0


def test_a_broker_key_set_to_its_default_is_still_static(own_broker, topic_name):
    """Kafka shows a key given in server.properties as STATIC_BROKER_CONFIG even when the value
    equals the default (confluent-kafka-python's test_incremental_alter_configs relies on it)."""
    b = own_broker(**{"min.insync.replicas": "1"})
    create_topic(b.bootstrap, topic_name)
    with RawClient(b.bootstrap) as c:
        topic = describe(c, TOPIC, topic_name, ["min.insync.replicas", "retention.bytes"])
        broker = describe(c, BROKER, "1", ["min.insync.replicas", "log.retention.bytes"])
    assert (topic["min.insync.replicas"].value, topic["min.insync.replicas"].config_source) == ("1", 4)
    assert topic["retention.bytes"].config_source == 5  # not given: DEFAULT_CONFIG
    assert broker["min.insync.replicas"].config_source == 4
    assert broker["log.retention.bytes"].config_source == 5
