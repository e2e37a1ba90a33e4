"""Config administration (Kafka's ``ConfigHelper`` and ``ConfigAdminManager``): config
resources, config sources and synonyms (DescribeConfigs), validated topic-config changes
(AlterConfigs, IncrementalAlterConfigs), and the dynamic broker configs.

Config sources and synonyms follow Kafka's ``ConfigHelper``: a topic config's source is
TOPIC_CONFIG when the topic overrides it, else the source of the first broker-level synonym
found in the order per-broker dynamic (DYNAMIC_BROKER_CONFIG), cluster-wide dynamic
(DYNAMIC_DEFAULT_BROKER_CONFIG), server.properties/--override (STATIC_BROKER_CONFIG), built-in
default (DEFAULT_CONFIG). Like Kafka, synonyms listed before the primary broker key are dropped,
so ``retention.ms`` shows no synonyms unless ``log.retention.ms`` itself is set somewhere.

Dynamic broker configs (IncrementalAlterConfigs / AlterConfigs on BROKER resources): the
broker-level log defaults listed in :data:`DYNAMIC_BROKER_KEYS`, per broker (resource name =
node id) or cluster-wide (empty name). They are kept in ``<log dir>/__dynamic_broker_configs.json``
(written with fsync + rename before they apply), applied to ``broker.config`` and to every open
partition's log config, and re-applied at start-up by :func:`load_dynamic_broker_configs`. Per
broker only, a TLS listener's key and trust stores (``listener.name.<listener>.ssl.keystore.location``
and the rest of ``ssl_factory.DYNAMIC_STORE_KEYS``): checked (the stores load, the certificate
keeps its subject and alternative names) and loaded into the listener's live context, so new
connections get the new certificate, as Kafka's ``DynamicListenerConfig`` does.

Group configs (GROUP resources, :mod:`coordinator.group.group_config`): a group's overrides are
kept in the cluster metadata (every broker sees them); described as GROUP_CONFIG when set, else
with the source of the broker key behind them, as Kafka's ``ConfigHelper`` does.

Kafka's other dynamic keys for features this broker does not have (SSL, SASL, quotas, remote
storage...; ``dynamic_config_keys``), and those this broker accepts without effect (e.g.
``log.cleaner.threads``), are validated, stored and described back, with no effect.

Differs from Kafka: a key this broker knows but cannot change at run time (listeners, thread
pools...) is refused with INVALID_REQUEST ("Cannot update these configs dynamically: [...]"),
and unknown broker keys are refused instead of being stored (Kafka 4.3 stores them). A key given in server.properties or --override (or by the single-node defaults,
which stand for Kafka's shipped server.properties) is a STATIC_BROKER_CONFIG, even at its default
value, as in Kafka.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import structlog

from coordinator.group import group_config
from metadata.controller.replication import validate_topic_name
from protocol.errors import ErrorCode, KafkaError
from security.ssl_factory import SslConfigError, dynamic_store_listener
from storage.checkpoint import write_atomically

from . import topic_config
from .config import (
    KEYS,
    OVERRIDES,
    ConfigError,
    check_connection_settings,
    is_listener_limit,
    listener_limit_value,
    type_name,
)
from .dynamic_config_keys import KAFKA_DYNAMIC_CONFIGS

if TYPE_CHECKING:
    from metadata.records import TopicState

    from .services import BrokerServices

log = structlog.get_logger("broker.admin")


class ConfigResourceType(IntEnum):
    """Kafka's ``ConfigResource.Type`` (not the ACL resource type of :mod:`security.acls`)."""
    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(IntEnum):
    """Where a described config value comes from (``DescribeConfigsResponse.ConfigSource``)."""
    UNKNOWN = 0
    TOPIC_CONFIG = 1  # DYNAMIC_TOPIC_CONFIG in the admin clients
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigType(IntEnum):
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class OpType(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# Kafka's ServerTopicConfigSynonyms: the broker key behind each topic key (primary first).
TOPIC_SYNONYMS: dict[str, str] = {k: tk.synonym for k, tk in topic_config.TOPIC_KEYS.items() if tk.synonym}

# Broker keys Kafka has but this broker's config does not: Kafka's defaults, so the
# DEFAULT_CONFIG synonym still shows.
_MISSING_BROKER_DEFAULTS = {tk.synonym: tk.default for tk in topic_config.TOPIC_KEYS.values()
                            if tk.synonym and tk.synonym not in KEYS}

# The broker keys this broker can change at run time (all are topic-config defaults).
DYNAMIC_BROKER_KEYS = frozenset({
    "log.segment.bytes", "log.roll.ms", "log.retention.ms", "log.retention.bytes",
    "log.flush.interval.messages", "log.flush.interval.ms", "log.index.interval.bytes",
    "log.cleaner.delete.retention.ms", "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms", "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms",
    "log.cleaner.min.cleanable.ratio", "log.cleanup.policy", "log.message.timestamp.type",
    "message.max.bytes", "min.insync.replicas", "unclean.leader.election.enable",
    "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
    "max.connection.creation.rate",
})

CONNECTION_KEYS = ("max.connections", "max.connection.creation.rate", "max.connections.per.ip", OVERRIDES)

LIST_KEYS = frozenset({k for k, tk in topic_config.TOPIC_KEYS.items() if tk.type == "LIST"} | {
    "log.cleanup.policy", "listeners", "advertised.listeners", "log.dirs", "controller.listener.names",
    "process.roles", "controller.quorum.voters", "controller.quorum.bootstrap.servers"} | {
    k for k, (ctype, _) in KAFKA_DYNAMIC_CONFIGS.items() if ctype == "LIST"})

TOPIC_CONFIG_TYPES = {k: ConfigType[tk.type] for k, tk in topic_config.TOPIC_KEYS.items()}
TOPIC_DOCS = {k: tk.doc for k, tk in topic_config.TOPIC_KEYS.items()}

DYNAMIC_FILE = "__dynamic_broker_configs.json"


def config_value(v: Any) -> str | None:
    """A parsed config value as Kafka prints it."""
    if v is None:
        return None
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    return str(v)


def broker_config_type(name: str) -> ConfigType:
    if name in LIST_KEYS:
        return ConfigType.LIST
    key = KEYS.get(name)
    if key is not None:
        return ConfigType[type_name(key)]
    kafka_only = KAFKA_DYNAMIC_CONFIGS.get(name)
    return ConfigType[kafka_only[0]] if kafka_only else ConfigType.UNKNOWN


def broker_synonyms(name: str) -> list[str]:
    """Kafka's DynamicBrokerConfig.brokerConfigSynonyms: the keys that can set ``name``."""
    if name in ("log.roll.ms", "log.roll.hours"):
        return ["log.roll.ms", "log.roll.hours"]
    if name in ("log.retention.ms", "log.retention.minutes", "log.retention.hours"):
        return ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
    if name == "log.flush.interval.ms":
        return ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    return [name]


def node_id_of(broker: BrokerServices, name: str, *, describe: bool) -> None:
    """Check a BROKER resource name against this node (INVALID_REQUEST as Kafka words it)."""
    try:
        node = int(name)
    except ValueError:
        what = "Broker id" if describe else "Node id"
        raise KafkaError(ErrorCode.invalid_request, f"{what} must be an integer, but it is: {name}") from None
    if node != broker.node_id:
        either = " or empty string" if describe else ""
        raise KafkaError(ErrorCode.invalid_request,
                         f"Unexpected broker id, expected {broker.node_id}{either}, but received {name}")


def duplicate_resources(resources: Iterable) -> set[tuple[int, str]]:
    seen: set[tuple[int, str]] = set()
    dups: set[tuple[int, str]] = set()
    for r in resources:
        key = (r.resource_type, r.resource_name)
        (dups if key in seen else seen).add(key)
    return dups


def check_alter_entries(configs: Iterable, *, null_ok=lambda c: False) -> None:
    """Kafka's ConfigAdminManager.preprocess: duplicate keys and null values are INVALID_REQUEST."""
    names = [c.name for c in configs]
    if len(names) != len(set(names)):
        raise KafkaError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    nulls = [c.name for c in configs if c.value is None and not null_ok(c)]
    if nulls:
        raise KafkaError(ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls))


def unsupported_resource(resource_type: int) -> str:
    try:
        kind = ConfigResourceType(resource_type)
    except ValueError:
        return f"Unknown resource type {resource_type}"
    return f"Resource type {kind.name} is not supported by this broker"


def resource_error(r, code: ErrorCode, message: str | None) -> dict:
    return {"error_code": code, "error_message": message, "resource_type": r.resource_type,
            "resource_name": r.resource_name}


async def alter_each(request, alter) -> dict:
    """Await ``alter(resource, validate_only)`` per resource of an (Incremental)AlterConfigs
    request; duplicates and KafkaErrors become per-resource errors, as Kafka answers them."""
    dups = duplicate_resources(request.resources)
    responses = []
    for r in request.resources:
        if (r.resource_type, r.resource_name) in dups:
            responses.append(resource_error(r, ErrorCode.invalid_request,
                                            "Each resource must appear at most once."))
            continue
        try:
            await alter(r, request.validate_only)
            responses.append(resource_error(r, ErrorCode.none, None))
        except KafkaError as exc:
            responses.append(resource_error(r, exc.code, exc.message))
    return {"throttle_time": 0, "responses": responses}


# --- topics ----------------------------------------------------------------------------------

def topic_for_config_change(broker: BrokerServices, name: str) -> None:
    """Name checks before a topic config change (Kafka's ControllerConfigurationValidator)."""
    if not name:
        raise KafkaError(ErrorCode.invalid_request, "Default topic resources are not allowed.")
    validate_topic_name(name)


def type_error(name: str, value: str, ctype: ConfigType) -> str | None:
    """Kafka's ConfigDef.parseType wording for a value of the wrong type, else None (the topic
    configs' parser, which knows Kafka's types)."""
    try:
        topic_config.parse(name, ctype.name, value)
    except ConfigError as exc:
        return str(exc)
    return None


def _kafka_wording(message: str) -> str:
    """config's ``must be >= N`` as Kafka's ``Value must be at least N``."""
    head, sep, req = message.rpartition(": must be >= ")
    return f"{head}: Value must be at least {req}" if sep else message


def validated_topic_overrides(overrides: dict[str, str]) -> dict[str, str]:
    """Normalise every override; INVALID_CONFIG naming the key on the first bad one."""
    out = {}
    for key, value in overrides.items():
        try:
            out[key] = topic_config.validate_topic_config(key, value)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
    return out


async def apply_topic_overrides(broker: BrokerServices, name: str, overrides: dict[str, str],
                                validate_only: bool) -> None:
    if name not in broker.metadata.topics:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.")
    if not validate_only and overrides != broker.metadata.topics[name].configs:
        await broker.control.replication.alter_topic_configs(name, overrides)
        log.info("topic_configs_altered", topic=name, configs=overrides)


def incremental(current: dict[str, str], configs: Iterable, default_of, *, broker: bool = False) -> dict[str, str]:
    """Apply SET/DELETE/APPEND/SUBTRACT to a copy of ``current``; LIST-typed keys only for the
    last two (INVALID_CONFIG otherwise, worded as Kafka words it for topics and brokers)."""
    new = dict(current)
    for c in configs:
        try:
            op = OpType(c.config_operation)
        except ValueError:
            raise KafkaError(ErrorCode.invalid_request,
                             f"Unknown operations type {c.config_operation}") from None
        if op is OpType.SET:
            new[c.name] = c.value
        elif op is OpType.DELETE:
            new.pop(c.name, None)
        else:
            if c.name not in LIST_KEYS:
                if broker:
                    message = f"Config value {op.name.lower()} is not allowed for config key: {c.name}"
                else:
                    message = f"Can't {op.name} to key {c.name} because its type is not LIST."
                raise KafkaError(ErrorCode.invalid_config, message)
            base = new.get(c.name)
            if base is None:
                base = default_of(c.name)
            parts = [p for p in (base or "").split(",") if p]
            for v in c.value.split(","):
                if op is OpType.APPEND and v not in parts:
                    parts.append(v)
                elif op is OpType.SUBTRACT and v in parts:
                    parts.remove(v)
            new[c.name] = ",".join(parts)
    return new


def describe_topic(broker: BrokerServices, topic: TopicState, keys, include_synonyms: bool,
                   include_docs: bool) -> list[dict]:
    dyn = dynamic_configs(broker)
    out = []
    for key, (value, is_override) in sorted(topic_config.effective(topic.configs, broker.config).items()):
        if keys and key not in keys:
            continue
        synonyms = [(key, value, ConfigSource.TOPIC_CONFIG)] if is_override else []
        primary = TOPIC_SYNONYMS.get(key)
        if primary is not None:
            synonyms += dyn.synonyms(primary)
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        out.append({
            "name": key, "value": value, "read_only": False, "config_source": source,
            "is_sensitive": False,
            "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in synonyms] if include_synonyms else [],
            "config_type": TOPIC_CONFIG_TYPES.get(key, ConfigType.UNKNOWN),
            "documentation": TOPIC_DOCS.get(key) if include_docs else None,
        })
    return out


# --- groups ----------------------------------------------------------------------------------

def group_for_config_change(name: str) -> None:
    if not name:
        raise KafkaError(ErrorCode.invalid_request, "Default group resources are not allowed.")


def validated_group_overrides(broker: BrokerServices, overrides: dict[str, str]) -> dict[str, str]:
    try:
        return group_config.validate(overrides, broker.config.get)
    except group_config.GroupConfigError as exc:
        raise KafkaError(ErrorCode.invalid_config, str(exc)) from None


async def apply_group_overrides(broker: BrokerServices, group_id: str, overrides: dict[str, str],
                                validate_only: bool) -> None:
    if not validate_only and await broker.control.configs.set_group_configs(group_id, overrides):
        log.info("group_configs_altered", group=group_id, configs=overrides)


def describe_group(broker: BrokerServices, group_id: str, keys, include_synonyms: bool,
                   include_docs: bool) -> list[dict]:
    dyn = dynamic_configs(broker)
    overrides = broker.metadata.group_configs.get(group_id, {})
    out = []
    for name, key in group_config.GROUP_CONFIG_KEYS.items():
        if keys and name not in keys:
            continue
        synonyms = [(name, overrides[name], ConfigSource.GROUP_CONFIG)] if name in overrides else []
        if key.broker_synonym is not None:
            synonyms += dyn.synonyms(key.broker_synonym)
        else:
            synonyms.append((name, group_config.as_string(key.default), ConfigSource.DEFAULT_CONFIG))
        value = overrides.get(name)
        if value is None:
            value = group_config.as_string(group_config.config_value(None, name, broker.config.get))
        out.append({
            "name": name, "value": value, "read_only": False, "config_source": synonyms[0][2],
            "is_sensitive": False,
            "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in synonyms] if include_synonyms else [],
            "config_type": ConfigType[key.type], "documentation": key.doc if include_docs else None,
        })
    return out


# --- brokers ---------------------------------------------------------------------------------

def describe_broker(broker: BrokerServices, per_broker: bool, keys, include_synonyms: bool,
                    include_docs: bool) -> list[dict]:
    dyn = dynamic_configs(broker)
    if per_broker:
        names = sorted({n for n, k in KEYS.items() if not k.internal} | set(dyn.per_broker)
                       | set(dyn.cluster_default))
        values = {n: dyn.value(n) for n in names}
    else:  # the cluster-wide default resource shows only the dynamic defaults, as Kafka
        names = sorted(dyn.cluster_default)
        values = dict(dyn.cluster_default)
    out = []
    for name in names:
        if keys and name not in keys:
            continue
        synonyms = dyn.synonyms(name)
        if not per_broker:
            synonyms = [s for s in synonyms if s[2] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        out.append({
            "name": name, "value": None if sensitive(name) else values[name],
            "read_only": name in KEYS and name not in DYNAMIC_BROKER_KEYS,
            "config_source": source, "is_sensitive": sensitive(name),
            "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in synonyms] if include_synonyms else [],
            "config_type": broker_config_type(name),
            "documentation": _broker_doc(name) if include_docs else None,
        })
    return out


def _broker_doc(name: str) -> str | None:
    for topic_key, broker_key in TOPIC_SYNONYMS.items():
        if broker_key == name:
            return f"The default for the topic config {topic_key}: {TOPIC_DOCS[topic_key]}"
    return None


class DynamicBrokerConfigs:
    """Per-broker and cluster-wide dynamic broker configs, layered over the static config."""

    def __init__(self, broker: BrokerServices) -> None:
        self.broker = broker
        self.static: dict[str, Any] = dict(broker.config.values)
        self.static_security: dict[str, str] = dict(broker.config.security_values)
        self.explicit = broker.config.explicit
        self.per_broker: dict[str, str] = {}
        self.cluster_default: dict[str, str] = {}
        self.path = os.path.join(broker.config.log_dir, DYNAMIC_FILE)
        try:
            with open(self.path) as f:
                raw = json.load(f)
            self.per_broker = dict(raw.get("per_broker", {}))
            self.cluster_default = dict(raw.get("cluster_default", {}))
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.error("dynamic_broker_configs_unreadable", path=self.path, error=str(exc))

    # --- reading ---------------------------------------------------------------------------

    def synonyms(self, name: str) -> list[tuple[str, str | None, ConfigSource]]:
        """Kafka's ConfigHelper.configSynonyms over ``broker_synonyms(name)``."""
        names = broker_synonyms(name)
        found: list[tuple[str, str | None, ConfigSource]] = []
        for n in names:
            if n in self.per_broker:
                found.append((n, self.per_broker[n], ConfigSource.DYNAMIC_BROKER_CONFIG))
        for n in names:
            if n in self.cluster_default:
                found.append((n, self.cluster_default[n], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        for n in names:
            if n in self.explicit and self.static.get(n) is not None:
                found.append((n, config_value(self.static[n]), ConfigSource.STATIC_BROKER_CONFIG))
        for n in names:
            key = KEYS.get(n)
            default = config_value(key.default) if key is not None else _MISSING_BROKER_DEFAULTS.get(n)
            if default is not None:
                found.append((n, default, ConfigSource.DEFAULT_CONFIG))
        while found and found[0][0] != name:
            found.pop(0)
        return found

    def value(self, name: str) -> str | None:
        """The effective value; a Kafka-only dynamic key's stored value (it has no effect here)."""
        if name in KEYS:
            return config_value(self.broker.config.get(name))
        return self.per_broker.get(name, self.cluster_default.get(name))

    def layer(self, per_broker: bool) -> dict[str, str]:
        return self.per_broker if per_broker else self.cluster_default

    def default_of(self, name: str) -> str | None:
        return config_value(self.broker.config.get(name))

    # --- changing --------------------------------------------------------------------------

    @staticmethod
    def validate(configs: dict[str, str]) -> dict[str, str]:
        """INVALID_REQUEST (as Kafka: KAFKA-13609) for read-only, unknown or bad values."""
        unknown = sorted(k for k in configs if k not in KEYS and k not in KAFKA_DYNAMIC_CONFIGS
                         and dynamic_store_listener(k) is None and not is_listener_limit(k))
        if unknown:
            raise KafkaError(ErrorCode.invalid_request, f"Unknown broker configs: {', '.join(unknown)}")
        fixed = sorted(k for k in configs if k in KEYS and k not in DYNAMIC_BROKER_KEYS
                       and not (KEYS[k].ignored and k in KAFKA_DYNAMIC_CONFIGS))
        if fixed:
            raise KafkaError(ErrorCode.invalid_request,
                             f"Cannot update these configs dynamically: [{', '.join(fixed)}]")
        out = {}
        for name, raw in configs.items():
            if dynamic_store_listener(name) is not None:  # checked with the listener (check_ssl)
                out[name] = raw
                continue
            if is_listener_limit(name):
                try:
                    out[name] = str(listener_limit_value(name, raw))
                except ConfigError as exc:
                    raise KafkaError(ErrorCode.invalid_request, str(exc)) from None
                continue
            bad = type_error(name, raw, broker_config_type(name))
            if bad:
                raise KafkaError(ErrorCode.invalid_request, bad)
            out[name] = raw if name not in KEYS else _checked_broker_value(name, raw)
        return out

    def replace(self, per_broker: bool, configs: dict[str, str], validate_only: bool) -> None:
        configs = self.validate(configs)
        self._check_ssl(per_broker, configs)
        self._check_connection_limits(per_broker, configs)
        if validate_only:
            return
        if per_broker:
            self.per_broker = configs
        else:
            self.cluster_default = configs
        self._save()
        log.info("dynamic_broker_configs_altered", scope="broker" if per_broker else "cluster-default",
                 configs=configs)
        self.apply()

    def _check_connection_limits(self, per_broker: bool, configs: dict[str, str]) -> None:
        """The connection limits as they would be after the change, checked as Kafka checks a
        new config: refused here rather than locking every client out once applied."""
        layers = (configs, self.cluster_default) if per_broker else (self.per_broker, configs)
        names = {k for layer in layers for k in layer if k in CONNECTION_KEYS or is_listener_limit(k)}
        names |= {k for k in self.static if is_listener_limit(k)} | set(CONNECTION_KEYS)
        values: dict[str, Any] = {}
        for name in names:
            raw = next((layer[name] for layer in layers if name in layer), None)
            if raw is None:
                values[name] = self.static.get(name)
            elif name == OVERRIDES:
                values[name] = raw
            else:
                values[name] = int(raw)
        listeners = [spec.name for spec in self.broker.config.listeners()]
        try:
            check_connection_settings(values, listeners, dynamic=True)
        except ValueError as exc:
            raise KafkaError(ErrorCode.invalid_request, str(exc)) from None

    def _ssl_values(self, per_broker: dict[str, str]) -> dict[str, str]:
        """The broker's ``ssl.*`` values with these per-broker listener store settings."""
        values = dict(self.static_security)
        values.update({k: v for k, v in per_broker.items() if dynamic_store_listener(k) is not None})
        return values

    def _check_ssl(self, per_broker: bool, configs: dict[str, str]) -> None:
        """Listener key and trust stores change per broker only, to stores that load and keep
        the certificate's identity (Kafka's DynamicBrokerConfig and SslFactory checks)."""
        listeners = {dynamic_store_listener(k) for k in configs} - {None}
        if not listeners:
            return
        if not per_broker:
            raise KafkaError(ErrorCode.invalid_request, "Cannot update these configs at default cluster level, "
                             "broker id must be specified: "
                             f"[{', '.join(sorted(k for k in configs if dynamic_store_listener(k)))}]")
        candidate = self._ssl_values(configs)
        for listener in sorted(listeners):
            try:
                self.broker.config.check_ssl_reconfiguration(listener, candidate)
            except (SslConfigError, OSError, ValueError) as exc:
                raise KafkaError(ErrorCode.invalid_request, f"Validation of dynamic config update of SSLFactory "
                                 f"failed: {exc}") from None

    def _apply_ssl(self) -> None:
        """Listeners whose store settings changed load their new stores (from start-up on)."""
        values = self._ssl_values(self.per_broker)
        current = self.broker.config.security_values
        changed = {dynamic_store_listener(k) for k in set(values) | set(current)
                   if values.get(k) != current.get(k)} - {None}
        if not changed:
            return
        for listener in sorted(changed):
            settings = self.broker.config.reconfigure_ssl(listener, values)
            watcher = getattr(self.broker, "store_watchers", {}).get(listener)
            if watcher is not None:
                watcher.retarget(settings)
            log.info("ssl_listener_reconfigured", listener=listener,
                     keystore=settings["ssl.keystore.location"] or "(inline)")

    def _save(self) -> None:
        write_atomically(self.path, json.dumps({"per_broker": self.per_broker, "cluster_default": self.cluster_default}))

    def apply(self) -> None:
        """Make ``broker.config`` the layered values and re-derive every partition's log config."""
        self._apply_ssl()
        values = self.broker.config.values
        stored = (set(self.per_broker) | set(self.cluster_default)) & set(KEYS)  # others: no effect
        for name in DYNAMIC_BROKER_KEYS | stored:
            raw = self.per_broker.get(name, self.cluster_default.get(name))
            if raw is None:
                values[name] = self.static.get(name)
            else:
                values[name] = KEYS[name].parse(raw)
        # A listener's connection limits: the stored value, else the static one, else none.
        limits = {k for k in set(values) | set(self.per_broker) | set(self.cluster_default) if is_listener_limit(k)}
        for name in limits:
            raw = self.per_broker.get(name, self.cluster_default.get(name))
            if raw is not None:
                values[name] = int(raw)
            elif self.static.get(name) is not None:
                values[name] = self.static[name]
            else:
                values.pop(name, None)
        for topic in list(self.broker.metadata.topics.values()):  # the new broker defaults reach every log
            self.broker.replica_manager.apply_topic_configs(topic.name, topic.configs)


def sensitive(name: str) -> bool:
    """Never described with its value: passwords, and a key store's inline private key."""
    return broker_config_type(name) is ConfigType.PASSWORD or name.endswith((".password", "ssl.keystore.key"))


def _checked_broker_value(name: str, raw: str) -> str:
    key = KEYS[name]
    try:
        if raw.strip() == "":
            raise ValueError("empty value")
        value = key.parse(raw)
    except ValueError as exc:
        raise KafkaError(ErrorCode.invalid_request,
                         f"Invalid value {raw} for configuration {name}: {exc}") from None
    if key.check is not None and not key.check(value):
        raise KafkaError(ErrorCode.invalid_request, _kafka_wording(
            f"Invalid value {raw} for configuration {name}: {key.requirement}"))
    return config_value(value)


def dynamic_configs(broker: BrokerServices) -> DynamicBrokerConfigs:
    dyn = getattr(broker, "dynamic_broker_configs", None)
    if dyn is None:
        dyn = DynamicBrokerConfigs(broker)
        broker.dynamic_broker_configs = dyn
        if dyn.per_broker or dyn.cluster_default:
            dyn.apply()
    return dyn


def load_dynamic_broker_configs(broker: BrokerServices) -> None:
    """Start-up hook: apply the persisted dynamic broker configs before partitions open."""
    try:
        dynamic_configs(broker)
    except Exception:  # a bad file must not keep the broker down
        log.exception("dynamic_broker_configs_not_applied")
