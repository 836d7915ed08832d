"""Structured JSON logs, one object per line on stderr, carrying the trace and the caller's identity.

Standard-library loggers (grpc, uvicorn, faststream, temporalio) are routed through the same
renderer, so every line of a service's log has the same shape.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog
from opentelemetry import trace

ContextReader = Callable[[], dict[str, str]]


def _trace_ids(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        event.setdefault("trace_id", format(ctx.trace_id, "032x"))
        event.setdefault("span_id", format(ctx.span_id, "016x"))
    return event


def configure_logging(
    service: str,
    level: str = "INFO",
    *,
    context_reader: ContextReader | None = None,
    stream: Any = None,
) -> None:
    """Route structlog and the standard library to JSON lines on ``stream`` (stderr by default).

    ``context_reader`` returns extra fields for each line (the runtime passes the caller's tenant
    and user), so this library does not depend on how identity is stored.
    """

    def _static(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        event.setdefault("service", service)
        if context_reader is not None:
            for key, value in context_reader().items():
                event.setdefault(key, value)
        return event

    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _static,
        _trace_ids,
    ]
    structlog.configure(
        # A line below the level is dropped first, before any processor spends time on it.
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(ensure_ascii=False),
        ],
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
