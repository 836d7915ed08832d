"""Keeping a process's cached model facts fresh: the subscriber of ``ks.modelhub.model.changed.v1``.

A :class:`~knowsphere_clients.ModelHubClient` caches per tenant what callers ask on every request (a
default model of a type, an embedding model's languages, query vectors). Modelhub announces every
change of a model or a default; a service includes :func:`model_changes_router` into its broker and
puts its client into FastStream's context under :data:`MODELHUB`, and the cache drops the tenant's
facts of that model at once. The tenant comes from the message's identity headers.
"""

from __future__ import annotations

from typing import Annotated

from faststream import Context
from faststream.nats import NatsRouter

from knowsphere_clients.modelhub import ModelHubClient
from knowsphere_contracts.events import ModelChanged
from knowsphere_runtime.identity import require_identity

MODELHUB = "modelhub"
"""Context name of the process's :class:`~knowsphere_clients.ModelHubClient`."""

ModelHub = Annotated[ModelHubClient, Context(MODELHUB)]


def model_changes_router(service: str) -> NatsRouter:
    """A router whose one subscriber drops ``service``'s cached facts of a changed model."""
    router = NatsRouter()

    @router.subscriber(
        ModelChanged.subject,
        title=f"{service}:model-changed",
        description=f"Drops what {service} caches of the changed model (default models of a type, "
        "an embedding model's languages, query vectors) for the tenant.",
    )
    async def on_model_changed(event: ModelChanged, modelhub: ModelHub) -> None:
        modelhub.invalidate(require_identity().tenant_id, event.model_id)

    return router
