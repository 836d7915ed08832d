"""Modelhub on the NATS bus: it announces that a tenant's model or default model changed.

After a model is created, updated or deleted, and after a default is set or cleared, the registry API
publishes :class:`~knowsphere_contracts.events.ModelChanged` on ``ks.modelhub.model.changed.v1`` while
the caller's identity is bound, so the broker's ``IdentityMiddleware`` puts the tenant in the headers.
Services that cache model facts (retrieval: languages, defaults, query vectors) drop them on it.
``make asyncapi`` documents this from :func:`build_bus`.
"""

from __future__ import annotations

from dataclasses import dataclass

from faststream.nats import NatsRouter
from faststream.nats.publisher.usecase import LogicPublisher

from knowsphere_contracts.events import ModelChanged


@dataclass(frozen=True)
class ModelHubBus:
    publishers: NatsRouter
    """What the service includes: the publisher of model changes."""
    model_changed: LogicPublisher

    async def announce(self, event: ModelChanged) -> None:
        """Publishes a model change (the tenant travels in the headers of the bound identity)."""
        await self.model_changed.publish(event.model_dump(mode="json"))


def build_bus() -> ModelHubBus:
    publishers = NatsRouter()
    model_changed = publishers.publisher(
        ModelChanged.subject,
        schema=ModelChanged,
        title="modelhub:model-changed",
        description="A tenant's model was created, updated or deleted, or its default model for a type "
        "was set or cleared; caches of model facts drop what they hold.",
    )
    return ModelHubBus(publishers, model_changed)
