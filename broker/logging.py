"""structlog set-up: console (human) or JSON lines, with ISO timestamps and levels."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(fmt: str = "console", level: int = logging.INFO) -> None:
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
