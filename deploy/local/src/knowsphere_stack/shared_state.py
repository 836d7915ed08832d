"""Whether the replicas a config asks for can share their service's state; the refusal when not.

Replicas of a service are one service: a session written through one must be read through the other,
a chunk indexed by one found by the other. The embedded backends cannot give that: the in-process
Qdrant engine, tantivy and ArcadeDB each belong to the one process that opened them, and each replica
has a data dir (and SQLite file) of its own. So a service started more than once needs its state in
servers, and ``ks-stack`` refuses to start otherwise, naming the settings to change:

- retrieval: ``KS_RETRIEVAL_QDRANT_URL`` (Qdrant server), ``KS_RETRIEVAL_OPENSEARCH_URL`` (OpenSearch),
  ``KS_RETRIEVAL_DATABASE_URL`` (PostgreSQL chunk store), and ``KS_RETRIEVAL_NEO4J_URL`` (Neo4j) or
  ``KS_RETRIEVAL_GRAPH_ENABLED=false``;
- conversation: ``KS_CONVERSATION_DATABASE_URL`` (sessions, agents, orchestrators) and
  ``KS_CONVERSATION_CHECKPOINT_URL`` (LangGraph checkpoints), both PostgreSQL;
- modelhub: ``KS_MODELHUB_DATABASE_URL`` (the model registry), PostgreSQL.

The ingestion workers need nothing: they all use ingestion's data dir, its SQLite database (WAL, with a
busy timeout, as the one worker always has beside the API) and its blob folder, and Temporal hands each
task to one of them.

The values are read as the services will see them: ``KS_STACK_EXTRA_ENV`` over the inherited
environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import TypeAdapter, ValidationError

from knowsphere_stack.config import StackConfig

POSTGRESQL = ("postgresql://", "postgresql+")
"""How a PostgreSQL URL starts (``postgresql+asyncpg://`` for SQLAlchemy, ``postgresql://`` for psycopg)."""


@dataclass(frozen=True)
class SharedStore:
    """One store a replicated service keeps in its data dir unless a setting points it at a server."""

    variable: str
    what: str
    postgresql: bool = False
    """The setting must be a PostgreSQL URL (a SQLite URL would again be a file per replica)."""
    disabled_by: str = ""
    """A boolean setting that, false, turns the store off altogether."""


SHARED_STORES: dict[str, tuple[SharedStore, ...]] = {
    "retrieval": (
        SharedStore("KS_RETRIEVAL_QDRANT_URL", "a Qdrant server for the vectors"),
        SharedStore("KS_RETRIEVAL_OPENSEARCH_URL", "OpenSearch for the lexical index"),
        SharedStore("KS_RETRIEVAL_DATABASE_URL", "PostgreSQL for the chunk store", postgresql=True),
        SharedStore(
            "KS_RETRIEVAL_NEO4J_URL",
            "Neo4j for the graph",
            disabled_by="KS_RETRIEVAL_GRAPH_ENABLED",
        ),
    ),
    "conversation": (
        SharedStore(
            "KS_CONVERSATION_DATABASE_URL",
            "PostgreSQL for sessions, agents and orchestrators",
            postgresql=True,
        ),
        SharedStore("KS_CONVERSATION_CHECKPOINT_URL", "PostgreSQL for the checkpoints", postgresql=True),
    ),
    "modelhub": (
        SharedStore("KS_MODELHUB_DATABASE_URL", "PostgreSQL for the model registry", postgresql=True),
    ),
}
"""The stores each replicable service keeps per process by default (the ingestion worker has none)."""

_BOOL = TypeAdapter(bool)


def _is_off(value: str | None) -> bool:
    if value is None:
        return False
    try:
        return not _BOOL.validate_python(value)
    except ValidationError:
        return False  # the service itself will refuse the value, naming it


def _missing(store: SharedStore, environment: Mapping[str, str]) -> str | None:
    """Why ``store`` would stay per replica, or None when it is shared."""
    if store.disabled_by and _is_off(environment.get(store.disabled_by)):
        return None
    value = environment.get(store.variable, "").strip()
    if not value:
        alternative = f" (or {store.disabled_by}=false)" if store.disabled_by else ""
        return f"{store.variable} ({store.what}){alternative}"
    if store.postgresql and not value.startswith(POSTGRESQL):
        return f"{store.variable} ({store.what}; it names no PostgreSQL database)"
    return None


def unshared_state(config: StackConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Per replicated service whose state would stay in each replica's own data dir, a message naming
    every setting to change; empty when the replicas can run."""
    environment = {**(os.environ if environ is None else environ), **config.extra_env}
    problems: dict[str, str] = {}
    for service, stores in SHARED_STORES.items():
        replicas = config.replicas(service)
        if replicas == 1 or service not in config.services:
            continue
        missing = [reason for store in stores if (reason := _missing(store, environment)) is not None]
        if missing:
            setting = StackConfig.env_var(f"replicas_{service}")
            problems[service] = (
                f"{setting}={replicas}: {service}'s embedded stores belong to one process and cannot be "
                f"shared by replicas; point them at servers with {', '.join(missing)}, or run one "
                f"{service} ({setting}=1)"
            )
    return problems


__all__ = ["SHARED_STORES", "SharedStore", "unshared_state"]
