"""Topic-level configuration: Kafka's topic config names, their broker-level defaults, and
the mapping onto :class:`storage.log.LogConfig`.

Used by CreateTopics (validation), DescribeConfigs (values with their source) and
IncrementalAlterConfigs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storage.log import LogConfig

from .config import BrokerConfig, ConfigError


@dataclass(frozen=True)
class TopicKey:
    name: str
    broker_key: str | None
    parse: Callable[[str], Any]
    check: Callable[[Any], bool] = lambda v: True
    requirement: str = ""
    sensitive: bool = False


def _policy(v: str) -> str:
    parts = [p.strip() for p in v.split(",") if p.strip()]
    if not parts or not set(parts) <= {"delete", "compact"}:
        raise ValueError("must be a list of delete, compact")
    return ",".join(parts)


def _bool(v: str) -> str:
    if v.lower() not in ("true", "false"):
        raise ValueError("must be true or false")
    return v.lower()


def _ts_type(v: str) -> str:
    if v not in ("CreateTime", "LogAppendTime"):
        raise ValueError("must be CreateTime or LogAppendTime")
    return v


def _nonneg(v):
    return v >= 0


def _retention(v):
    return v >= -1


TOPIC_KEYS: dict[str, TopicKey] = {k.name: k for k in [
    TopicKey("cleanup.policy", "log.cleanup.policy", _policy),
    TopicKey("compression.type", None, str),
    TopicKey("delete.retention.ms", "log.cleaner.delete.retention.ms", int, _nonneg, ">= 0"),
    TopicKey("file.delete.delay.ms", None, int, _nonneg, ">= 0"),
    TopicKey("flush.messages", "log.flush.interval.messages", int, lambda v: v >= 1, ">= 1"),
    TopicKey("flush.ms", "log.flush.interval.ms", int, _nonneg, ">= 0"),
    TopicKey("index.interval.bytes", "log.index.interval.bytes", int, _nonneg, ">= 0"),
    TopicKey("max.message.bytes", "message.max.bytes", int, _nonneg, ">= 0"),
    TopicKey("message.timestamp.type", "log.message.timestamp.type", _ts_type),
    TopicKey("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", float,
             lambda v: 0 <= v <= 1, "in [0, 1]"),
    TopicKey("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", int, _nonneg, ">= 0"),
    TopicKey("min.insync.replicas", "min.insync.replicas", int, lambda v: v >= 1, ">= 1"),
    TopicKey("retention.bytes", "log.retention.bytes", int, _retention, ">= -1"),
    TopicKey("retention.ms", None, int, _retention, ">= -1"),
    TopicKey("segment.bytes", "log.segment.bytes", int, lambda v: v >= 14, ">= 14"),
    TopicKey("segment.ms", None, int, lambda v: v >= 1, ">= 1"),
    TopicKey("segment.index.bytes", "log.index.size.max.bytes", int, lambda v: v >= 4, ">= 4"),
    TopicKey("unclean.leader.election.enable", "unclean.leader.election.enable", _bool),
    TopicKey("message.downconversion.enable", None, _bool),
]}

_FIXED_DEFAULTS = {"compression.type": "producer", "file.delete.delay.ms": "60000",
                   "message.downconversion.enable": "true"}


def broker_default(key: str, config: BrokerConfig) -> str:
    if key == "retention.ms":
        return str(config.retention_ms)
    if key == "segment.ms":
        return str(config.roll_ms)
    if key == "flush.ms":
        return str(config.flush_interval_ms)
    tk = TOPIC_KEYS[key]
    if tk.broker_key is None:
        return _FIXED_DEFAULTS[key]
    value = config[tk.broker_key]
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def validate_topic_config(name: str, value: str | None) -> str | None:
    """Return the normalised value; raise ConfigError naming the key."""
    tk = TOPIC_KEYS.get(name)
    if tk is None:
        raise ConfigError(f"Unknown topic config name: {name}")
    if value is None:
        return None
    try:
        parsed = tk.parse(value)
    except ValueError as exc:
        raise ConfigError(f"Invalid value {value} for configuration {name}: {exc}") from None
    if not tk.check(parsed):
        raise ConfigError(f"Invalid value {value} for configuration {name}: must be {tk.requirement}")
    return str(parsed)


def effective(overrides: dict[str, str], config: BrokerConfig) -> dict[str, tuple[str, bool]]:
    """Every topic config: (value, is_override)."""
    out = {}
    for key in TOPIC_KEYS:
        if key in overrides:
            out[key] = (overrides[key], True)
        else:
            out[key] = (broker_default(key, config), False)
    return out


def log_config(overrides: dict[str, str], config: BrokerConfig, internal: str | None = None) -> LogConfig:
    values = {k: v for k, (v, _) in effective(overrides, config).items()}
    segment_bytes = int(values["segment.bytes"])
    if internal == "__consumer_offsets" and "segment.bytes" not in overrides:
        segment_bytes = config["offsets.topic.segment.bytes"]
    if internal == "__transaction_state" and "segment.bytes" not in overrides:
        segment_bytes = config["transaction.state.log.segment.bytes"]
    return LogConfig(
        segment_bytes=segment_bytes,
        segment_ms=int(values["segment.ms"]),
        retention_ms=int(values["retention.ms"]),
        retention_bytes=int(values["retention.bytes"]),
        index_interval_bytes=int(values["index.interval.bytes"]),
        max_message_bytes=int(values["max.message.bytes"]),
        message_timestamp_type=values["message.timestamp.type"],
        cleanup_policy=values["cleanup.policy"],
        flush_interval_messages=int(values["flush.messages"]),
        flush_interval_ms=int(values["flush.ms"]),
        delete_retention_ms=int(values["delete.retention.ms"]),
        min_cleanable_dirty_ratio=float(values["min.cleanable.dirty.ratio"]),
        min_compaction_lag_ms=int(values["min.compaction.lag.ms"]),
        producer_id_expiration_ms=config["producer.id.expiration.ms"],
    )
