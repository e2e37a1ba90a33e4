"""Configuration: Kafka's keys, clear errors, close-match warnings, properties parsing."""

import subprocess
import sys

import pytest

from broker.config import ConfigError, load_config, parse_properties
from tests.support.broker_process import REPO


def test_single_node_defaults_apply():
    c = load_config({})
    assert c["offsets.topic.replication.factor"] == 1
    assert c["transaction.state.log.min.isr"] == 1
    assert c["group.initial.rebalance.delay.ms"] == 0
    assert c.listener() == ("localhost", 9092)


def test_bad_value_names_the_key():
    with pytest.raises(ConfigError) as bad:
        load_config({"num.partitions": "zero"})
    # Kafka's wording, not Python's int() message
    assert str(bad.value) == "Invalid value 'zero' for configuration num.partitions: Not a number of type INT"
    with pytest.raises(ConfigError, match="log.retention.ms: Not a number of type LONG"):
        load_config({"log.retention.ms": "1h"})
    with pytest.raises(ConfigError, match="log.segment.bytes"):
        load_config({"log.segment.bytes": "3"})


def test_connection_limits_kafka_refuses_stop_start_up_with_its_message():
    with pytest.raises(ConfigError, match='^For input string: "x"$'):
        load_config({"max.connections.per.ip.overrides": "10.0.0.1:x"})
    with pytest.raises(ConfigError, match="can be set to zero only if max.connections.per.ip.overrides"):
        load_config({"max.connections.per.ip": "0"})
    c = load_config({"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "10.0.0.1:5, 10.0.0.2 : 7"})
    assert c["max.connections.per.ip"] == 0
    assert load_config({"max.connections": "0"})["max.connections"] == 0  # static: as Kafka, allowed


def test_unknown_key_suggests_closest():
    c = load_config({"log.retention.hour": "5", "confluent.plugin.x": "1"})
    assert any("did you mean log.retention.hours" in w for w in c.unknown)
    with pytest.raises(ConfigError, match="Unknown configuration"):
        load_config({"log.retention.hour": "5"}, strict=True)


def test_retention_precedence():
    assert load_config({"log.retention.hours": "1"}).retention_ms == 3_600_000
    assert load_config({"log.retention.minutes": "2", "log.retention.hours": "1"}).retention_ms == 120_000
    assert load_config({"log.retention.ms": "5", "log.retention.minutes": "2"}).retention_ms == 5


def test_properties_format():
    props = parse_properties("# comment\n! also\nlisteners=PLAINTEXT://:9093\nlog.dirs : /tmp/x\n"
                             "num.partitions 3\nlong.value=a,\\\n    b\n")
    assert props == {"listeners": "PLAINTEXT://:9093", "log.dirs": "/tmp/x", "num.partitions": "3",
                     "long.value": "a,b"}


@pytest.mark.parametrize("override, expected", [
    ("num.partitions=-4", "num.partitions"),
    ("listeners=SSL://127.0.0.1:9093", "the SSL listener SSL needs a key store"),
    ("listeners=SASL_SSL://127.0.0.1:9093", "SASL mechanism GSSAPI is not supported"),
])
def test_cli_bad_value_exits_with_one_line_message(tmp_path, override, expected):
    proc = subprocess.run([sys.executable, "-m", "broker", "--override", override,
                           "--override", f"log.dirs={tmp_path}"], cwd=REPO, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2
    assert expected in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_cli_strict_config_rejects_unknown_key(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "broker", "--strict-config", "--override",
                           "log.segmant.bytes=1000", "--override", f"log.dirs={tmp_path}"],
                          cwd=REPO, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "log.segment.bytes" in proc.stderr


# --------------------------------------------------------------------------- listeners
TWO_LISTENERS = {
    "listeners": "INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092",
    "advertised.listeners": "INTERNAL://broker1:9092,EXTERNAL://127.0.0.1:19092",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}


def test_two_listeners_bound_advertised_and_inter_broker():
    c = load_config(TWO_LISTENERS)
    assert [(s.name, s.host, s.port) for s in c.listeners()] == [("INTERNAL", "0.0.0.0", 9092),
                                                                   ("EXTERNAL", "0.0.0.0", 19092)]
    assert [(s.name, s.host, s.port) for s in c.advertised_listeners()] == [("INTERNAL", "broker1", 9092),
                                                                              ("EXTERNAL", "127.0.0.1", 19092)]
    assert c.inter_broker_listener_name == "INTERNAL"
    assert c.listener() == ("0.0.0.0", 9092) and c.advertised() == ("broker1", 9092)
    assert "inter.broker.listener.name" not in c.ignored


def test_inter_broker_listener_defaults_to_the_first_and_may_be_any():
    c = load_config({"listeners": "CLIENT://:9093,BROKER://127.0.0.1:9094"})
    assert c.inter_broker_listener_name == "CLIENT"
    assert c.advertised() == ("localhost", 9093)  # an empty host is advertised as localhost
    c = load_config({"listeners": "client://:9093,broker://127.0.0.1:9094", "inter.broker.listener.name": "broker"})
    assert c.inter_broker_listener_name == "BROKER" and c.advertised() == ("127.0.0.1", 9094)


def test_security_inter_broker_protocol_names_the_peers_listener_as_kafka_reads_it():
    # Kafka: unset, security.inter.broker.protocol is PLAINTEXT, the listener of that name
    c = load_config({"listeners": "CLIENT://:9093,PLAINTEXT://127.0.0.1:9094"})
    assert c.inter_broker_listener_name == "PLAINTEXT" and c.advertised() == ("127.0.0.1", 9094)
    c = load_config({"listeners": "PLAINTEXT://:9092,SASL_PLAINTEXT://127.0.0.1:9094",
                     "security.inter.broker.protocol": "SASL_PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
                     "sasl.mechanism.inter.broker.protocol": "PLAIN",
                     "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                         'org.apache.kafka.common.security.plain.PlainLoginModule required username="b" '
                         'password="p" user_b="p";'})
    assert c.inter_broker_listener_name == "SASL_PLAINTEXT" and c.advertised() == ("127.0.0.1", 9094)
    assert c.inter_broker_sasl_client() is not None


def test_a_listener_left_out_of_advertised_listeners_is_advertised_as_bound():
    c = load_config({**TWO_LISTENERS, "advertised.listeners": "EXTERNAL://example.test:29092"})
    assert {s.name: (s.host, s.port) for s in c.advertised_listeners()} == {
        "INTERNAL": ("localhost", 9092), "EXTERNAL": ("example.test", 29092)}


@pytest.mark.parametrize("change, message", [
    ({"listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SSL"}, "EXTERNAL needs a key store"),
    ({"listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL"},
     "listener EXTERNAL: SASL mechanism GSSAPI is not supported"),
    ({"listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:PLAINTEXT",
      "sasl.enabled.mechanisms": "SCRAM-SHA-256"}, "sasl.mechanism.inter.broker.protocol=GSSAPI is not supported"),
    ({"listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:PLAINTEXT",
      "sasl.enabled.mechanisms": "SCRAM-SHA-256", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"},
     "internal.scram-sha-256.sasl.jaas.config needs the broker's own username"),
    ({"listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
      "sasl.enabled.mechanisms": "PLAIN"}, "PLAIN needs listener.name.external.plain.sasl.jaas.config"),
    ({"listeners": "SASL_SSL://:9093", "advertised.listeners": "", "inter.broker.listener.name": "",
      "listener.security.protocol.map": ""}, "SASL mechanism GSSAPI is not supported"),
    ({"listener.security.protocol.map": "INTERNAL:PLAINTEXT"}, "EXTERNAL is not in listener.security"),
    ({"listener.security.protocol.map": "INTERNAL:PLAIN"}, "expected NAME:PROTOCOL"),
    ({"advertised.listeners": "OTHER://h:1",
      "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,OTHER:PLAINTEXT"},
     "OTHER is not in listeners"),
    ({"inter.broker.listener.name": "REPLICATION"}, "must name a listener defined in listeners; the valid "
                                                    "options are INTERNAL, EXTERNAL"),
    ({"inter.broker.listener.name": "", "security.inter.broker.protocol": "SSL"},
     "security.inter.broker.protocol must name a listener"),
    ({"security.inter.broker.protocol": "PLAINTEXT"}, "Only one of inter.broker.listener.name and "
                                                      "security.inter.broker.protocol should be set"),
    ({"inter.broker.listener.name": "", "security.inter.broker.protocol": "TLS"}, "must be one of PLAINTEXT"),
    ({"listeners": "INTERNAL://:1,INTERNAL://:2"}, "INTERNAL appears twice"),
    ({"listeners": "INTERNAL://:x"}, "bad port"),
    ({"listeners": "localhost:9092"}, "expected NAME://host:port"),
])
def test_bad_listener_settings_are_one_line_errors(change, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_config({**TWO_LISTENERS, **change})
    assert "\n" not in str(info.value)


def test_registration_carries_endpoints_by_listener_and_old_ones_still_read():
    from metadata.etcd.keys import registration_from_json as _registration_from_json
    from metadata.etcd.keys import registration_json as _registration_json
    from metadata.image import MetadataCache
    from metadata.records import BrokerRegistration

    new = BrokerRegistration(1, "broker1", 9092, "r1", "x",
                             endpoints={"INTERNAL": ("broker1", 9092), "EXTERNAL": ("127.0.0.1", 19092)})
    assert _registration_from_json(_registration_json(new)) == new
    old = _registration_from_json({"node_id": 2, "host": "10.0.0.2", "port": 9092, "rack": None})
    assert old.endpoints == {} and old.endpoint_on("EXTERNAL") == ("10.0.0.2", 9092)
    only_internal = BrokerRegistration(3, "broker3", 9092, endpoints={"INTERNAL": ("broker3", 9092)})
    cache = MetadataCache(1)
    cache.brokers = {1: new, 2: old, 3: only_internal}
    cache.inter_broker_listener = "INTERNAL"
    assert cache.brokers_on("EXTERNAL") == [(1, "127.0.0.1", 19092, "r1"), (2, "10.0.0.2", 9092, None)]
    assert [b[0] for b in cache.brokers_on(None)] == [1, 2, 3]
    assert cache.endpoint(1) == ("broker1", 9092) and cache.endpoint(3, "EXTERNAL") is None
