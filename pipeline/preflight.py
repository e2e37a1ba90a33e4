"""Checks run before Spark starts, so that bad configuration ends with one clear line.

Owns: broker reachability and topic existence (AdminClient), creation of the output, dead-letter
and progress topics when missing, the checkpoint directory's writability, and the ``SinkSpec`` of
each output (its partition count as found on the broker). Known limits: the checks are a snapshot;
a broker or topic that disappears later surfaces as a translated Spark error instead.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

from pipeline.config import AGGREGATES, DEAD_LETTERS, PipelineConfig
from pipeline.errors import PipelineError
from pipeline.sink import SinkSpec

PROGRESS_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.1",
    "segment.ms": "600000",
}


def admin_client(bootstrap: str) -> AdminClient:
    # log_level 0: librdkafka's own connection errors would be a second, noisier message
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0,
                        "socket.connection.setup.timeout.ms": 5000})


def check_checkpoint(path: str) -> None:
    """The checkpoint directory exists (created if needed) and a file can be written in it."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise PipelineError(f"checkpoint directory {path} is not writable: {exc.strerror or exc}") from None


def cluster_metadata(admin: AdminClient, bootstrap: str, timeout: float = 10.0) -> ClusterMetadata:
    try:
        return admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise PipelineError(f"cannot reach the broker at {bootstrap} within {timeout:.0f}s "
                            f"({exc.args[0].str() if exc.args else exc})") from None


def require_topic(meta: ClusterMetadata, topic: str, bootstrap: str) -> int:
    """The partition count of an existing topic, or a PipelineError naming it."""
    info = meta.topics.get(topic)
    if info is None or info.error is not None:
        raise PipelineError(f"input topic '{topic}' does not exist on {bootstrap}")
    return len(info.partitions)


def ensure_topic(admin: AdminClient, meta: ClusterMetadata, topic: str, partitions: int,
                 config: dict[str, str] | None = None, replication_factor: int = -1) -> int:
    """Create ``topic`` when missing (``replication_factor`` -1: the broker's
    ``default.replication.factor``); its partition count."""
    info = meta.topics.get(topic)
    if info is not None and info.error is None:
        return len(info.partitions)
    new = NewTopic(topic, partitions, replication_factor, config=config or {})
    futures = admin.create_topics([new], operation_timeout=10)
    try:
        futures[topic].result(timeout=15)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise PipelineError(f"cannot create topic '{topic}': {exc}") from None
    return partitions


def prepare(cfg: PipelineConfig) -> tuple[SinkSpec, SinkSpec]:
    """Run every check; the sink specs of the aggregates and dead-letter outputs."""
    check_checkpoint(cfg.checkpoint)
    admin = admin_client(cfg.bootstrap_servers)
    meta = cluster_metadata(admin, cfg.bootstrap_servers)
    require_topic(meta, cfg.input_topic, cfg.bootstrap_servers)
    rf = cfg.replication_factor
    n_out = ensure_topic(admin, meta, cfg.output_topic, cfg.output_partitions, replication_factor=rf)
    n_dlq = ensure_topic(admin, meta, cfg.dead_letter_topic, cfg.output_partitions, replication_factor=rf)
    n_progress = ensure_topic(admin, meta, cfg.progress_topic, n_out + n_dlq, PROGRESS_TOPIC_CONFIG,
                              replication_factor=rf)
    if n_progress < n_out + n_dlq:
        raise PipelineError(f"progress topic '{cfg.progress_topic}' has {n_progress} partitions, "
                            f"needs {n_out + n_dlq} (one per output partition)")
    common = {"bootstrap": cfg.bootstrap_servers, "app_name": cfg.app_name,
              "progress_topic": cfg.progress_topic, "transaction_timeout_ms": cfg.transaction_timeout_ms}
    aggregates = SinkSpec(name=AGGREGATES, topic=cfg.output_topic, partitions=n_out, progress_base=0, **common)
    dead = SinkSpec(name=DEAD_LETTERS, topic=cfg.dead_letter_topic, partitions=n_dlq,
                    progress_base=n_out, **common)
    return aggregates, dead
