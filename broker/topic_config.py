"""Topic-level configuration: every topic config Kafka 4.3.1 knows, with Kafka's types,
defaults, validators, broker-level synonyms and documentation, and the mapping onto
:class:`storage.log.LogConfig`.

Used by CreateTopics (validation), DescribeConfigs (values with their source and type) and
(Incremental)AlterConfigs. Values are parsed and checked as Kafka's ``ConfigDef`` does, with
its wording ("Not a number of type LONG", "Value must be at least 1").

Differs from Kafka: the remote-storage, preallocation, compression-level, throttled-replica and
segment-jitter configs are accepted, validated and described but have no effect (there is no
tiered storage, preallocation, replication throttling or per-topic recompression);
``remote.storage.enable=true`` is refused as Kafka refuses it when tiered storage is disabled.
``message.downconversion.enable`` is gone, as in Kafka 4.0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from storage.log import LogConfig

from .config import LONG_MAX, BrokerConfig, ConfigError

INT_MAX, INT_MIN = (1 << 31) - 1, -(1 << 31)
Check = Callable[[object], str | None]  # the parsed value -> Kafka's complaint, or None


class Whole(str):
    """A complaint Kafka words as the whole message, without "Invalid value ... for ...: "."""


def at_least(n) -> Check:
    return lambda v: None if v >= n else f"Value must be at least {n}"


def between(lo, hi) -> Check:
    return lambda v: (f"Value must be at least {lo}" if v < lo
                      else f"Value must be no more than {hi}" if v > hi else None)


def one_of(*allowed: str) -> Check:
    return lambda v: None if v in allowed else f"String must be one of: {', '.join(allowed)}"


def each_of(name: str, *allowed: str) -> Check:
    """Kafka's ValidList.in: names the first element not allowed."""
    def check(values):
        bad = [v for v in values if v not in allowed]
        return Whole(f"Invalid value {bad[0]} for configuration {name}: String must be one of: "
                     f"{', '.join(allowed)}") if bad else None
    return check


def _gzip_level(v) -> str | None:
    return None if v == -1 or 1 <= v <= 9 else "Value must be in [1,...,9] or -1"


def _throttled_replicas(name: str) -> Check:
    """Kafka's ThrottledReplicaListValidator: ``*`` or partition:broker pairs."""
    def check(values):
        if values == ["*"] or all(_is_replica(v) for v in values):
            return None
        return Whole(f"Invalid value [{', '.join(values)}] for configuration {name}: {name} must be "
                     "the literal '*' or a list of replicas in the following format: "
                     "[partitionId]:[brokerId],[partitionId]:[brokerId],...")
    return check


def _is_replica(v: str) -> bool:
    partition, sep, broker = v.partition(":")
    return bool(sep) and partition.strip().isdigit() and broker.strip().isdigit()


def _remote_storage(v) -> str | None:
    if v:
        return Whole("Tiered Storage functionality is disabled in the broker. "
                     "Topic cannot be configured with remote log storage.")
    return None


@dataclass(frozen=True)
class TopicKey:
    name: str
    type: str                 # Kafka's ConfigDef type: INT, LONG, DOUBLE, BOOLEAN, STRING, LIST
    default: str              # Kafka's default when no broker key backs it here
    synonym: str | None       # the broker-level key that supplies the default (ServerTopicConfigSynonyms)
    check: Check | None
    doc: str


_K = TopicKey
TOPIC_KEYS: dict[str, TopicKey] = {k.name: k for k in [
    _K("cleanup.policy", "LIST", "delete", "log.cleanup.policy",
       each_of("cleanup.policy", "compact", "delete"),
       "A list of 'delete' (discard old segments by time or size) and/or 'compact' (keep the "
       "latest value per key); empty keeps every segment."),
    _K("compression.gzip.level", "INT", "-1", "compression.gzip.level", _gzip_level,
       "Compression level for gzip when compression.type is gzip."),
    _K("compression.lz4.level", "INT", "9", "compression.lz4.level", between(1, 17),
       "Compression level for lz4 when compression.type is lz4."),
    _K("compression.type", "STRING", "producer", "compression.type",
       one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
       "Final compression of the topic's data; 'producer' keeps the producer's codec."),
    _K("compression.zstd.level", "INT", "3", "compression.zstd.level", between(-131072, 22),
       "Compression level for zstd when compression.type is zstd."),
    _K("delete.retention.ms", "LONG", "86400000", "log.cleaner.delete.retention.ms", at_least(0),
       "How long delete tombstones are kept on compacted topics."),
    _K("file.delete.delay.ms", "LONG", "60000", "log.segment.delete.delay.ms", at_least(0),
       "Time to wait before deleting a file from the filesystem."),
    _K("flush.messages", "LONG", str(LONG_MAX), "log.flush.interval.messages", at_least(1),
       "Force an fsync after this many messages are appended."),
    _K("flush.ms", "LONG", str(LONG_MAX), "log.flush.interval.ms", at_least(0),
       "Force an fsync once data is this old (ms)."),
    _K("follower.replication.throttled.replicas", "LIST", "", None,
       _throttled_replicas("follower.replication.throttled.replicas"),
       "Replicas whose log replication is throttled on the follower side."),
    _K("index.interval.bytes", "INT", "4096", "log.index.interval.bytes", at_least(0),
       "How often (in bytes) an offset index entry is added."),
    _K("leader.replication.throttled.replicas", "LIST", "", None,
       _throttled_replicas("leader.replication.throttled.replicas"),
       "Replicas whose log replication is throttled on the leader side."),
    _K("local.retention.bytes", "LONG", "-2", "log.local.retention.bytes", at_least(-2),
       "Local size limit before tiered segments are deleted; -2 uses retention.bytes."),
    _K("local.retention.ms", "LONG", "-2", "log.local.retention.ms", at_least(-2),
       "Local age limit before tiered segments are deleted; -2 uses retention.ms."),
    _K("max.compaction.lag.ms", "LONG", str(LONG_MAX), "log.cleaner.max.compaction.lag.ms",
       at_least(1), "Maximum time a record stays ineligible for compaction."),
    _K("max.message.bytes", "INT", "1048588", "message.max.bytes", at_least(0),
       "Largest record batch size allowed, after compression."),
    _K("message.timestamp.after.max.ms", "LONG", "3600000", "log.message.timestamp.after.max.ms",
       at_least(0), "How far ahead of the broker's clock a CreateTime timestamp may be."),
    _K("message.timestamp.before.max.ms", "LONG", str(LONG_MAX),
       "log.message.timestamp.before.max.ms", at_least(0),
       "How far behind the broker's clock a CreateTime timestamp may be."),
    _K("message.timestamp.type", "STRING", "CreateTime", "log.message.timestamp.type",
       one_of("CreateTime", "LogAppendTime"), "CreateTime or LogAppendTime."),
    _K("min.cleanable.dirty.ratio", "DOUBLE", "0.5", "log.cleaner.min.cleanable.ratio",
       between(0, 1), "Dirty/total ratio above which the log cleaner compacts the log."),
    _K("min.compaction.lag.ms", "LONG", "0", "log.cleaner.min.compaction.lag.ms", at_least(0),
       "Minimum time a record stays uncompacted."),
    _K("min.insync.replicas", "INT", "1", "min.insync.replicas", at_least(1),
       "Minimum in-sync replicas for an acks=all write to succeed."),
    _K("preallocate", "BOOLEAN", "false", "log.preallocate", None,
       "Whether segment files are preallocated."),
    _K("remote.log.copy.disable", "BOOLEAN", "false", None, None,
       "Stop copying segments to remote storage."),
    _K("remote.log.delete.on.disable", "BOOLEAN", "false", None, None,
       "Delete remote data when tiered storage is disabled on the topic."),
    _K("remote.storage.enable", "BOOLEAN", "false", None, _remote_storage,
       "Tiered storage for the topic (not available on this broker)."),
    _K("retention.bytes", "LONG", "-1", "log.retention.bytes", None,
       "Maximum partition size before old segments are deleted; -1 for no limit."),
    _K("retention.ms", "LONG", "604800000", "log.retention.ms", at_least(-1),
       "Maximum age of a segment before it is deleted; -1 for no limit."),
    _K("segment.bytes", "INT", "1073741824", "log.segment.bytes", at_least(1048576),
       "Size of a log segment file."),
    _K("segment.index.bytes", "INT", "10485760", "log.index.size.max.bytes", at_least(4),
       "Size of the offset index of a segment."),
    _K("segment.jitter.ms", "LONG", "0", "log.roll.jitter.ms", at_least(0),
       "Random jitter subtracted from segment.ms."),
    _K("segment.ms", "LONG", "604800000", "log.roll.ms", at_least(1),
       "Time after which a segment is rolled even if not full."),
    _K("unclean.leader.election.enable", "BOOLEAN", "false", "unclean.leader.election.enable",
       None, "Whether replicas outside the ISR may become leader."),
]}


def parse(name: str, ctype: str, raw: str):
    """Kafka's ConfigDef.parseType; ConfigError worded as Kafka words it."""
    value = raw.strip()
    try:
        if ctype in ("INT", "LONG", "SHORT"):
            parsed = int(value)
            bits = {"INT": 31, "LONG": 63, "SHORT": 15}[ctype]
            if not -(1 << bits) <= parsed < (1 << bits):
                raise ValueError
            return parsed
        if ctype == "DOUBLE":
            return float(value)
    except ValueError:
        raise ConfigError(f"Invalid value {raw} for configuration {name}: "
                          f"Not a number of type {ctype}") from None
    if ctype == "BOOLEAN":
        if value.lower() not in ("true", "false"):
            raise ConfigError(f"Invalid value {raw} for configuration {name}: "
                              "Expected value to be either true or false")
        return value.lower() == "true"
    if ctype == "LIST":
        return [v.strip() for v in value.split(",")] if value else []
    return value


def render(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def broker_default(key: str, config: BrokerConfig) -> str:
    """The topic config's value when the topic does not override it."""
    if key == "retention.ms":
        return str(config.retention_ms)
    if key == "segment.ms":
        return str(config.roll_ms)
    if key == "flush.ms":
        return str(config.flush_interval_ms)
    tk = TOPIC_KEYS[key]
    value = config.get(tk.synonym) if tk.synonym else None
    return tk.default if value is None else render(value)


def validate_topic_config(name: str, value: str | None) -> str | None:
    """Return the normalised value; raise ConfigError naming the key."""
    tk = TOPIC_KEYS.get(name)
    if tk is None:
        raise ConfigError(f"Unknown topic config name: {name}")
    if value is None:
        return None
    parsed = parse(name, tk.type, value)
    problem = tk.check(parsed) if tk.check else None
    if problem:
        raise ConfigError(problem if isinstance(problem, Whole)
                          else f"Invalid value {value} for configuration {name}: {problem}")
    return render(parsed)


def effective(overrides: dict[str, str], config: BrokerConfig) -> dict[str, tuple[str, bool]]:
    """Every topic config: (value, is_override)."""
    return {key: (overrides[key], True) if key in overrides else (broker_default(key, config), False)
            for key in TOPIC_KEYS}


def log_config(overrides: dict[str, str], config: BrokerConfig, internal: str | None = None) -> LogConfig:
    values = {k: v for k, (v, _) in effective(overrides, config).items()}
    segment_bytes = int(values["segment.bytes"])
    if internal == "__consumer_offsets" and "segment.bytes" not in overrides:
        segment_bytes = config["offsets.topic.segment.bytes"]
    if internal == "__transaction_state" and "segment.bytes" not in overrides:
        segment_bytes = config["transaction.state.log.segment.bytes"]
    policy = values["cleanup.policy"]
    max_lag = int(values["max.compaction.lag.ms"])
    segment_ms = int(values["segment.ms"])
    if "compact" in policy.split(","):
        # Kafka's LogConfig.maxSegmentMs: a compacted log rolls by max.compaction.lag.ms too,
        # so the active segment's records become cleanable in time.
        segment_ms = min(segment_ms, max_lag)
    return LogConfig(
        segment_bytes=segment_bytes,
        segment_ms=segment_ms,
        retention_ms=int(values["retention.ms"]),
        retention_bytes=int(values["retention.bytes"]),
        index_interval_bytes=int(values["index.interval.bytes"]),
        max_message_bytes=int(values["max.message.bytes"]),
        message_timestamp_type=values["message.timestamp.type"],
        message_timestamp_before_max_ms=int(values["message.timestamp.before.max.ms"]),
        message_timestamp_after_max_ms=int(values["message.timestamp.after.max.ms"]),
        cleanup_policy=policy,
        flush_interval_messages=int(values["flush.messages"]),
        flush_interval_ms=int(values["flush.ms"]),
        delete_retention_ms=int(values["delete.retention.ms"]),
        min_cleanable_dirty_ratio=float(values["min.cleanable.dirty.ratio"]),
        min_compaction_lag_ms=int(values["min.compaction.lag.ms"]),
        max_compaction_lag_ms=max_lag,
        producer_id_expiration_ms=config["producer.id.expiration.ms"],
    )
