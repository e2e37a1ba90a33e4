"""``python -m broker [server.properties] [--override key=value ...]``

Starts one broker. With no arguments: a usable single broker on localhost:9092 with its data
under ./kbroker-data. Kafka's ``kafka-server-start`` takes ``--override`` the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import structlog

from .config import KEYS, ConfigError, load_from_args
from .logging import configure


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="kbroker", description="A Kafka-compatible broker.")
    p.add_argument("properties", nargs="?", help="a Kafka server.properties file")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="override a property (repeatable)")
    p.add_argument("--strict-config", action="store_true",
                   help="fail on unknown configuration keys instead of warning")
    return p.parse_args(argv)


def _internal_default(name: str, value) -> bool:
    """A test-only key left at its default is noise in the start-up log."""
    key = KEYS.get(name)
    return key is not None and key.internal and value == key.default


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = load_from_args(args.properties, args.override, strict=args.strict_config)
    except ConfigError as exc:
        print(f"kbroker: {exc}", file=sys.stderr)
        return 2
    configure(config["log.format"])
    log = structlog.get_logger("broker")
    for warning in config.unknown:
        log.warning("unknown_config", detail=warning)
    if config.ignored:
        log.info("config_accepted_but_not_implemented", keys=config.ignored)
    log.info("effective_config", **{k.replace(".", "_"): v for k, v in sorted(config.values.items())
                                    if v is not None and not _internal_default(k, v)})
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency, but stay usable without it
        log.warning("uvloop_unavailable")
    return asyncio.run(_run(config))


async def _run(config) -> int:
    from storage.log_manager import LogDirInUse

    from . import handlers  # noqa: F401  (registers every API)
    from .broker import Broker

    try:
        broker = Broker(config)
    except LogDirInUse as exc:
        print(f"kbroker: {exc}", file=sys.stderr)
        return 2
    try:
        await broker.start()
    except OSError as exc:
        structlog.get_logger("broker").error("startup_failed", error=str(exc))
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
