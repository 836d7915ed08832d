"""Retrieval on the NATS bus: it listens for model changes, so cached model facts never go stale.

What retrieval caches of a tenant's models — the languages an embedding model reads, whether a default
rerank model exists, query vectors — is dropped when modelhub announces a change
(``ks.modelhub.model.changed.v1``; see :mod:`knowsphere_clients.model_changes`). ``make asyncapi``
documents this from :func:`build_bus`.
"""

from __future__ import annotations

from dataclasses import dataclass

from faststream.nats import NatsRouter

from knowsphere_clients.model_changes import model_changes_router

__all__ = ["RetrievalBus", "build_bus"]


@dataclass(frozen=True)
class RetrievalBus:
    subscribers: NatsRouter
    """What the service includes: the subscriber that keeps its model facts fresh."""


def build_bus() -> RetrievalBus:
    return RetrievalBus(model_changes_router("retrieval"))
