"""Whether the backends a process depends on are reachable, and who needs to know.

A connection that drops (the NATS client's ``disconnected_cb``) reports its dependency down; when it is
back, up. The process's gRPC server listens and answers health checks NOT_SERVING while any dependency
is down, so Kubernetes and the gateway stop sending it work it cannot finish, and SERVING again once
everything is back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)

Listener = Callable[[frozenset[str]], Awaitable[None]]

_down: set[str] = set()
_listeners: list[Listener] = []


def down() -> frozenset[str]:
    """The dependencies currently reported down."""
    return frozenset(_down)


def listen(listener: Listener) -> Callable[[], None]:
    """Call ``listener(down)`` on every change; returns the function that stops listening."""
    _listeners.append(listener)
    return lambda: _listeners.remove(listener) if listener in _listeners else None


async def report(name: str, up: bool) -> None:
    """Record that dependency ``name`` is up or down and tell the listeners if that changed."""
    if up == (name not in _down):
        return
    if up:
        _down.discard(name)
        log.info("dependency back", dependency=name)
    else:
        _down.add(name)
        log.warning("dependency down", dependency=name)
    for listener in list(_listeners):
        await listener(frozenset(_down))
