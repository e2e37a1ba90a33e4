"""The command line: ``python -m pipeline stream|backfill --bootstrap-servers ... --checkpoint DIR``.

Owns argument parsing, structlog set-up (progress lines on stdout, ``--log-format json`` for
machines) and the error boundary: every known failure ends with one ``pipeline: error: ...`` line
on stderr and exit status 2, never a JVM stack trace. Known limit: Spark's own start-up warnings
(if any) still go to stderr before that line.
"""

from __future__ import annotations

import argparse
import logging
import sys

import structlog

from pipeline.config import PipelineConfig
from pipeline.errors import translate

log = structlog.get_logger("pipeline")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["stream", "backfill"])
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--checkpoint", required=True, help="checkpoint directory (one per job)")
    ap.add_argument("--input-topic", default="orders")
    ap.add_argument("--output-topic", default="orders-per-category")
    ap.add_argument("--dead-letter-topic", default="orders-dead-letters")
    ap.add_argument("--progress-topic", default="orders-pipeline-progress")
    ap.add_argument("--app-name", default="orders-pipeline", help="prefix of the transactional ids")
    ap.add_argument("--window", default="5 minutes")
    ap.add_argument("--watermark", default="10 minutes")
    ap.add_argument("--shuffle-partitions", type=int, default=3, help="pinned by the checkpoint's first run")
    ap.add_argument("--output-partitions", type=int, default=3, help="for topics the job creates")
    ap.add_argument("--replication-factor", type=int, default=-1,
                    help="for topics the job creates; -1: the broker's default.replication.factor")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=5000)
    ap.add_argument("--trigger-seconds", type=float, default=0.0, help="0: next batch as soon as possible")
    ap.add_argument("--idle-timeout", type=float, default=None,
                    help="stream: stop after this many seconds without input or output")
    ap.add_argument("--starting-offsets", default="earliest")
    ap.add_argument("--ending-offsets", default="latest", help="backfill only")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    ap.add_argument("--log-format", choices=["console", "json"], default="console")
    ap.add_argument("--verbose", action="store_true", help="Spark's own logging and Python tracebacks")
    return ap


def config_from(args: argparse.Namespace) -> PipelineConfig:
    conf = dict(item.split("=", 1) for item in args.conf if "=" in item)
    return PipelineConfig(
        bootstrap_servers=args.bootstrap_servers, checkpoint=args.checkpoint,
        input_topic=args.input_topic, output_topic=args.output_topic,
        dead_letter_topic=args.dead_letter_topic, progress_topic=args.progress_topic,
        app_name=args.app_name, window=args.window, watermark=args.watermark,
        shuffle_partitions=args.shuffle_partitions, output_partitions=args.output_partitions,
        replication_factor=args.replication_factor,
        max_offsets_per_trigger=args.max_offsets_per_trigger or None, trigger_seconds=args.trigger_seconds,
        idle_timeout=args.idle_timeout, starting_offsets=args.starting_offsets,
        ending_offsets=args.ending_offsets, master=args.master, spark_conf=conf,
    )


def configure_logging(fmt: str) -> None:
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.dev.ConsoleRenderer(colors=False, sort_keys=False))
    structlog.configure(
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
    )
    logging.getLogger("py4j").setLevel(logging.CRITICAL)  # its connection errors after a JVM exit


def run(args: argparse.Namespace) -> None:
    from pipeline.preflight import prepare
    from pipeline.session import build_session

    cfg = config_from(args)
    aggregates, dead = prepare(cfg)  # before the JVM starts: bad configuration ends here
    spark = build_session(cfg, verbose=args.verbose)
    try:
        if args.command == "stream":
            _stream(spark, cfg, aggregates, dead)
        else:
            from pipeline.backfill import run_backfill

            run_backfill(spark, cfg, aggregates, dead)
    finally:
        spark.stop()


def _stream(spark, cfg: PipelineConfig, aggregates, dead) -> None:
    from pipeline.stream import StreamJob

    job = StreamJob(spark, cfg, aggregates, dead)
    try:
        job.start()
        job.run()
    finally:
        job.stop()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_logging(args.log_format)
    try:
        run(args)
    except KeyboardInterrupt:
        log.info("interrupted")
        return 130
    except Exception as exc:  # the error boundary: one line, no JVM stack trace
        if args.verbose:
            raise
        error = translate(exc)
        print(f"pipeline: error: {error}", file=sys.stderr)
        return 2
    return 0
