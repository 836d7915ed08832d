"""The API's side of the bus, on FastStream's in-memory test broker: document events reach the progress
watches through the fanout, typed, each on its tenant's subject; one whose subject names another tenant
than its signed identity is refused; model changes drop the tenant's cached model facts."""

from __future__ import annotations

import asyncio

import pytest
from faststream.nats import TestNatsBroker

from knowsphere_clients.model_changes import MODELHUB
from knowsphere_contracts.events import (
    DocumentsFinished,
    DocumentsProgress,
    FinishedDocument,
    ModelChange,
    ModelChanged,
    ProgressUpdate,
)
from knowsphere_contracts.vocabulary import DocumentStatus
from knowsphere_ingestion.api.bus import DOCUMENT_EVENTS, DocumentEvent, build_bus
from knowsphere_runtime.bus import Fanout, build_broker
from knowsphere_runtime.identity import Identity, bound_identity


class ModelHub:
    def __init__(self) -> None:
        self.invalidated: list[tuple[str, str]] = []

    def invalidate(self, tenant_id: str, model_id: str = "") -> None:
        self.invalidated.append((tenant_id, model_id))


async def test_document_events_reach_the_watches_typed_and_model_changes_drop_cached_facts() -> None:
    bus = build_bus()
    broker = build_broker("nats://127.0.0.1:4222", client_name="ingestion-test")
    broker.include_router(bus.publishers)
    broker.include_router(bus.subscribers)
    broker.include_router(bus.model_changes)
    fanout: Fanout[DocumentEvent] = Fanout()
    modelhub = ModelHub()
    broker.context.set_global(DOCUMENT_EVENTS, fanout)
    broker.context.set_global(MODELHUB, modelhub)

    async with fanout.watch(lambda event: event.knowledge_base_id == "kb-1") as events:
        async with TestNatsBroker(broker) as test_broker:
            with bound_identity(Identity("acme", "worker")):
                for event in (
                    DocumentsProgress(
                        knowledge_base_id="kb-1",
                        updates=[
                            ProgressUpdate(document_id="d", stage=DocumentStatus.EMBEDDING, percent=40),
                            ProgressUpdate(document_id="e", stage=DocumentStatus.PARSING, percent=2),
                        ],
                    ),
                    DocumentsProgress(
                        knowledge_base_id="kb-2",
                        updates=[ProgressUpdate(document_id="x", stage=DocumentStatus.PARSING, percent=1)],
                    ),
                    DocumentsFinished(
                        knowledge_base_id="kb-1",
                        documents=[FinishedDocument(document_id="d", status=DocumentStatus.READY)],
                    ),
                ):
                    await bus.publish(event)
                changed = ModelChanged(
                    model_id="whisper", change=ModelChange.DEFAULT_CHANGED, model_types=["asr"]
                )
                await test_broker.publish(changed.model_dump(mode="json"), ModelChanged.subject)
            # A worker of another tenant writing on acme's subject: refused, never watched.
            forged = DocumentsFinished(
                knowledge_base_id="kb-1",
                documents=[FinishedDocument(document_id="d", status=DocumentStatus.FAILED)],
            )
            with bound_identity(Identity("intruder", "worker")):
                await test_broker.publish(
                    forged.model_dump(mode="json"), DocumentsFinished.subject_for("acme")
                )
        received = [await asyncio.wait_for(anext(events), 1) for _ in range(2)]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(events), 0.5)

    assert isinstance(received[0], DocumentsProgress)
    assert [(u.document_id, u.stage) for u in received[0].updates] == [
        ("d", DocumentStatus.EMBEDDING),
        ("e", DocumentStatus.PARSING),
    ]
    assert isinstance(received[1], DocumentsFinished)
    assert [(d.document_id, d.status) for d in received[1].documents] == [("d", DocumentStatus.READY)]
    assert modelhub.invalidated == [("acme", "whisper")]
