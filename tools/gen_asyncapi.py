"""Generate the AsyncAPI document of KnowSphere's NATS events (what `make asyncapi` runs).

The document comes from the services' own FastStream declarations: every service that speaks NATS
builds its routers in ``api/bus.py`` (``build_bus()``), its wiring includes them into its broker, and
this tool includes the very same routers into one broker and asks FastStream for the document. What a
service subscribes to and publishes is therefore documented exactly as it runs; an event no service
publishes or consumes does not appear.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from pathlib import Path

import yaml
from faststream.nats import NatsBroker, NatsRouter
from faststream.specification import AsyncAPI

# The services that speak NATS, by the module declaring their bus.
BUS_MODULES = (
    "knowsphere_gateway.api.bus",
    "knowsphere_conversation.api.bus",
    "knowsphere_ingestion.api.bus",
    "knowsphere_retrieval.api.bus",
    "knowsphere_modelhub.api.bus",
    "knowsphere_memory.api.bus",
)


def routers() -> list[NatsRouter]:
    """Every router of every service's ``build_bus()``."""
    found: list[NatsRouter] = []
    for name in BUS_MODULES:
        bus = importlib.import_module(name).build_bus()
        values = (
            [getattr(bus, f.name) for f in dataclasses.fields(bus)]
            if dataclasses.is_dataclass(bus)
            else [bus]
        )
        found.extend(value for value in values if isinstance(value, NatsRouter))
    return found


def build_document() -> str:
    broker = NatsBroker("nats://knowsphere-nats:4222")
    for router in routers():
        broker.include_router(router)
    spec = AsyncAPI(
        broker,
        title="KnowSphere events",
        version="1.0.0",
        description="Events on the KnowSphere NATS bus, as the services declare them. Identity travels in "
        "the ks-identity header (an Ed25519-signed token naming tenant and user); trace context in W3C "
        "traceparent/tracestate headers.",
    )
    # Sorted keys: FastStream's channel order follows set iteration, which varies between runs.
    return yaml.safe_dump(spec.to_specification().to_jsonable(), sort_keys=True, allow_unicode=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_args().out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(build_document(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
