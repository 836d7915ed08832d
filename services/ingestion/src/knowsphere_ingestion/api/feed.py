"""Progress events from the bus, for WatchDocumentProgress: one short-lived subscription per watcher."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import structlog
from pydantic import ValidationError

from knowsphere_contracts.events import DocumentFinished, DocumentProgress

log = structlog.get_logger(__name__)

DOCUMENT_EVENTS = "ks.ingestion.document.>"
POLL_SECONDS = 15.0

DocumentEvent = DocumentProgress | DocumentFinished


class ProgressFeed:
    def __init__(self, broker: Any) -> None:
        self._broker = broker

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[AsyncIterator[DocumentEvent]]:
        """Subscribed on entry, so nothing published after entering is missed."""
        subscriber = self._broker.subscriber(DOCUMENT_EVENTS, persistent=False)
        await subscriber.start()
        try:
            yield self._events(subscriber)
        finally:
            await subscriber.stop()

    @staticmethod
    async def _events(subscriber: Any) -> AsyncIterator[DocumentEvent]:
        while True:
            message = await subscriber.get_one(timeout=POLL_SECONDS)
            if message is None:
                continue
            subject = getattr(message.raw_message, "subject", "")
            model: type[DocumentEvent] = (
                DocumentFinished if subject == DocumentFinished.subject else DocumentProgress
            )
            try:
                yield model.model_validate_json(message.body)
            except ValidationError:
                log.warning("unreadable document event", subject=subject)
