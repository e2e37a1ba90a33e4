"""The Spark session of the job: local master, the four connector jars, quiet driver logs.

Owns locating the cached connector jars (``pipeline/fetch_jars.sh`` resolves them once from
Maven Central) and the session settings that must be fixed before the JVM starts. Known limits:
one session per Python process (Spark's rule); ``spark.sql.shuffle.partitions`` is read from the
checkpoint after the first run, so the value set here only applies to new checkpoints.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from pipeline.config import PACKAGE_DIR, PipelineConfig
from pipeline.errors import PipelineError

SPARK_VERSION = "4.2.0"
CONNECTOR_JARS = ("spark-sql-kafka-0-10_2.13-", "spark-token-provider-kafka-0-10_2.13-",
                  "kafka-clients-", "commons-pool2-")


def jars_dir() -> Path:
    default = Path.home() / ".cache" / "kbroker" / f"spark-kafka-{SPARK_VERSION}"
    return Path(os.environ.get("PIPELINE_JARS", str(default)))


def connector_jars() -> list[str]:
    """The four connector jars, or a PipelineError saying how to fetch them."""
    found = []
    directory = jars_dir()
    for prefix in CONNECTOR_JARS:
        matches = sorted(directory.glob(f"{prefix}[0-9]*.jar"))
        if not matches:
            raise PipelineError(f"Spark's Kafka connector jars are missing from {directory}: "
                                "run `make pipeline-setup` (or pipeline/fetch_jars.sh) once")
        found.append(str(matches[-1]))
    return found


def check_runtime() -> None:
    """Java and pyspark are there, or one line saying what to install."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise PipelineError("Java 17 is needed by Spark and was not found (apt-get install openjdk-17-jre-headless)")
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise PipelineError("pyspark is not installed: pip install -e '.[pipeline]'") from exc


def build_session(cfg: PipelineConfig, verbose: bool = False):
    """A local SparkSession with the connector on the classpath and no network needed at run time."""
    jars = connector_jars()
    check_runtime()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(cfg.master).appName(cfg.app_name)
        .config("spark.jars", ",".join(jars))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", str(cfg.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.metricsEnabled", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if not verbose:
        log4j = PACKAGE_DIR / "log4j2.properties"
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
    for key, value in cfg.spark_conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
