"""The job's settings, shared by the stream and backfill commands.

Owns: ``PipelineConfig`` (topics, windows, Spark knobs) and the derived names (checkpoint
sub-directories, transactional-id prefixes). Known limit: ``shuffle_partitions`` is pinned by
the checkpoint at the first run; changing it later is refused by Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PRODUCTS_CSV = PACKAGE_DIR / "data" / "products.csv"

# The two streaming queries of the job and their checkpoint sub-directories.
AGGREGATES = "aggregates"
DEAD_LETTERS = "dead-letters"


@dataclass
class PipelineConfig:
    bootstrap_servers: str
    checkpoint: str
    input_topic: str = "orders"
    output_topic: str = "orders-per-category"
    dead_letter_topic: str = "orders-dead-letters"
    progress_topic: str = "orders-pipeline-progress"
    app_name: str = "orders-pipeline"
    window: str = "5 minutes"
    watermark: str = "10 minutes"
    shuffle_partitions: int = 3
    output_partitions: int = 3
    replication_factor: int = -1  # of the topics the job creates; -1: the broker's default
    max_offsets_per_trigger: int | None = 5000
    trigger_seconds: float = 0.0
    idle_timeout: float | None = None
    starting_offsets: str = "earliest"
    ending_offsets: str = "latest"
    transaction_timeout_ms: int = 30000
    products_csv: str = str(PRODUCTS_CSV)
    master: str = "local[2]"
    spark_conf: dict[str, str] = field(default_factory=dict)

    def checkpoint_of(self, query: str) -> str:
        return str(Path(self.checkpoint) / query)

    @property
    def progress_partitions(self) -> int:
        """One progress partition per (sink, output partition): aggregates first, then dead letters."""
        return 2 * self.output_partitions
