"""Group configs (GROUP config resources) as Kafka 4.3.1 validates, stores and describes them.

Every answer here was compared with a real Kafka 4.3.1 broker: a group need not exist to carry
configs, an unset key is described with its broker synonym's value as DEFAULT_CONFIG, a set one
as GROUP_CONFIG (8), and each refusal is INVALID_CONFIG with Kafka's message.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from protocol.errors import ErrorCode
from tests.integration.test_topic_configs import alter, describe
from tests.support.raw import RawClient

GROUP = 32
GROUP_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 8, 4, 5

KAFKA_GROUP_CONFIG_DEFAULTS = {
    "consumer.session.timeout.ms": "45000", "consumer.heartbeat.interval.ms": "5000",
    "consumer.assignment.interval.ms": "1000", "share.session.timeout.ms": "45000",
    "share.heartbeat.interval.ms": "5000", "share.record.lock.duration.ms": "30000",
    "share.delivery.count.limit": "5", "share.partition.max.record.locks": "2000",
    "share.auto.offset.reset": "latest", "share.isolation.level": "read_uncommitted",
    "share.renew.acknowledge.enable": "true", "share.assignment.interval.ms": "1000",
    "streams.session.timeout.ms": "45000", "streams.heartbeat.interval.ms": "5000",
    "streams.num.standby.replicas": "0", "streams.initial.rebalance.delay.ms": "3000",
    "streams.assignment.interval.ms": "1000",
}

# (config, value, Kafka 4.3.1's INVALID_CONFIG message)
REFUSED = [
    ("nope.key", "1", "Unknown group config name: nope.key"),
    ("share.auto.offset.reset", "bogus",
     "Invalid value bogus for configuration share.auto.offset.reset: Invalid value `bogus` for configuration "
     "share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format "
     "'by_duration:<PnDTnHnMn.nS>'."),
    ("share.auto.offset.reset", "by_duration:-PT1H",
     "Invalid value by_duration:-PT1H for configuration share.auto.offset.reset: Invalid value "
     "`by_duration:-PT1H` for configuration share.auto.offset.reset. The value must be either 'earliest', "
     "'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."),
    ("consumer.session.timeout.ms", "1000",
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ("consumer.session.timeout.ms", "abc",
     "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ("share.record.lock.duration.ms", "500",
     "Invalid value 500 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
    ("share.isolation.level", "READ_COMMITTED",
     "Invalid value READ_COMMITTED for configuration share.isolation.level: String must be one of: "
     "read_committed, read_uncommitted"),
    ("consumer.heartbeat.interval.ms", "50000",
     "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ("share.renew.acknowledge.enable", "maybe",
     "Invalid value maybe for configuration share.renew.acknowledge.enable: Expected value to be either true "
     "or false"),
]


def group_id() -> str:
    return f"group-configs-{uuid.uuid4().hex[:8]}"


def test_a_group_without_overrides_is_described_with_kafkas_defaults(broker):
    with RawClient(broker.bootstrap) as c:
        described = describe(c, GROUP, group_id())
    assert {k: v.value for k, v in described.items()} == KAFKA_GROUP_CONFIG_DEFAULTS
    assert {v.config_source for v in described.values()} == {DEFAULT_CONFIG}


@pytest.mark.parametrize("name,value,message", REFUSED, ids=[f"{n}={v}" for n, v, _ in REFUSED])
def test_bad_group_config_is_refused_in_kafkas_words(broker, name, value, message):
    with RawClient(broker.bootstrap) as c:
        assert alter(c, GROUP, group_id(), [(name, 0, value)]) == (ErrorCode.invalid_config, message)


def test_group_configs_set_describe_and_delete_through_the_admin_client(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    group = group_id()

    def set_configs(*entries: ConfigEntry) -> None:
        futures = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                                  incremental_configs=list(entries))])
        for f in futures.values():
            f.result(timeout=20)

    def described() -> dict:
        (f,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()
        return f.result(timeout=20)

    set_configs(ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("share.record.lock.duration.ms", "20000", incremental_operation=AlterConfigOpType.SET))
    got = described()
    reset, lock = got["share.auto.offset.reset"], got["share.record.lock.duration.ms"]
    assert (reset.value, reset.source, reset.is_default) == ("earliest", GROUP_CONFIG, False)
    assert (lock.value, lock.source) == ("20000", GROUP_CONFIG)
    assert [(s.name, s.value, s.source) for s in lock.synonyms.values()] == [
        ("share.record.lock.duration.ms", "20000", GROUP_CONFIG),
        ("group.share.record.lock.duration.ms", "30000", DEFAULT_CONFIG)]

    set_configs(ConfigEntry("share.auto.offset.reset", None, incremental_operation=AlterConfigOpType.DELETE))
    got = described()
    assert (got["share.auto.offset.reset"].value, got["share.auto.offset.reset"].source) == ("latest", DEFAULT_CONFIG)
    assert got["share.record.lock.duration.ms"].value == "20000"


def test_append_to_a_group_config_is_refused_and_the_default_resource_is_invalid(broker):
    with RawClient(broker.bootstrap) as c:
        assert alter(c, GROUP, group_id(), [("share.auto.offset.reset", 2, "x")]) == (
            ErrorCode.invalid_config, "Can't APPEND to key share.auto.offset.reset because its type is not LIST.")
        assert alter(c, GROUP, "", [("share.auto.offset.reset", 0, "earliest")]) == (
            ErrorCode.invalid_request, "Default group resources are not allowed.")
        group = group_id()
        assert alter(c, GROUP, group, [("share.auto.offset.reset", 0, "earliest")], validate_only=True) == (0, None)
        assert describe(c, GROUP, group)["share.auto.offset.reset"].value == "latest"


def test_group_configs_survive_a_restart_and_are_listed(own_broker):
    b = own_broker(**{"group.share.record.lock.duration.ms": "15000"})
    group = group_id()
    with RawClient(b.bootstrap) as c:
        assert alter(c, GROUP, group, [("share.isolation.level", 0, "read_committed")]) == (0, None)
    b.restart(kill=True)
    with RawClient(b.bootstrap) as c:
        got = describe(c, GROUP, group)
        assert (got["share.isolation.level"].value, got["share.isolation.level"].config_source) == (
            "read_committed", GROUP_CONFIG)
        # an unset key follows the broker's own setting, a STATIC_BROKER_CONFIG
        lock = got["share.record.lock.duration.ms"]
        assert (lock.value, lock.config_source) == ("15000", STATIC_BROKER_CONFIG)
        listed = c.call(74, 1, {"resource_types": [GROUP]})
        assert [(r.resource_name, r.resource_type) for r in listed.config_resources] == [(group, GROUP)]
