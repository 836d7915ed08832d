"""NATS through FastStream, with trace context and caller identity in message headers.

:func:`build_broker` is the only way services create a broker: it installs FastStream's
OpenTelemetry middleware (a producer span per publish, a consumer span per message, W3C trace
context in headers) and :class:`IdentityMiddleware` (``ks-tenant-id`` / ``ks-user-id`` headers).
"""

from __future__ import annotations

import logging
from typing import Any

import structlog
from faststream import BaseMiddleware
from faststream.nats import NatsBroker
from faststream.nats.opentelemetry import NatsTelemetryMiddleware

from knowsphere_runtime.identity import IdentityError, bound_identity, current_identity, identity_from_pairs

log = structlog.get_logger(__name__)


class IdentityMiddleware(BaseMiddleware):  # type: ignore[type-arg]
    """Puts the current identity into published headers and binds it while a message is handled."""

    async def consume_scope(self, call_next: Any, msg: Any) -> Any:
        try:
            identity = identity_from_pairs(dict(msg.headers or {}))
        except IdentityError as error:
            log.error(
                "message rejected: bad identity headers", subject=getattr(msg, "path", None), error=str(error)
            )
            raise
        with bound_identity(identity):
            return await call_next(msg)

    async def publish_scope(self, call_next: Any, cmd: Any) -> Any:
        identity = current_identity()
        if identity is not None:
            for key, value in identity.as_pairs():
                cmd.headers.setdefault(key, value)
        return await call_next(cmd)


def build_broker(url: str, *, client_name: str, graceful_timeout: float = 20.0, **options: Any) -> NatsBroker:
    """A FastStream NATS broker with tracing and identity propagation.

    ``graceful_timeout`` is how long, on shutdown, in-flight handlers may run to completion
    before the connection closes.
    """
    return NatsBroker(
        url,
        name=client_name,
        graceful_timeout=graceful_timeout,
        middlewares=[NatsTelemetryMiddleware(), IdentityMiddleware],
        # A plain standard-library logger, so FastStream's lines share the service's JSON format.
        logger=logging.getLogger("knowsphere.bus"),
        **options,
    )
