"""Group configs: the per-group settings of a GROUP config resource (KIP-848, KIP-932, KIP-1071).

Owns the table of Kafka 4.3.1's ``GroupConfig`` keys (type, default, validator, the broker key
each one defaults to), their validation with Kafka's wording, and the effective value of a key
for one group: the group's override if it has one, else the broker's value of the synonym
(``group.share.record.lock.duration.ms`` behind ``share.record.lock.duration.ms``), else the
built-in default. Coordinators read a group's overrides from ``MetadataCache.group_configs``
(``{group id: {key: value}}``, set with IncrementalAlterConfigs / AlterConfigs) and resolve
them here with :func:`config_value`.

Validation follows ``GroupConfig.validate``: unknown names first ("Unknown group config name"),
then each value's type and validator, then the cross checks against the broker's bounds
(``group.consumer.min.session.timeout.ms``...) on the overrides merged over the broker
defaults; every failure is Kafka's InvalidConfigurationException, i.e. INVALID_CONFIG.

Differs from Kafka: the assignor-offload keys Kafka 4.3 keeps internal are not known here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

BrokerConfigGet = Callable[[str], Any]


class GroupConfigError(ValueError):
    """An invalid group config (Kafka's InvalidConfigurationException: INVALID_CONFIG)."""


@dataclass(frozen=True, slots=True)
class GroupConfigKey:
    name: str
    type: str  # Kafka's ConfigDef.Type name: INT, STRING or BOOLEAN
    default: Any
    broker_synonym: str | None  # the broker key this group key defaults to
    doc: str
    minimum: int | None = None
    choices: tuple[str, ...] | None = None


SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"

_SHARE_RESET_DOC = (
    "The strategy to initialize the share-partition start offset. <ul><li>earliest: automatically "
    "reset the offset to the earliest offset</li><li>latest: automatically reset the offset to the "
    "latest offset</li><li>by_duration:&lt;duration&gt;: automatically reset the offset to a configured "
    "duration from the current timestamp. &lt;duration&gt; must be specified in ISO8601 format "
    "(PnDTnHnMn.nS). Negative duration is not allowed.</li><li>anything else: throw exception to the "
    "share consumer.</li></ul>")


def _int(name, default, minimum, doc, synonym=True) -> GroupConfigKey:
    return GroupConfigKey(name, "INT", default, f"group.{name}" if synonym else None, doc, minimum=minimum)


# Kafka 4.3.1's GroupConfig.CONFIG_DEF, in its order (read from the jars).
GROUP_CONFIG_KEYS: dict[str, GroupConfigKey] = {k.name: k for k in [
    _int("consumer.session.timeout.ms", 45000, 1,
         "The timeout to detect client failures when using the consumer group protocol."),
    _int("consumer.heartbeat.interval.ms", 5000, 1,
         "The heartbeat interval given to the members of a consumer group."),
    _int("consumer.assignment.interval.ms", 1000, 0,
         "The interval between assignment updates for a consumer group."),
    _int("share.session.timeout.ms", 45000, 1,
         "The timeout to detect client failures when using the share group protocol."),
    _int("share.heartbeat.interval.ms", 5000, 1,
         "The heartbeat interval given to the members of a share group."),
    _int("share.record.lock.duration.ms", 30000, 1000,
         "The record acquisition lock duration in milliseconds for share groups."),
    _int("share.delivery.count.limit", 5, 2,
         "The maximum number of delivery attempts for a record delivered to a share group."),
    _int("share.partition.max.record.locks", 2000, 100, "Share-group record lock limit per share-partition."),
    GroupConfigKey(SHARE_AUTO_OFFSET_RESET, "STRING", "latest", None, _SHARE_RESET_DOC),
    GroupConfigKey("share.isolation.level", "STRING", "read_uncommitted", None,
                   "Controls how to read records written transactionally. If set to \"read_committed\", the "
                   "share group will only deliver transactional records which have been committed. If set to "
                   "\"read_uncommitted\", the share group will return all messages, even transactional messages "
                   "which have been aborted. Non-transactional records will be returned unconditionally in "
                   "either mode.", choices=("read_committed", "read_uncommitted")),
    GroupConfigKey("share.renew.acknowledge.enable", "BOOLEAN", True, None,
                   "Whether the renew acknowledge type is enabled for the share group."),
    _int("share.assignment.interval.ms", 1000, 0, "The interval between assignment updates for a share group."),
    _int("streams.session.timeout.ms", 45000, 1,
         "The timeout to detect client failures when using the streams group protocol."),
    _int("streams.heartbeat.interval.ms", 5000, 1, "The heartbeat interval given to the members."),
    _int("streams.num.standby.replicas", 0, 0, "The number of standby replicas for each task."),
    _int("streams.initial.rebalance.delay.ms", 3000, 0,
         "The amount of time the group coordinator will wait for more streams clients to join a new group "
         "before performing the first rebalance. A longer delay means potentially fewer rebalances."),
    _int("streams.assignment.interval.ms", 1000, 0, "The interval between assignment updates for a streams group."),
]}

# GroupConfig.validateValues: (key, lower bound broker key, upper bound broker key).
_BOUNDS = [
    ("consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
     "group.consumer.max.heartbeat.interval.ms"),
    ("consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    ("consumer.assignment.interval.ms", "group.consumer.min.assignment.interval.ms",
     "group.consumer.max.assignment.interval.ms"),
    ("share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    ("share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
     "group.share.max.record.lock.duration.ms"),
    ("share.delivery.count.limit", "group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
    ("share.partition.max.record.locks", "group.share.min.partition.max.record.locks",
     "group.share.max.partition.max.record.locks"),
    ("share.assignment.interval.ms", "group.share.min.assignment.interval.ms",
     "group.share.max.assignment.interval.ms"),
    ("streams.heartbeat.interval.ms", "group.streams.min.heartbeat.interval.ms",
     "group.streams.max.heartbeat.interval.ms"),
    ("streams.session.timeout.ms", "group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms"),
    ("streams.num.standby.replicas", None, "group.streams.max.standby.replicas"),
    ("streams.assignment.interval.ms", "group.streams.min.assignment.interval.ms",
     "group.streams.max.assignment.interval.ms"),
]
_SESSION_OVER_HEARTBEAT = ("consumer", "share", "streams")

_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:\.(\d{1,9}))?S)?)?", re.IGNORECASE)


def parse_share_auto_offset_reset(value: str) -> tuple[str, int | None]:
    """``earliest`` / ``latest`` (None), or ``by_duration`` with the duration in ms; ValueError
    for anything else (Kafka's ShareGroupAutoOffsetResetStrategy)."""
    lowered = value.strip().lower()
    if lowered in ("earliest", "latest"):
        return lowered, None
    if lowered.startswith("by_duration:"):
        ms = _iso_duration_ms(value.strip()[len("by_duration:"):])
        if ms is not None:
            return "by_duration", ms
    raise ValueError(f"Invalid value `{value}` for configuration {SHARE_AUTO_OFFSET_RESET}. The value must be "
                     "either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")


def _iso_duration_ms(text: str) -> int | None:
    """java.time.Duration.parse for non-negative PnDTnHnMn.nS; None when it does not parse."""
    m = _DURATION.fullmatch(text)
    if m is None or text.upper() in ("P", "PT") or text.upper().endswith("T"):
        return None
    days, hours, minutes, seconds, fraction = (g or "0" for g in m.groups())
    ms = ((int(days) * 24 + int(hours)) * 60 + int(minutes)) * 60_000 + int(seconds) * 1000
    return ms + int(fraction.ljust(9, "0")[:3])


def _parse(key: GroupConfigKey, raw: str) -> Any:
    """ConfigDef.parseType and the key's validator, with Kafka's messages."""
    value: Any = raw.strip()
    if key.type == "INT":
        try:
            value = int(value)
        except ValueError:
            raise ValueError("Not a number of type INT") from None
        if not -(1 << 31) <= value < (1 << 31):
            raise ValueError("Not a number of type INT")
        if key.minimum is not None and value < key.minimum:
            raise ValueError(f"Value must be at least {key.minimum}")
    elif key.type == "BOOLEAN":
        if value.lower() not in ("true", "false"):
            raise ValueError("Expected value to be either true or false")
        value = value.lower() == "true"
    elif key.choices is not None and value not in key.choices:
        raise ValueError(f"String must be one of: {', '.join(key.choices)}")
    elif key.name == SHARE_AUTO_OFFSET_RESET:
        parse_share_auto_offset_reset(value)
    return value


def _typed(key: GroupConfigKey, raw: Any) -> Any:
    return _parse(key, raw) if isinstance(raw, str) else raw


def broker_default(name: str, broker: BrokerConfigGet) -> Any:
    """The value ``name`` takes for a group without an override."""
    key = GROUP_CONFIG_KEYS[name]
    if key.broker_synonym is not None:
        value = broker(key.broker_synonym)
        if value is not None:
            return value
    return key.default


def validate(overrides: Mapping[str, str], broker: BrokerConfigGet) -> dict[str, str]:
    """The overrides normalised (values as given, trimmed); GroupConfigError as Kafka words it."""
    for name in overrides:
        if name not in GROUP_CONFIG_KEYS:
            raise GroupConfigError(f"Unknown group config name: {name}")
    values = {name: broker_default(name, broker) for name in GROUP_CONFIG_KEYS}
    for name, raw in overrides.items():
        try:
            values[name] = _parse(GROUP_CONFIG_KEYS[name], raw)
        except ValueError as exc:
            raise GroupConfigError(f"Invalid value {raw} for configuration {name}: {exc}") from None
    for name, lower, upper in _BOUNDS:
        value = values[name]
        if lower is not None and value < broker(lower):
            raise GroupConfigError(f"{name} must be greater than or equal to {lower}")
        if value > broker(upper):
            raise GroupConfigError(f"{name} must be less than or equal to {upper}")
    for kind in _SESSION_OVER_HEARTBEAT:
        if values[f"{kind}.session.timeout.ms"] <= values[f"{kind}.heartbeat.interval.ms"]:
            raise GroupConfigError(f"{kind}.session.timeout.ms must be greater than {kind}.heartbeat.interval.ms")
    return {name: raw.strip() for name, raw in overrides.items()}


def config_value(overrides: Mapping[str, str] | None, name: str, broker: BrokerConfigGet) -> Any:
    """The typed effective value of ``name`` for a group with ``overrides`` (None: no override)."""
    key = GROUP_CONFIG_KEYS[name]
    raw = (overrides or {}).get(name)
    if raw is not None:
        try:
            return _parse(key, raw)
        except ValueError:  # stored before a broker bound changed: the broker's value holds
            pass
    return _typed(key, broker_default(name, broker))


def as_string(value: Any) -> str:
    """A typed value as Kafka prints it in DescribeConfigs."""
    return str(value).lower() if isinstance(value, bool) else str(value)
