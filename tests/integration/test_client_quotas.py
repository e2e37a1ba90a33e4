"""AlterClientQuotas / DescribeClientQuotas (KIP-546): answers compared with Kafka 4.3.1.

Found by Sarama's ``ClusterAdmin.AlterClientQuotas`` (compat/sarama): kbroker did not serve
API key 49. Every error message below is what a real Kafka 4.3.1 answered to the same request.
"""

from __future__ import annotations

import pytest

from protocol import records as rb
from protocol.errors import ErrorCode
from tests.support.raw import RawClient

INVALID = ErrorCode.invalid_request


def alter(bootstrap: str, entries, validate_only: bool = False) -> list[tuple]:
    """entries: [({type: name}, {key: value or None (remove)})] -> [(code, message, entity)]."""
    with RawClient(bootstrap) as c:
        r = c.call(49, 1, {"validate_only": validate_only, "entries": [
            {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
             "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None} for k, v in ops.items()]}
            for entity, ops in entries]})
    return [(e.error_code, e.error_message, {x.entity_type: x.entity_name for x in e.entity}) for e in r.entries]


def describe(bootstrap: str, components=(), strict: bool = False):
    with RawClient(bootstrap) as c:
        r = c.call(48, 1, {"strict": strict, "components": [
            {"entity_type": t, "match_type": m, "match": n} for t, m, n in components]})
    assert (r.error_code, r.error_message) == (0, "")
    return sorted((tuple(sorted((x.entity_type, x.entity_name or "<default>") for x in e.entity)),
                   {v.key: v.value for v in e.values}) for e in r.entries)


ALTER_ERRORS = [  # one entry -> Kafka 4.3.1's message (INVALID_REQUEST)
    ({"client-id": "c2"}, {"producer_byte_rate": 1.5, "consumer_byte_rate": 2048.0},
     "producer_byte_rate cannot be a fractional value."),
    ({"client-id": "c3"}, {"foo": 1.0}, "Invalid configuration key foo"),
    ({"client-id": "c3"}, {"connection_creation_rate": 1.0}, "Invalid configuration key connection_creation_rate"),
    ({"ip": "10.1.2.4"}, {"connection_creation_rate": 10.5}, "connection_creation_rate cannot be a fractional value."),
    ({"ip": "not a host!"}, {"connection_creation_rate": 10.0}, "not a host! is not a valid IP or resolvable host."),
    ({"user": "u", "ip": "1.1.1.1"}, {"producer_byte_rate": 1.0},
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ({}, {"producer_byte_rate": 1.0}, "Invalid empty client quota entity"),
    ({"client-id": ""}, {"producer_byte_rate": 1.0}, "Empty client-id not supported"),
    ({"group": "g"}, {"producer_byte_rate": 1.0}, "Unhandled client quota entity type: group"),
    ({"user": "u10"}, {"consumer_byte_rate": -5.0}, "Quota consumer_byte_rate must be greater than 0"),
    ({"user": "u10"}, {"request_percentage": 0.0}, "Quota request_percentage must be greater than 0"),
]


@pytest.mark.parametrize("entity,ops,message", ALTER_ERRORS)
def test_alter_client_quotas_refuses_as_kafka(broker, entity, ops, message):
    assert alter(broker.bootstrap, [(entity, ops)]) == [(INVALID, message, entity)]
    assert all(dict(e) != entity for e, _ in describe(broker.bootstrap))


def test_client_quotas_are_stored_described_and_survive_a_restart(own_broker):
    b = own_broker()
    ok = (ErrorCode.none, None)
    assert alter(b.bootstrap, [({"client-id": "c1"}, {"producer_byte_rate": 1024.0, "request_percentage": 12.5})]) == [
        (*ok, {"client-id": "c1"})]
    assert alter(b.bootstrap, [({"ip": "10.1.2.3"}, {"connection_creation_rate": 10.0}),
                               ({"ip": None}, {"connection_creation_rate": 100.0}),
                               ({"user": "u3", "client-id": None}, {"controller_mutation_rate": 3.5}),
                               ({"user": None}, {"consumer_byte_rate": 4096.0})]) == [
        (*ok, {"ip": "10.1.2.3"}), (*ok, {"ip": None}), (*ok, {"client-id": None, "user": "u3"}), (*ok, {"user": None})]
    # validate_only, removing an absent key and an entry without ops succeed and store nothing.
    assert alter(b.bootstrap, [({"user": "uv"}, {"consumer_byte_rate": 1.0})], validate_only=True)[0][0] == 0
    assert alter(b.bootstrap, [({"user": "u9"}, {"consumer_byte_rate": None}), ({"user": "u11"}, {})]) == [
        (*ok, {"user": "u9"}), (*ok, {"user": "u11"})]
    # A key given twice: the entity is ignored. An entity given twice: the first entry counts.
    assert alter(b.bootstrap, [({"user": "u1"}, {})])[0][0] == 0
    with RawClient(b.bootstrap) as c:
        r = c.call(49, 1, {"validate_only": False, "entries": [
            {"entity": [{"entity_type": "user", "entity_name": "u1"}],
             "ops": [{"key": "producer_byte_rate", "value": 1.0, "remove": False},
                     {"key": "producer_byte_rate", "value": 2.0, "remove": False}]},
            {"entity": [{"entity_type": "user", "entity_name": "u2"}],
             "ops": [{"key": "producer_byte_rate", "value": 1.0, "remove": False}]},
            {"entity": [{"entity_type": "user", "entity_name": "u2"}],
             "ops": [{"key": "consumer_byte_rate", "value": 2.0, "remove": False}]}]})
    assert [(e.error_code, e.error_message) for e in r.entries] == [
        (INVALID, "Ignoring duplicate entity ClientQuotaEntity(entries={user=u1})"),
        (INVALID, "Ignoring duplicate entity ClientQuotaEntity(entries={user=u2})")]

    expected_all = [
        ((("client-id", "<default>"), ("user", "u3")), {"controller_mutation_rate": 3.5}),
        ((("client-id", "c1"),), {"producer_byte_rate": 1024.0, "request_percentage": 12.5}),
        ((("ip", "10.1.2.3"),), {"connection_creation_rate": 10.0}),
        ((("ip", "<default>"),), {"connection_creation_rate": 100.0}),
        ((("user", "<default>"),), {"consumer_byte_rate": 4096.0}),
        ((("user", "u2"),), {"producer_byte_rate": 1.0}),
    ]
    b.restart(kill=True)
    assert describe(b.bootstrap) == expected_all
    assert describe(b.bootstrap, strict=True) == []
    assert describe(b.bootstrap, [("user", 2, None)]) == [expected_all[0], expected_all[4], expected_all[5]]
    assert describe(b.bootstrap, [("user", 2, None)], strict=True) == [expected_all[4], expected_all[5]]
    assert describe(b.bootstrap, [("user", 1, None)]) == [expected_all[4]]
    assert describe(b.bootstrap, [("client-id", 0, "c2")]) == []
    assert describe(b.bootstrap, [("ip", 2, None)]) == [expected_all[2], expected_all[3]]
    assert describe(b.bootstrap, [("user", 0, "u3"), ("client-id", 1, None)], strict=True) == [expected_all[0]]
    # Removing an entity's last key removes the entity.
    assert alter(b.bootstrap, [({"client-id": "c1"}, {"producer_byte_rate": None, "request_percentage": None})])[0][0] == 0
    assert describe(b.bootstrap, [("client-id", 2, None)]) == [expected_all[0]]


def test_describe_client_quotas_checks_default_and_specified_matches(broker):
    with RawClient(broker.bootstrap) as c:
        for match_type, name in ((1, "DEFAULT"), (2, "SPECIFIED")):
            r = c.call(48, 1, {"strict": False, "components": [
                {"entity_type": "user", "match_type": match_type, "match": "x"}]})
            assert (r.error_code, r.error_message, r.entries) == (
                INVALID, f"Request specified MATCH_TYPE_{name}, but also specified a match string.", None)


def test_byte_rate_quotas_throttle_producers_and_consumers_over_them(own_broker):
    """producer_byte_rate / consumer_byte_rate are enforced (Kafka's ClientQuotaManager): a
    client over its quota gets throttle_time_ms (a throttled fetch comes back empty), other
    clients do not, and a throttled confluent-kafka producer still delivers everything."""
    from confluent_kafka import Producer

    from tests.support.clients import consume_all, create_topic
    from tests.support.raw import produce_request

    b = own_broker()
    topic = "quota-topic"
    create_topic(b.bootstrap, topic)
    assert alter(b.bootstrap, [({"client-id": "slow"}, {"producer_byte_rate": 20_000.0,
                                                        "consumer_byte_rate": 20_000.0})])[0][0] == 0
    value = b"x" * 100_000
    p = Producer({"bootstrap.servers": b.bootstrap, "client.id": "slow", "linger.ms": 0})
    for _ in range(6):  # 600 KB: more than 10 s' worth of 20 KB/s
        p.produce(topic, value)
    assert p.flush(60) == 0
    records = bytes(rb.build_batch([(b"k", value)], timestamp=1_700_000_000_000))
    for client_id, throttled in (("slow", True), ("fast", False)):  # a throttled connection is muted
        with RawClient(b.bootstrap) as c:
            c.client_id = client_id
            r = c.request(0, 9, produce_request(topic, records, acks=1))
            assert r.responses[0].partition_responses[0].error_code == 0
            assert (r.throttle_time.total_seconds() > 0) == throttled, (client_id, r.throttle_time)
    assert len(consume_all(b.bootstrap, topic, 1, 8, timeout=60)) == 8  # a consumer without a quota
    fetch = {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 22, "isolation_level": 0,
             "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
             "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                         "last_fetched_epoch": -1, "log_start_offset": -1,
                                                         "partition_max_bytes": 1 << 22}]}]}
    with RawClient(b.bootstrap, timeout=30) as c:
        c.client_id = "slow"
        for _ in range(3):  # 800 KB a fetch: over 10 s' worth of 20 KB/s by the second
            r = c.call(1, 12, fetch)
            if r.throttle_time.total_seconds() > 0:
                break
        assert r.throttle_time.total_seconds() > 0 and r.responses == (), "a throttled fetch answers no data"
    with RawClient(b.bootstrap, timeout=30) as c:
        c.client_id = "fast"
        r = c.call(1, 12, fetch)
        assert r.throttle_time.total_seconds() == 0 and r.responses[0].partitions[0].records
