"""Heartbeats that keep a long stage from being taken for a dead worker.

The activity heartbeat timeout is meant to notice a crashed worker, not a big file: work that may take
long heartbeats as it goes, and work run off the event loop is awaited while heartbeating.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from temporalio import activity

T = TypeVar("T")

HEARTBEAT_EVERY_SECONDS = 2.0


def beat(*details: Any) -> None:
    """Heartbeats a regular activity; a local one is covered by its workflow task's own heartbeat."""
    if activity.in_activity() and not activity.info().is_local:
        activity.heartbeat(*details)


async def heartbeating(work: Awaitable[T]) -> T:
    """Awaits work running off the event loop (a parse, a big chunking), heartbeating meanwhile."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_EVERY_SECONDS)
        if done:
            return task.result()
        beat("working")
