"""The streaming command: two Structured Streaming queries over one input topic.

Owns the queries (``aggregates``: windowed counts in append mode; ``dead-letters``: invalid
events with their reason), each with its own checkpoint sub-directory and exactly-once sink, and
the driver loop that prints one progress line per micro-batch and stops on ``--idle-timeout``
(that long without input, output or a running batch).
Known limits: both queries read the input (two fetches of each record); a record later than the
watermark is dropped silently by Spark; the idle stop is time-based (no input and no output for
that long), fit for demos, tests and benchmarks, not for production.
"""

from __future__ import annotations

import time

import structlog
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from pipeline.batches import BatchWriter
from pipeline.config import AGGREGATES, DEAD_LETTERS, PipelineConfig
from pipeline.sink import SinkSpec
from pipeline.transform import classify, dead_letters, load_products, windowed_aggregates

log = structlog.get_logger("pipeline")

# MicroBatchExecution's status messages while a batch runs (not while it polls for offsets)
RUNNING = ("Processing new data", "No new data but cleaning up state")


def kafka_stream(spark: SparkSession, cfg: PipelineConfig) -> DataFrame:
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
        .option("subscribe", cfg.input_topic)
        .option("kafka.isolation.level", "read_committed")
        .option("startingOffsets", cfg.starting_offsets)
        .option("failOnDataLoss", "true")
        .option("kafka.fetch.max.wait.ms", "100")
    )
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    return reader.load()


def _start(df: DataFrame, name: str, mode: str, writer: BatchWriter, cfg: PipelineConfig) -> StreamingQuery:
    stream = (df.writeStream.queryName(name).outputMode(mode).foreachBatch(writer)
              .option("checkpointLocation", cfg.checkpoint_of(name)))
    if cfg.trigger_seconds > 0:
        stream = stream.trigger(processingTime=f"{cfg.trigger_seconds} seconds")
    return stream.start()


class StreamJob:
    """Starts the two queries, reports their batches, stops them when idle."""

    def __init__(self, spark: SparkSession, cfg: PipelineConfig, aggregates: SinkSpec, dead: SinkSpec) -> None:
        self.spark = spark
        self.cfg = cfg
        self.writers = {
            AGGREGATES: BatchWriter(aggregates, cfg.checkpoint_of(AGGREGATES)),
            DEAD_LETTERS: BatchWriter(dead, cfg.checkpoint_of(DEAD_LETTERS)),
        }
        self.queries: dict[str, StreamingQuery] = {}
        self._reported: dict[str, int] = {AGGREGATES: -1, DEAD_LETTERS: -1}
        self._last_activity = time.monotonic()

    def start(self) -> None:
        classified = classify(kafka_stream(self.spark, self.cfg), load_products(self.spark, self.cfg.products_csv))
        agg = windowed_aggregates(classified, self.cfg.window, self.cfg.watermark)
        self.queries[AGGREGATES] = _start(agg, AGGREGATES, "append", self.writers[AGGREGATES], self.cfg)
        self.queries[DEAD_LETTERS] = _start(dead_letters(classified), DEAD_LETTERS, "append",
                                            self.writers[DEAD_LETTERS], self.cfg)
        log.info("started", queries=sorted(self.queries), input=self.cfg.input_topic,
                 output=self.cfg.output_topic, dead_letters=self.cfg.dead_letter_topic,
                 checkpoint=self.cfg.checkpoint)

    def report(self) -> None:
        """One progress line per micro-batch not reported yet."""
        for name, query in self.queries.items():
            for progress in query.recentProgress:
                batch = int(progress["batchId"])
                if batch <= self._reported[name]:
                    continue
                self._reported[name] = batch
                self._report_batch(name, batch, progress)

    def _report_batch(self, name: str, batch: int, progress) -> None:
        stats = self.writers[name].stats.get(batch, {})
        records_in = int(progress["numInputRows"])
        written = stats.get("written", 0)
        if records_in or written:
            self._last_activity = time.monotonic()
        event_time = progress["eventTime"] if "eventTime" in progress else {}
        log.info("batch", query=name, batch=batch, records_in=records_in,
                 records_out=written if name == AGGREGATES else 0,
                 dead_lettered=written if name == DEAD_LETTERS else 0,
                 replayed_skipped=stats.get("skipped", 0),
                 latency_ms=int(progress["durationMs"].get("triggerExecution", 0)),
                 sink_ms=int(stats.get("sink_seconds", 0) * 1000),
                 broker_ms=int(stats.get("broker_seconds", 0) * 1000),
                 watermark=(event_time or {}).get("watermark"))

    def run(self, poll: float = 0.5) -> None:
        """Block until a query fails (raised), is stopped, or the job was idle long enough."""
        idle = self.cfg.idle_timeout
        while True:
            for query in self.queries.values():
                if query.awaitTermination(poll / len(self.queries)):
                    self.report()
                    self._raise_if_failed(query)
                    return
            self.report()
            if self._running_batch():
                self._last_activity = time.monotonic()
            seen_all = all(b >= 0 for b in self._reported.values())
            if idle is not None and seen_all and time.monotonic() - self._last_activity > idle:
                log.info("idle", seconds=idle)
                return

    def _running_batch(self) -> bool:
        """A query is running a batch (with data, or a no-data batch that closes windows)."""
        return any(str(q.status.get("message", "")).startswith(RUNNING) for q in self.queries.values())

    @staticmethod
    def _raise_if_failed(query: StreamingQuery) -> None:
        exc = query.exception()
        if exc is not None:
            raise exc

    def stop(self) -> None:
        for query in self.queries.values():
            try:
                query.stop()
            except Exception as exc:  # already failed or JVM gone; the cause was reported
                log.debug("stop failed", error=str(exc))
