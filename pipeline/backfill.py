"""The backfill command: the same transformation as a Spark batch job over an offset range.

Owns resolving the range (``earliest``/``latest``, resolved read_committed, or Spark's JSON form
``{"topic": {"0": 10, ...}}``), pinning it in ``<checkpoint>/backfill.json`` so that a rerun after a
crash reads the same records, and writing all windows of the range (complete or not) plus the
dead letters through the exactly-once sink as batch 0 of a run whose id is derived from the range:
a rerun is a no-op. Known limits: the range is read in one Spark job (memory bound by the range);
windows cut by the range's ends are partial.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import structlog
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

from pipeline.batches import BatchWriter
from pipeline.config import PipelineConfig
from pipeline.errors import PipelineError
from pipeline.preflight import admin_client, cluster_metadata
from pipeline.sink import SinkSpec
from pipeline.transform import batch_aggregates, classify, dead_letters, load_products

log = structlog.get_logger("pipeline")

OffsetRange = dict[str, dict[str, int]]


def _bounds(cfg: PipelineConfig, partitions: list[int]) -> dict[int, tuple[int, int]]:
    """(low, last stable offset) per partition, as a read_committed consumer sees them."""
    consumer = Consumer({"bootstrap.servers": cfg.bootstrap_servers, "group.id": "pipeline-backfill",
                         "isolation.level": "read_committed", "enable.auto.commit": False, "log_level": 0})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(cfg.input_topic, p), timeout=10, cached=False)
                for p in partitions}
    finally:
        consumer.close()


def _resolve(spec: str, cfg: PipelineConfig, bounds: dict[int, tuple[int, int]], end: bool) -> dict[str, int]:
    if spec in ("earliest", "latest"):
        index = 1 if spec == "latest" else 0
        return {str(p): int(b[index]) for p, b in sorted(bounds.items())}
    try:
        given = json.loads(spec)[cfg.input_topic]
    except (ValueError, KeyError, TypeError):
        raise PipelineError(f"offsets must be earliest, latest or {{\"{cfg.input_topic}\": "
                            f"{{\"0\": 42, ...}}}}, not {spec!r}") from None
    return {str(p): int(given.get(str(p), bounds[p][1] if end else bounds[p][0])) for p in sorted(bounds)}


def resolve_range(cfg: PipelineConfig) -> OffsetRange:
    """The offset range of this backfill: pinned in the checkpoint on the first run."""
    pinned = Path(cfg.checkpoint) / "backfill.json"
    if pinned.exists():
        return json.loads(pinned.read_text())
    meta = cluster_metadata(admin_client(cfg.bootstrap_servers), cfg.bootstrap_servers)
    bounds = _bounds(cfg, sorted(meta.topics[cfg.input_topic].partitions))
    rng = {"start": _resolve(cfg.starting_offsets, cfg, bounds, end=False),
           "end": _resolve(cfg.ending_offsets, cfg, bounds, end=True)}
    pinned.write_text(json.dumps(rng, sort_keys=True))
    return rng


def run_id_of(cfg: PipelineConfig, rng: OffsetRange) -> str:
    ident = json.dumps({"topic": cfg.input_topic, "range": rng, "window": cfg.window}, sort_keys=True)
    return "backfill-" + hashlib.sha256(ident.encode()).hexdigest()[:16]


def run_backfill(spark: SparkSession, cfg: PipelineConfig, aggregates: SinkSpec, dead: SinkSpec) -> dict:
    """Read the range, write aggregates and dead letters once; the summary line's fields."""
    start = time.perf_counter()
    rng = resolve_range(cfg)
    run_id = run_id_of(cfg, rng)
    raw = (spark.read.format("kafka")
           .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
           .option("subscribe", cfg.input_topic)
           .option("kafka.isolation.level", "read_committed")
           .option("startingOffsets", json.dumps({cfg.input_topic: rng["start"]}))
           .option("endingOffsets", json.dumps({cfg.input_topic: rng["end"]}))
           .load()).cache()
    classified = classify(raw, load_products(spark, cfg.products_csv))
    records_in = raw.count()
    out = BatchWriter(aggregates, run_id=run_id).write(batch_aggregates(classified, cfg.window), 0)
    dlq = BatchWriter(dead, run_id=run_id).write(dead_letters(classified), 0)
    raw.unpersist()
    summary = {"run": run_id, "records_in": records_in, "records_out": out["written"],
               "dead_lettered": dlq["written"], "replayed_skipped": out["skipped"] + dlq["skipped"],
               "latency_ms": int((time.perf_counter() - start) * 1000)}
    log.info("backfill", **summary)
    return summary
