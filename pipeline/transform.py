"""The transformation: JSON order events -> (valid, enriched) rows and dead letters with a reason.

Owns the event contract and its validation rules, the enrichment join with the product table
and the windowed aggregation. Event (one JSON object per Kafka record)::

    {"event_id": "e-1", "ts": 1767225600000, "user_id": "u-7", "sku": "SKU-003",
     "qty": 2, "price_cents": 1999}

``ts`` is the event time in epoch milliseconds (UTC). ``{"type": "end_of_input", "ts": ...}`` is a
control event: it only moves the watermark (so that the last windows close in append mode) and
never reaches the output. Reasons, the first that applies: ``not_json`` (not a JSON object),
``missing:<field>``, ``invalid:<field>`` (wrong type or out of range), ``unknown_sku``.

Known limits: fields are read through a string map then cast (``try_cast``), so a number given as
a JSON string (``"qty": "2"``) is accepted; events later than the watermark are dropped by Spark
(not dead-lettered: Spark does not expose them).
"""

from __future__ import annotations

import csv

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

REQUIRED: dict[str, str] = {
    "event_id": "string",
    "ts": "bigint",
    "user_id": "string",
    "sku": "string",
    "qty": "bigint",
    "price_cents": "bigint",
}
END_OF_INPUT = "end_of_input"
CONTROL_CATEGORY = "__control__"
MAX_QTY = 10_000
MAX_PRICE_CENTS = 100_000_000


def load_products(spark: SparkSession, path: str) -> DataFrame:
    """The dimension table (sku -> category, brand), small enough to broadcast."""
    with open(path, newline="") as f:
        rows = [(r["sku"], r["category"], r["brand"]) for r in csv.DictReader(f)]
    return spark.createDataFrame(rows, "sku string, category string, brand string")


def parse(raw: DataFrame) -> DataFrame:
    """Kafka rows -> one column per field (NULL when absent or of the wrong type) + raw text."""
    df = raw.select(
        F.col("topic").alias("src_topic"),
        F.col("partition").alias("src_partition"),
        F.col("offset").alias("src_offset"),
        F.col("value").cast("string").alias("raw"),
    ).withColumn("__fields", F.from_json("raw", "map<string,string>"))
    cols = [F.expr(f"try_cast(__fields['{n}'] as {t})").alias(n) for n, t in REQUIRED.items()]
    return df.select(
        "src_topic", "src_partition", "src_offset", "raw", "__fields",
        F.col("__fields")["type"].alias("type"), *cols,
    )


def _reason() -> Column:
    """The first rule an event breaks, or NULL when it is valid (control events are valid)."""
    fields = F.col("__fields")
    is_control = F.coalesce(F.col("type") == F.lit(END_OF_INPUT), F.lit(False))
    checks: list[tuple[Column, Column]] = [(fields.isNull(), F.lit("not_json"))]
    for name in REQUIRED:
        present = fields[name].isNotNull()
        required = F.lit(True) if name == "ts" else ~is_control  # control events need only ts
        checks.append((~present & required, F.lit(f"missing:{name}")))
        checks.append((present & F.col(name).isNull(), F.lit(f"invalid:{name}")))
    checks += [
        (~is_control & ((F.col("qty") < 1) | (F.col("qty") > MAX_QTY)), F.lit("invalid:qty")),
        (~is_control & ((F.col("price_cents") < 0) | (F.col("price_cents") > MAX_PRICE_CENTS)),
         F.lit("invalid:price_cents")),
        (~is_control & F.col("category").isNull(), F.lit("unknown_sku")),
    ]
    expr = None
    for cond, reason in checks:
        expr = F.when(cond, reason) if expr is None else expr.when(cond, reason)
    return expr


def classify(raw: DataFrame, products: DataFrame) -> DataFrame:
    """Parsed, enriched events with a ``reason`` column (NULL for valid and control events)."""
    parsed = parse(raw)
    enriched = parsed.join(F.broadcast(products), on="sku", how="left")
    return enriched.withColumn("reason", _reason())


def dead_letters(classified: DataFrame) -> DataFrame:
    """Invalid events as (out_key, out_value) rows, keyed by their source position."""
    bad = classified.where(F.col("reason").isNotNull())
    value = F.to_json(F.struct(
        F.col("reason"), F.col("raw"), F.col("src_topic").alias("topic"),
        F.col("src_partition").alias("partition"), F.col("src_offset").alias("offset"),
    ))
    key = F.concat_ws(":", "src_topic", "src_partition", "src_offset")
    return bad.select(key.alias("out_key"), value.alias("out_value"), F.col("src_partition").alias("route"))


def _valid_events(classified: DataFrame) -> DataFrame:
    """Valid and control events with an event-time column; control rows get their own category."""
    ok = classified.where(F.col("reason").isNull())
    return ok.select(
        F.timestamp_millis(F.col("ts")).alias("event_time"),
        F.coalesce(F.col("category"), F.lit(CONTROL_CATEGORY)).alias("category"),
        F.when(F.col("category").isNull(), F.lit(0)).otherwise(F.lit(1)).alias("is_event"),
        F.coalesce(F.col("qty"), F.lit(0)).alias("qty"),
        F.coalesce(F.col("qty") * F.col("price_cents"), F.lit(0)).alias("revenue_cents"),
    )


def _aggregate(events: DataFrame, window: str) -> DataFrame:
    grouped = events.groupBy(F.window("event_time", window).alias("w"), "category")
    return grouped.agg(
        F.sum("is_event").alias("events"),
        F.sum("qty").alias("units"),
        F.sum("revenue_cents").alias("revenue_cents"),
    )


def _as_records(agg: DataFrame) -> DataFrame:
    """Aggregates as (out_key, out_value, route) rows; control windows are dropped here.

    The filter is on an aggregated column on purpose: a filter on ``category`` would be pushed
    below the aggregation and the watermark, and control events would no longer move it.
    """
    rows = agg.where(F.col("events") > 0)
    value = F.to_json(F.struct(
        F.col("category"),
        F.unix_millis(F.col("w.start")).alias("window_start"),
        F.unix_millis(F.col("w.end")).alias("window_end"),
        F.col("events"), F.col("units"), F.col("revenue_cents"),
    ))
    return rows.select(F.col("category").alias("out_key"), value.alias("out_value"),
                       F.col("category").alias("route"))


def windowed_aggregates(classified: DataFrame, window: str, watermark: str) -> DataFrame:
    """Streaming: per category and event-time window, emitted once the watermark passes the window."""
    events = _valid_events(classified).withWatermark("event_time", watermark)
    return _as_records(_aggregate(events, window))


def batch_aggregates(classified: DataFrame, window: str) -> DataFrame:
    """Batch (backfill): every window of the range, complete or not."""
    return _as_records(_aggregate(_valid_events(classified), window))
