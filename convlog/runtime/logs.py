"""structlog configuration: JSON lines on stderr (key-value when stderr is a terminal)."""

from __future__ import annotations

import logging
import sys

import structlog

from convlog.settings import Settings


def configure_logging(settings: Settings, default_level: str = "info") -> None:
    """Level from ``CONVLOG_LOG_LEVEL`` (debug, info, warning, error, critical), else ``default_level``."""
    name = (settings.log_level or default_level).upper()
    level = logging.getLevelNamesMapping().get(name, logging.INFO)
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer() if sys.stderr.isatty() else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
