"""Generate the AsyncAPI document of KnowSphere's NATS events (what `make asyncapi` runs).

The document is built from :data:`knowsphere_contracts.events.EVENT_CATALOG`: one channel per
event subject, its payload schema from the pydantic model, its description from the docstring.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

import yaml
from faststream.nats import NatsBroker
from faststream.specification import AsyncAPI

from knowsphere_contracts.events import EVENT_CATALOG


def build_document() -> str:
    broker = NatsBroker("nats://knowsphere-nats:4222")
    for event in EVENT_CATALOG:
        subject = event.subject
        if hasattr(event, "subject_for"):
            subject = event.subject_for("{id}")
        broker.publisher(
            subject,
            schema=event,
            title=f"{event.subject}:{event.__name__}",
            description=inspect.cleandoc(event.__doc__ or ""),
        )
    spec = AsyncAPI(
        broker,
        title="KnowSphere events",
        version="1.0.0",
        description="Events on the KnowSphere NATS bus. Identity travels in the ks-tenant-id and "
        "ks-user-id headers; trace context in W3C traceparent/tracestate headers.",
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
