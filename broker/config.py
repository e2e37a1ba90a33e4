"""Broker configuration: Kafka's property names, types and defaults.

A bad value stops start-up with a one-line message naming the key; an unknown key gets a
warning naming the closest known key (fatal with ``--strict-config``), so an existing
server.properties with plugin keys still works. With no file, the values of Kafka's shipped
single-node server.properties apply where Kafka's defaults assume three nodes (internal
topics with replication factor 1, ``transaction.state.log.min.isr`` 1,
``group.initial.rebalance.delay.ms`` 0).

Listeners follow Kafka: ``listeners`` and ``advertised.listeners`` are lists of
``NAME://host:port``, ``listener.security.protocol.map`` maps each name to a protocol and
``inter.broker.listener.name`` (or the listener named after ``security.inter.broker.protocol``,
PLAINTEXT by default) is what peers use.

TLS: a listener mapped to SSL serves TLS with Kafka's ``ssl.*`` keys, globally or as
``listener.name.<name>.ssl.*`` (:mod:`security.ssl_factory`); its settings are checked (files
read, contexts built) when the config loads, so a bad one stops start-up with one line.

SASL: a listener mapped to SASL_PLAINTEXT or SASL_SSL authenticates with the mechanisms of
``sasl.enabled.mechanisms`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), PLAIN's users from
``listener.name.<name>.plain.sasl.jaas.config`` (:mod:`security.sasl`).

Differs from Kafka: keys for features not implemented yet (quotas, KRaft controller
settings) are accepted and ignored, and say so in the start-up log. Without a protocol map, BROKER, CLIENT,
INTERNAL and EXTERNAL are PLAINTEXT too (Kafka's default map knows only the protocol names);
a listener that ``advertised.listeners`` leaves out is advertised as bound; with neither
inter-broker key set and no PLAINTEXT listener, peers use the first listener (Kafka refuses to
start).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from security.principal import SslPrincipalMapper
from security.sasl import check_listener, is_sasl_key
from security.ssl_factory import is_ssl_key

LONG_MAX = (1 << 63) - 1


class ConfigError(ValueError):
    pass


def _bool(v: str) -> bool:
    low = v.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    raise ValueError("expected true or false")


def _list(v: str) -> list[str]:
    return [x.strip() for x in v.split(",") if x.strip()]


@dataclass(frozen=True)
class Key:
    name: str
    parse: Callable[[str], Any]
    default: Any
    check: Callable[[Any], bool] | None = None
    requirement: str = ""
    ignored: bool = False  # accepted for compatibility, has no effect
    internal: bool = False  # for tests only: not described, not logged


def _k(name, parse, default, check=None, requirement="", ignored=False, internal=False) -> Key:
    return Key(name, parse, default, check, requirement, ignored, internal)


def at_least(n):
    return (lambda v: v is None or v >= n), f"must be >= {n}"


def between(lo, hi):
    return (lambda v: v is None or lo <= v <= hi), f"must be in [{lo}, {hi}]"


def _etcd_endpoints(value: str) -> bool:
    if not value.strip():
        return True
    from metadata.etcd.client import parse_endpoints
    try:
        parse_endpoints(value)
    except ValueError:
        return False
    return True


def one_of(*values):
    return (lambda v: v in values), "must be one of " + ", ".join(values)


KEYS: dict[str, Key] = {k.name: k for k in [
    _k("node.id", int, 1, *at_least(0)),
    _k("broker.id", int, None, *at_least(-1)),
    _k("listeners", str, "PLAINTEXT://localhost:9092"),
    _k("advertised.listeners", str, None),
    _k("listener.security.protocol.map", str, None),
    _k("inter.broker.listener.name", str, None),
    _k("security.inter.broker.protocol", str, None, *one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    _k("controller.listener.names", str, None, ignored=True),
    _k("controller.quorum.voters", str, None, ignored=True),
    _k("controller.quorum.bootstrap.servers", str, None, ignored=True),
    # How long a dead controller keeps the role: the TTL of the controller's etcd lease (whole
    # seconds, at least 2), KRaft's time for voters to notice a missing leader.
    _k("controller.quorum.fetch.timeout.ms", int, 2000, *at_least(1)),
    _k("process.roles", str, None, ignored=True),
    # One directory: a broker keeps its logs in one (JBOD is not supported); more is refused.
    _k("log.dirs", str, None, lambda v: len(_list(v)) <= 1,
       "must name one directory (a kbroker broker keeps its logs in one; JBOD is not supported)"),
    _k("log.dir", str, "kbroker-data"),
    _k("num.partitions", int, 1, *at_least(1)),
    _k("default.replication.factor", int, 1, *at_least(1)),
    _k("min.insync.replicas", int, 1, *at_least(1)),
    _k("auto.create.topics.enable", _bool, True),
    _k("delete.topic.enable", _bool, True),
    # Also advertise the versions Kafka 4.3.1 marks latestVersionUnstable (InitProducerId v6).
    _k("unstable.api.versions.enable", _bool, False),
    _k("log.segment.bytes", int, 1073741824, *at_least(1048576)),
    _k("log.roll.ms", int, None, *at_least(1)),
    _k("log.roll.hours", int, 168, *at_least(1)),
    _k("log.retention.ms", int, None),
    _k("log.retention.minutes", int, None),
    _k("log.retention.hours", int, 168),
    _k("log.retention.bytes", int, -1),
    _k("log.retention.check.interval.ms", int, 300000, *at_least(1)),
    _k("log.index.interval.bytes", int, 4096, *at_least(0)),
    _k("log.index.size.max.bytes", int, 10485760, *at_least(4), ignored=True),
    _k("log.flush.interval.messages", int, LONG_MAX, *at_least(1)),
    _k("log.flush.interval.ms", int, None, *at_least(0)),
    _k("log.flush.scheduler.interval.ms", int, LONG_MAX, *at_least(0)),
    _k("log.flush.offset.checkpoint.interval.ms", int, 60000, *at_least(0)),
    _k("log.cleanup.policy", str, "delete", lambda v: set(_list(v)) <= {"delete", "compact"},
       "must be delete, compact or both"),
    _k("log.cleaner.enable", _bool, True),
    _k("log.cleaner.threads", int, 1, *at_least(0), ignored=True),
    _k("log.cleaner.backoff.ms", int, 15000, *at_least(0)),
    _k("log.cleaner.delete.retention.ms", int, 86400000, *at_least(0)),
    _k("log.cleaner.min.cleanable.ratio", float, 0.5, lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    _k("log.cleaner.min.compaction.lag.ms", int, 0, *at_least(0)),
    _k("log.cleaner.max.compaction.lag.ms", int, LONG_MAX, *at_least(1)),
    _k("log.message.timestamp.before.max.ms", int, LONG_MAX, *at_least(0)),
    _k("log.message.timestamp.after.max.ms", int, 3600000, *at_least(0)),
    _k("log.message.timestamp.type", str, "CreateTime", *one_of("CreateTime", "LogAppendTime")),
    _k("message.max.bytes", int, 1048588, *at_least(0)),
    _k("fetch.max.bytes", int, 57671680, *at_least(1024)),
    _k("request.timeout.ms", int, 30000, *at_least(0)),
    _k("replica.fetch.max.bytes", int, 1048576, *at_least(0)),
    _k("replica.fetch.response.max.bytes", int, 10485760, *at_least(0)),
    _k("replica.fetch.wait.max.ms", int, 500, *at_least(0)),
    _k("replica.fetch.backoff.ms", int, 1000, *at_least(0)),
    _k("replica.lag.time.max.ms", int, 30000, *at_least(1)),
    _k("broker.rack", str, None),
    _k("broker.session.timeout.ms", int, 9000, *at_least(1000)),
    _k("controlled.shutdown.enable", _bool, True),
    _k("controlled.shutdown.timeout.ms", int, 30000, *at_least(0)),
    _k("auto.leader.rebalance.enable", _bool, True),
    _k("leader.imbalance.check.interval.seconds", int, 300, *at_least(0)),
    # The cluster's metadata store: empty runs the embedded single-node store (no etcd); else
    # every etcd member's host:port (metadata/etcd/client.py fails over between them), and how
    # often the member list is read again so that members added later are used.
    _k("metadata.etcd.endpoints", str, "", _etcd_endpoints, "must be host:port[,host:port...]"),
    _k("metadata.etcd.endpoint.sync.interval.ms", int, 30000, *at_least(0)),
    _k("metadata.etcd.prefix", str, "/kbroker"),
    # etcd over TLS (the CA of its server certificate; a client certificate for --client-cert-auth)
    # and etcd's own users (metadata/etcd/client.py).
    _k("metadata.etcd.tls.ca.file", str, ""),
    _k("metadata.etcd.tls.cert.file", str, ""),
    _k("metadata.etcd.tls.key.file", str, ""),
    _k("metadata.etcd.username", str, ""),
    _k("metadata.etcd.password", str, ""),
    _k("socket.request.max.bytes", int, 104857600, *at_least(1)),
    _k("socket.send.buffer.bytes", int, 102400, ignored=True),
    _k("socket.receive.buffer.bytes", int, 102400, ignored=True),
    _k("num.network.threads", int, 3, *at_least(1), ignored=True),
    _k("num.io.threads", int, 8, *at_least(1), ignored=True),
    _k("num.recovery.threads.per.data.dir", int, 2, *at_least(1)),
    _k("num.replica.fetchers", int, 1, ignored=True),
    _k("max.incremental.fetch.session.cache.slots", int, 1000, *at_least(0)),
    # Connection limits (broker/connection_quotas.py); dynamic.
    _k("max.connections", int, 2147483647, *at_least(0)),
    _k("max.connection.creation.rate", int, 2147483647, *at_least(0)),
    _k("max.connections.per.ip", int, 2147483647, *at_least(0)),
    _k("max.connections.per.ip.overrides", str, ""),
    _k("connections.max.idle.ms", int, 600000, *at_least(1)),
    _k("connection.failed.authentication.delay.ms", int, 100, *at_least(0)),
    _k("offsets.topic.num.partitions", int, 50, *at_least(1)),
    _k("offsets.topic.replication.factor", int, 3, *at_least(1)),
    _k("offsets.topic.segment.bytes", int, 104857600, *at_least(1)),
    _k("offsets.retention.minutes", int, 10080, *at_least(1)),
    _k("offsets.retention.check.interval.ms", int, 600000, *at_least(1)),
    _k("offsets.commit.timeout.ms", int, 5000, *at_least(1)),
    _k("offset.metadata.max.bytes", int, 4096, *at_least(0)),
    _k("group.initial.rebalance.delay.ms", int, 3000, *at_least(0)),
    _k("group.min.session.timeout.ms", int, 6000, *at_least(0)),
    _k("group.max.session.timeout.ms", int, 1800000, *at_least(0)),
    _k("group.max.size", int, 2147483647, *at_least(1)),
    # Modern groups (KIP-848 consumer, KIP-932 share, KIP-1071 streams): the broker defaults
    # and bounds behind each group config (coordinator/group/group_config.py).
    _k("group.consumer.session.timeout.ms", int, 45000, *at_least(1)),
    _k("group.consumer.min.session.timeout.ms", int, 45000, *at_least(1)),
    _k("group.consumer.max.session.timeout.ms", int, 60000, *at_least(1)),
    _k("group.consumer.heartbeat.interval.ms", int, 5000, *at_least(1)),
    _k("group.consumer.min.heartbeat.interval.ms", int, 5000, *at_least(1)),
    _k("group.consumer.max.heartbeat.interval.ms", int, 15000, *at_least(1)),
    _k("group.consumer.max.size", int, 2147483647, *at_least(1)),
    _k("group.consumer.assignors", str, "uniform,range"),
    _k("group.consumer.migration.policy", str, "bidirectional",
       lambda v: v.lower() in ("disabled", "downgrade", "upgrade", "bidirectional"),
       "must be one of disabled, downgrade, upgrade, bidirectional"),
    _k("group.consumer.assignment.interval.ms", int, 1000, *at_least(0)),
    _k("group.consumer.min.assignment.interval.ms", int, 0, *at_least(0)),
    _k("group.consumer.max.assignment.interval.ms", int, 15000, *at_least(0)),
    _k("group.consumer.regex.refresh.interval.ms", int, 600000, *at_least(10000)),
    _k("group.share.session.timeout.ms", int, 45000, *at_least(1)),
    _k("group.share.min.session.timeout.ms", int, 45000, *at_least(1)),
    _k("group.share.max.session.timeout.ms", int, 60000, *at_least(1)),
    _k("group.share.heartbeat.interval.ms", int, 5000, *at_least(1)),
    _k("group.share.min.heartbeat.interval.ms", int, 5000, *at_least(1)),
    _k("group.share.max.heartbeat.interval.ms", int, 15000, *at_least(1)),
    _k("group.share.max.size", int, 200, *between(1, 1000)),
    _k("group.share.assignors", str, "simple"),
    _k("group.share.assignment.interval.ms", int, 1000, *at_least(0)),
    _k("group.share.min.assignment.interval.ms", int, 0, *at_least(0)),
    _k("group.share.max.assignment.interval.ms", int, 15000, *at_least(0)),
    _k("group.share.initialize.retry.interval.ms", int, 30000, *at_least(1)),
    _k("group.share.delivery.count.limit", int, 5, *between(2, 10)),
    _k("group.share.min.delivery.count.limit", int, 2, *between(2, 5)),
    _k("group.share.max.delivery.count.limit", int, 10, *between(5, 25)),
    _k("group.share.record.lock.duration.ms", int, 30000, *between(1000, 3600000)),
    _k("group.share.min.record.lock.duration.ms", int, 15000, *between(1000, 30000)),
    _k("group.share.max.record.lock.duration.ms", int, 60000, *between(30000, 3600000)),
    _k("group.share.partition.max.record.locks", int, 2000, *between(100, 10000)),
    _k("group.share.min.partition.max.record.locks", int, 100, *between(100, 2000)),
    _k("group.share.max.partition.max.record.locks", int, 4000, *between(2000, 10000)),
    _k("group.share.max.share.sessions", int, 2000, *at_least(1)),
    _k("group.streams.session.timeout.ms", int, 45000, *at_least(1)),
    _k("group.streams.min.session.timeout.ms", int, 45000, *at_least(1)),
    _k("group.streams.max.session.timeout.ms", int, 60000, *at_least(1)),
    _k("group.streams.heartbeat.interval.ms", int, 5000, *at_least(1)),
    _k("group.streams.min.heartbeat.interval.ms", int, 5000, *at_least(1)),
    _k("group.streams.max.heartbeat.interval.ms", int, 15000, *at_least(1)),
    _k("group.streams.max.size", int, 2147483647, *at_least(1)),
    _k("group.streams.num.standby.replicas", int, 0, *at_least(0)),
    _k("group.streams.max.standby.replicas", int, 2, *at_least(0)),
    _k("group.streams.initial.rebalance.delay.ms", int, 3000, *at_least(0)),
    _k("group.streams.assignment.interval.ms", int, 1000, *at_least(0)),
    _k("group.streams.min.assignment.interval.ms", int, 0, *at_least(0)),
    _k("group.streams.max.assignment.interval.ms", int, 15000, *at_least(0)),
    _k("transaction.state.log.num.partitions", int, 50, *at_least(1)),
    _k("transaction.state.log.replication.factor", int, 3, *at_least(1)),
    _k("transaction.state.log.min.isr", int, 2, *at_least(1)),
    _k("transaction.state.log.segment.bytes", int, 104857600, *at_least(1)),
    _k("transaction.max.timeout.ms", int, 900000, *at_least(1)),
    _k("transactional.id.expiration.ms", int, 604800000, *at_least(1)),
    _k("transaction.abort.timed.out.transaction.cleanup.interval.ms", int, 10000, *at_least(1)),
    _k("transaction.remove.expired.transaction.cleanup.interval.ms", int, 3600000, *at_least(1)),
    _k("transaction.partition.verification.enable", _bool, True),
    _k("transaction.two.phase.commit.enable", _bool, False),
    _k("producer.id.expiration.ms", int, 86400000, *at_least(1)),
    _k("producer.id.expiration.check.interval.ms", int, 600000, *at_least(1)),
    _k("share.coordinator.state.topic.replication.factor", int, 3, *at_least(1)),
    _k("share.coordinator.state.topic.min.isr", int, 2, *at_least(1)),
    _k("share.coordinator.state.topic.num.partitions", int, 50, *at_least(1)),
    _k("share.coordinator.write.timeout.ms", int, 5000, *at_least(1)),
    _k("unclean.leader.election.enable", _bool, False),
    # ACLs: only Kafka's StandardAuthorizer is known (see security/authorizer.py).
    _k("authorizer.class.name", str, "", *one_of("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer")),
    _k("allow.everyone.if.no.acl.found", _bool, False),
    _k("super.users", str, ""),
    _k("metrics.listener", str, "127.0.0.1:9404"),
    # Test-only fault points (comma list), e.g. txn.markers.pause holds transaction markers.
    _k("test.fault.points", str, "", internal=True),
    _k("log.format", str, "console", *one_of("console", "json")),
]}

# Kafka's shipped config/server.properties, where its defaults assume three brokers.
SINGLE_NODE_DEFAULTS = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}


LISTENER_LIMITS = ("max.connections", "max.connection.creation.rate")


def listener_limit_key(listener: str, name: str) -> str:
    """The listener-prefixed form of a connection limit, as Kafka names it (lower-case listener)."""
    return f"listener.name.{listener.lower()}.{name}"


def is_listener_limit(key: str) -> bool:
    """``listener.name.<listener>.max.connections`` or ``...max.connection.creation.rate``."""
    prefix, _, rest = key.partition("listener.name.")
    listener, _, name = rest.partition(".")
    return not prefix and bool(listener) and name in LISTENER_LIMITS


def listener_limit_value(name: str, raw: str) -> int:
    """A listener's connection limit: an int, at least 0 (as the broker-wide keys)."""
    try:
        value = int((raw or "").strip())
    except ValueError:
        raise ConfigError(f"Invalid value {raw!r} for configuration {name}: Not a number of type INT") from None
    if value < 0:
        raise ConfigError(f"Invalid value {raw!r} for configuration {name}: Value must be at least 0")
    return value


OVERRIDES = "max.connections.per.ip.overrides"
_JAVA_INT = re.compile(r"[+-]?[0-9]+")


def parse_overrides_setting(raw: str | None) -> dict[str, int]:
    """``host:count,...`` as Kafka parses it (``CoreUtils.parseCsvMap``, then ``toInt``), by
    host as written; ValueError with Kafka's message for a value it refuses."""
    out: dict[str, int] = {}
    if not raw:
        return out
    items = re.split(r"\s*,\s*", raw)
    while items and items[-1] == "":  # Java's split drops trailing empty strings
        items.pop()
    for item in items:
        colon = item.rfind(":")
        if colon < 0:
            raise ValueError(f"Error parsing configuration property '{OVERRIDES}': "
                             f"begin 0, end -1, length {len(item)}")
        host, count = item[:colon].strip(), item[colon + 1:].strip()
        if not _JAVA_INT.fullmatch(count) or not -2**31 <= int(count) < 2**31:
            raise ValueError(f'For input string: "{count}"')
        out[host] = int(count)
    return out


def check_connection_settings(values: Mapping[str, Any], listeners: Iterable[str] = (), *,
                              dynamic: bool = False) -> None:
    """What Kafka refuses of the connection limits, with its messages (ValueError): overrides it
    cannot parse, ``max.connections.per.ip`` 0 without overrides (KafkaConfig's requirement)
    and, for a dynamic change, a broker or listener ``max.connections`` or
    ``max.connection.creation.rate`` below 1 (``ListenerConnectionQuota.validateReconfiguration``),
    which would lock every client out."""
    overrides = parse_overrides_setting(values.get(OVERRIDES))
    if values.get("max.connections.per.ip") == 0 and not overrides:
        raise ValueError(f"requirement failed: max.connections.per.ip can be set to zero only if {OVERRIDES} "
                         "property is set.")
    if not dynamic:
        return
    for listener in [None, *listeners]:
        for name in LISTENER_LIMITS:
            value = values.get(listener_limit_key(listener, name)) if listener else None
            value = values.get(name) if value is None else value
            if value is not None and int(value) <= 0:
                raise ValueError(f"Invalid value org.apache.kafka.common.config.ConfigException: Invalid {name} "
                                 f"{value} for configuration Invalid dynamic configuration")


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties: ``#``/``!`` comments, ``=``/``:``/space separators, ``\\`` continuations."""
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_property(logical)
        out[key] = value
        logical = ""
    if logical:
        key, value = _split_property(logical)
        out[key] = value
    return out


def _split_property(line: str) -> tuple[str, str]:
    for i, ch in enumerate(line):
        if ch in "=: \t":
            key = line[:i]
            rest = line[i:].lstrip(" \t")
            if rest[:1] in ("=", ":") and ch in " \t":
                rest = rest[1:].lstrip(" \t")
            elif ch in "=:":
                rest = line[i + 1 :].lstrip(" \t")
            return key, rest
    return line, ""


class BrokerConfig:
    """Typed view of the effective configuration."""

    def __init__(self, values: dict[str, Any], unknown: list[str], ignored: list[str],
                 explicit: frozenset[str] = frozenset(), security_values: dict[str, str] | None = None) -> None:
        self.values = values
        self.unknown = unknown
        self.ignored = ignored
        # ssl.*, sasl.* and their listener.name.<name>. forms as given (read per listener by
        # security.ssl_factory and security.sasl).
        self.security_values = dict(security_values or {})
        self._ssl_contexts: dict[tuple[str, str], Any] = {}
        # Keys set in server.properties / --override (or by the single-node defaults, Kafka's
        # shipped server.properties): DescribeConfigs shows them as STATIC_BROKER_CONFIG.
        self.explicit = explicit

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    # --- derived values ------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        bid = self.values.get("broker.id")
        return bid if bid is not None and bid >= 0 else self.values["node.id"]

    @property
    def log_dir(self) -> str:
        dirs = self.values.get("log.dirs")
        return _list(dirs)[0] if dirs else self.values["log.dir"]

    @property
    def retention_ms(self) -> int:
        v = self.values
        if v.get("log.retention.ms") is not None:
            return v["log.retention.ms"]
        if v.get("log.retention.minutes") is not None:
            return v["log.retention.minutes"] * 60_000
        return v["log.retention.hours"] * 3_600_000

    @property
    def roll_ms(self) -> int:
        v = self.values
        return v["log.roll.ms"] if v.get("log.roll.ms") is not None else v["log.roll.hours"] * 3_600_000

    @property
    def flush_interval_ms(self) -> int:
        v = self.values.get("log.flush.interval.ms")
        return LONG_MAX if v is None else v

    # --- listeners -----------------------------------------------------------------------

    def listeners(self) -> list[ListenerSpec]:
        """What this broker binds, in the order given (``listeners``)."""
        specs = parse_listeners(self.values["listeners"], "listeners", self.security_protocol_map())
        if not specs:
            raise ConfigError("Invalid value '' for configuration listeners: at least one listener is required")
        return specs

    def advertised_listeners(self) -> list[ListenerSpec]:
        """What this broker tells clients, per listener; a listener ``advertised.listeners`` does
        not name is advertised as bound (0.0.0.0 and :: as localhost)."""
        raw = self.values.get("advertised.listeners")
        named = {s.name: s for s in parse_listeners(raw or "", "advertised.listeners",
                                                    self.security_protocol_map())}
        bound = self.listeners()
        unknown = sorted(set(named) - {s.name for s in bound})
        if unknown:
            raise ConfigError(f"Invalid value {raw!r} for configuration advertised.listeners: listener "
                              f"{unknown[0]} is not in listeners")
        out = []
        for spec in bound:
            adv = named.get(spec.name, spec)
            host = "localhost" if adv.host in ("", "0.0.0.0", "::") else adv.host
            out.append(ListenerSpec(spec.name, host, adv.port))
        return out

    @property
    def inter_broker_listener_name(self) -> str:
        """``inter.broker.listener.name``, or else the listener named after
        ``security.inter.broker.protocol`` (PLAINTEXT by default), as Kafka reads them: setting
        both is refused. With neither set and no PLAINTEXT listener, the first listener (where
        Kafka refuses to start)."""
        bound = [s.name for s in self.listeners()]
        name = self.values.get("inter.broker.listener.name")
        protocol = self.values.get("security.inter.broker.protocol")
        if name and protocol:
            raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol "
                              "should be set.")
        if protocol:
            name, key = protocol.upper(), "security.inter.broker.protocol"
        elif name:
            name, key = name.upper(), "inter.broker.listener.name"
        else:
            return "PLAINTEXT" if "PLAINTEXT" in bound else bound[0]
        if name not in bound:
            raise ConfigError(f"Invalid value {name!r} for configuration {key}: {key} must name a listener "
                              f"defined in listeners; the valid options are {', '.join(bound)}")
        return name

    def security_protocol(self, listener: str) -> str:
        return self.security_protocol_map()[listener]

    def server_ssl_context(self, listener: str):
        """The TLS context of an SSL listener (built once; ConfigError if it cannot be)."""
        return self._ssl_context("server", listener)

    def client_ssl_context(self, listener: str):
        """The context for connecting to a peer's SSL ``listener`` (the inter-broker one)."""
        return self._ssl_context("client", listener)

    def _ssl_context(self, side: str, listener: str):
        from security import ssl_factory

        cached = self._ssl_contexts.get((side, listener))
        if cached is None:
            settings = ssl_factory.ssl_settings(self.security_values, listener)
            build = ssl_factory.server_context if side == "server" else ssl_factory.client_context
            try:
                cached = self._ssl_contexts[(side, listener)] = build(settings)
            except ssl_factory.SslConfigError as exc:
                raise ConfigError(f"listener {listener}: {exc}") from None
        return cached

    def inter_broker_ssl_context(self):
        """TLS for this broker's connections to its peers: None when the inter-broker
        listener does not use TLS."""
        name = self.inter_broker_listener_name
        return self.client_ssl_context(name) if self.security_protocol(name) in ("SSL", "SASL_SSL") else None

    def inter_broker_sasl_client(self):
        """This broker's SASL login to its peers: None when the inter-broker listener does
        not use SASL."""
        from security.sasl import inter_broker_client

        name = self.inter_broker_listener_name
        if not self.security_protocol(name).startswith("SASL_"):
            return None
        try:
            return inter_broker_client(self.security_values, name)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def check_ssl_reconfiguration(self, listener: str, security_values: dict[str, str]) -> None:
        """SslConfigError unless ``listener`` (an SSL or SASL_SSL one) can take these values."""
        from security import ssl_factory

        names = {spec.name for spec in self.listeners()}
        if listener not in names or self.security_protocol(listener) not in ("SSL", "SASL_SSL"):
            raise ssl_factory.SslConfigError(f"{listener} is not a TLS listener of this broker")
        ssl_factory.check_reconfiguration(ssl_factory.ssl_settings(self.security_values, listener),
                                          ssl_factory.ssl_settings(security_values, listener))

    def reconfigure_ssl(self, listener: str, security_values: dict[str, str]):
        """Take new ``ssl.*`` values; the listener's live context (if built) loads its new
        stores. Returns the listener's new settings."""
        from security import ssl_factory

        settings = ssl_factory.ssl_settings(security_values, listener)
        ctx = self._ssl_contexts.get(("server", listener))
        if ctx is not None:
            ssl_factory.reconfigure(ctx, settings)
        self.security_values = security_values
        return settings

    def ssl_store_watcher(self, listener: str):
        """Reloads ``listener``'s TLS context when its store files change."""
        from security import ssl_factory

        return ssl_factory.StoreWatcher(self.server_ssl_context(listener),
                                        ssl_factory.ssl_settings(self.security_values, listener))

    def ssl_principal_mapping_rules(self, listener: str) -> str:
        from security import ssl_factory

        return ssl_factory.ssl_settings(self.security_values, listener)["ssl.principal.mapping.rules"]

    def security_protocol_map(self) -> dict[str, str]:
        raw = self.values.get("listener.security.protocol.map")
        return parse_security_protocol_map(raw) if raw else dict(DEFAULT_SECURITY_PROTOCOL_MAP)

    def listener(self) -> tuple[str, int]:
        """Where the inter-broker listener binds."""
        return self._inter_broker(self.listeners())

    def advertised(self) -> tuple[str, int]:
        """Where peers reach this broker: the inter-broker listener as advertised."""
        return self._inter_broker(self.advertised_listeners())

    def _inter_broker(self, specs: list[ListenerSpec]) -> tuple[str, int]:
        name = self.inter_broker_listener_name
        spec = next(s for s in specs if s.name == name)
        return spec.host, spec.port


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    name: str  # upper case, as Kafka normalises listener names
    host: str
    port: int


# Kafka's default map, plus the names this broker accepted before the map was read.
DEFAULT_SECURITY_PROTOCOL_MAP = {
    "PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL",
    "BROKER": "PLAINTEXT", "CLIENT": "PLAINTEXT", "INTERNAL": "PLAINTEXT", "EXTERNAL": "PLAINTEXT",
}
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SERVED_PROTOCOLS = SECURITY_PROTOCOLS


def parse_security_protocol_map(raw: str) -> dict[str, str]:
    key = "listener.security.protocol.map"
    out: dict[str, str] = {}
    for item in _list(raw):
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip() or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: expected NAME:PROTOCOL pairs "
                              f"with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
        out[name.strip().upper()] = protocol
    return out


def parse_listeners(raw: str, key: str, protocols: dict[str, str]) -> list[ListenerSpec]:
    """``NAME://host:port`` entries; names unique, each mapped to PLAINTEXT or SSL (the protocols served)."""
    specs = [parse_listener_spec(item, key) for item in _list(raw)]
    names = [s.name for s in specs]
    for spec in specs:
        if names.count(spec.name) > 1:
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: listener {spec.name} appears twice")
        protocol = protocols.get(spec.name)
        if protocol is None:
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: listener {spec.name} is not in "
                              f"listener.security.protocol.map")
        if protocol not in SERVED_PROTOCOLS:
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: listener {spec.name} uses "
                              f"{protocol}, which is not served")
    return specs


def parse_listener_spec(spec: str, key: str) -> ListenerSpec:
    if "://" not in spec:
        raise ConfigError(f"Invalid value {spec!r} for configuration {key}: expected NAME://host:port")
    name, rest = spec.split("://", 1)
    host, _, port = rest.rpartition(":")
    try:
        return ListenerSpec(name.strip().upper(), host.strip("[]"), int(port))
    except ValueError:
        raise ConfigError(f"Invalid value {spec!r} for configuration {key}: bad port") from None


def type_name(key: Key) -> str:
    """Kafka's ConfigDef type of a key, from its parser and name."""
    if key.parse is int:
        return "LONG" if key.name.endswith((".ms", ".bytes", ".messages")) else "INT"
    if key.parse is float:
        return "DOUBLE"
    if key.parse is str:
        return "PASSWORD" if key.name.endswith(".password") else "STRING"
    return "BOOLEAN"


def _parse_problem(key: Key, exc: ValueError) -> str:
    """Kafka's wording for a value of the wrong type (not Python's int() message)."""
    kind = type_name(key)
    if kind in ("INT", "LONG", "DOUBLE"):
        return f"Not a number of type {kind}"
    return str(exc)


def load_config(properties: dict[str, str], *, strict: bool = False,
                single_node_defaults: bool = True) -> BrokerConfig:
    # A cluster (an etcd metadata store) gets Kafka's own defaults: internal topics RF 3, min ISR 2.
    clustered = bool(properties.get("metadata.etcd.endpoints", "").strip())
    merged = dict(SINGLE_NODE_DEFAULTS) if single_node_defaults and not clustered else {}
    merged.update(properties)
    values: dict[str, Any] = {k.name: k.default for k in KEYS.values()}
    unknown, ignored, security_values = [], [], {}
    for name, raw in merged.items():
        key = KEYS.get(name)
        if key is None and (is_ssl_key(name) or is_sasl_key(name)):
            security_values[name] = raw
            continue
        if key is None and is_listener_limit(name):
            values[name] = listener_limit_value(name, raw)
            continue
        if key is None:
            close = difflib.get_close_matches(name, KEYS.keys(), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            msg = f"Unknown configuration {name}{hint}"
            if strict:
                raise ConfigError(msg)
            unknown.append(msg)
            continue
        try:
            value = key.parse(raw) if raw.strip() != "" or key.parse is str else None
        except ValueError as exc:
            raise ConfigError(f"Invalid value {raw!r} for configuration {name}: "
                              f"{_parse_problem(key, exc)}") from None
        if key.check is not None and value is not None and not key.check(value):
            raise ConfigError(f"Invalid value {raw!r} for configuration {name}: {key.requirement}")
        values[name] = value
        if key.ignored and name in properties:
            ignored.append(name)
    try:
        check_connection_settings(values)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    config = BrokerConfig(values, unknown, ignored, frozenset(k for k in merged if k in KEYS), security_values)
    config.advertised()  # every listener setting is checked now: a bad one stops start-up
    for spec in config.listeners():
        if config.security_protocol(spec.name).startswith("SASL_"):
            try:
                check_listener(config.security_values, spec.name)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        if config.security_protocol(spec.name) in ("SSL", "SASL_SSL"):
            config.server_ssl_context(spec.name)
            try:
                SslPrincipalMapper(config.ssl_principal_mapping_rules(spec.name))
            except ValueError as exc:
                raise ConfigError(f"Invalid value for configuration ssl.principal.mapping.rules: {exc}") from None
    inter_broker = config.inter_broker_listener_name
    config.inter_broker_sasl_client()
    if config.security_protocol(inter_broker) in ("SSL", "SASL_SSL"):
        config.client_ssl_context(inter_broker)
    return config


def load_from_args(path: str | None, overrides: list[str], strict: bool = False) -> BrokerConfig:
    props: dict[str, str] = {}
    if path:
        try:
            with open(path) as f:
                props = parse_properties(f.read())
        except OSError as exc:
            raise ConfigError(f"Cannot read {path}: {exc.strerror}") from None
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"Invalid --override {item!r}: expected key=value")
        k, v = item.split("=", 1)
        props[k.strip()] = v.strip()
    return load_config(props, strict=strict)


def default_log_dir_is_relative(config: BrokerConfig) -> bool:
    return not os.path.isabs(config.log_dir)
