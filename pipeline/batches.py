"""The driver side of the sink: one call per micro-batch, fanned out to one task per partition.

Owns routing rows to output partitions (a Spark hash of the routing column, so that a replayed
batch routes every row the same way; the shuffle stays in the JVM), the one-time fencing of the run's transactional ids, the
per-batch statistics the progress lines print, and the run id (the Spark query id kept in the
checkpoint's ``metadata`` file). Known limit: the statistics live in driver memory only.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.sink import SinkSpec, crash_hook, fence, partition_writer


def query_id_of(checkpoint: str) -> str:
    """The id Spark keeps in ``<checkpoint>/metadata`` (stable across restarts of the query)."""
    return str(json.loads(Path(checkpoint, "metadata").read_text())["id"])


class BatchWriter:
    """``foreachBatch`` target: writes a batch exactly once and records what it did."""

    def __init__(self, spec: SinkSpec, checkpoint: str | None = None, run_id: str | None = None) -> None:
        self.spec = spec
        self.checkpoint = checkpoint
        self._run_id = run_id
        self._fenced = False
        self._lock = threading.Lock()
        self.stats: dict[int, dict] = {}

    def run_id(self) -> str:
        if self._run_id is None:
            assert self.checkpoint is not None
            self._run_id = query_id_of(self.checkpoint)
        return self._run_id

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self._lock:
            self.write(df, batch_id)

    def write(self, df: DataFrame, batch_id: int) -> dict:
        start = time.perf_counter()
        run_id = self.run_id()
        if not self._fenced:
            fence(self.spec, run_id)
            self._fenced = True
        n = self.spec.partitions
        # repartition(n, route) places a row in partition pmod(murmur3(route, 42), n), which is
        # F.hash: Spark partition index == output partition (checked row by row in the task)
        routed = (df.select(F.pmod(F.hash("route"), F.lit(n)).alias("p"), "route", "out_key", "out_value")
                  .repartition(n, "route").select("p", "out_key", "out_value"))
        parts = routed.rdd.mapPartitionsWithIndex(partition_writer(self.spec, run_id, batch_id)).collect()
        stats = {
            "written": sum(p["written"] for p in parts),
            "skipped": sum(p["skipped"] for p in parts),
            "transactions": sum(1 for p in parts if p["written"]),
            "broker_seconds": round(sum(p["broker_seconds"] for p in parts), 4),
            "sink_seconds": round(time.perf_counter() - start, 4),
        }
        self.stats[batch_id] = stats
        crash_hook(self.spec.name, batch_id, stats["written"])
        return stats
