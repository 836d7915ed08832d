"""An application as an A2A agent: its agent card, and what its answers carry besides their text.

Pure shaping, no I/O. The card names the application (its display name), says what it does (its
orchestrator's description, or a sentence saying it answers with cited sources), where its JSON-RPC
endpoint is (A2A 1.0 and 0.3), that it streams, takes and gives text (and its sources as JSON), and
that a caller authenticates with the gateway's bearer tokens.

An answer's sources are the gateway's ``url_citation`` annotations (``domain.annotations``) without
their wrapper: one per source the answer cites, in the order cited, with the position of its first
``[[cN]]`` marker — the same shaping the OpenAI-compatible API sends, so both channels describe a
source alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol

from knowsphere_contracts.events import Citation
from knowsphere_gateway.domain.annotations import DocumentUrl, annotations_of
from knowsphere_gateway.domain.applications import ApplicationRecord

A2A_PATH_PREFIX: Final = "/a2a"
"""Where the applications' agents live: ``/a2a/{application_id}``."""
BEARER_SCHEME: Final = "bearer"
"""The card's name of the security scheme: the gateway's API tokens."""
TEXT: Final = "text/plain"
SOURCES_MEDIA_TYPE: Final = "application/json"
INPUT_MODES: Final = (TEXT,)
OUTPUT_MODES: Final = (TEXT, SOURCES_MEDIA_TYPE)
PROVIDER: Final = "KnowSphere"
PROTOCOL_VERSIONS: Final = (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)
"""The A2A versions the JSON-RPC endpoint speaks."""


def agent_path(application_id: str) -> str:
    """The path of an application's JSON-RPC endpoint (its card is under ``/.well-known/`` there)."""
    return f"{A2A_PATH_PREFIX}/{application_id}"


def default_description(application: ApplicationRecord) -> str:
    return (
        f"{application.display_name or application.name}: answers questions from the organisation's "
        "knowledge bases, citing each source as [[cN]] and listing the sources with the answer."
    )


def agent_card(application: ApplicationRecord, base_url: str, description: str = "") -> AgentCard:
    """The card of ``application`` served at ``base_url`` (the gateway's own, no trailing slash);
    ``description``: its orchestrator's, if it has one."""
    return _card(
        name=application.display_name or application.name,
        description=description.strip() or default_description(application),
        url=f"{base_url}{agent_path(application.id)}",
        base_url=base_url,
        # Changes whenever the application does, so a client caching the card can tell.
        version=application.update_time.isoformat(),
        skill_id=application.name,
    )


def handler_card() -> AgentCard:
    """The card the SDK's request handler checks every call against (streaming on, push notifications
    off): what every application's card says of its capabilities."""
    return _card(
        name="KnowSphere application",
        description="any application of a tenant, as an A2A agent",
        url=agent_path("{application_id}"),
        base_url="",
        version="1",
        skill_id="application",
    )


def _card(*, name: str, description: str, url: str, base_url: str, version: str, skill_id: str) -> AgentCard:
    return AgentCard(
        name=name,
        description=description,
        # One endpoint speaking both versions: 1.0 first (clients prefer it), 0.3 for older clients
        # (whose card fields, ``url`` and ``protocolVersion``, come from this interface).
        supported_interfaces=[
            AgentInterface(
                url=url, protocol_binding=TransportProtocol.JSONRPC.value, protocol_version=version
            )
            for version in PROTOCOL_VERSIONS
        ],
        provider=AgentProvider(organization=PROVIDER, url=base_url) if base_url else None,
        version=version,
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={
            BEARER_SCHEME: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    bearer_format="KnowSphere API token (ks_…)",
                    description="a token of the application's tenant, or one of the application's own",
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={BEARER_SCHEME: StringList()})],
        default_input_modes=list(INPUT_MODES),
        default_output_modes=list(OUTPUT_MODES),
        skills=[
            AgentSkill(
                id=skill_id,
                name=name,
                description=description,
                tags=["knowledge-base", "citations"],
                input_modes=list(INPUT_MODES),
                output_modes=list(OUTPUT_MODES),
            )
        ],
    )


def sources_of(text: str, citations: Iterable[Citation], url: DocumentUrl) -> list[dict[str, Any]]:
    """The sources ``text`` cites, each once, in the order cited: handle, title, url, document_id,
    chunk_id, knowledge_base_id, page, file_name and the offsets of its first marker."""
    return [annotation["url_citation"] for annotation in annotations_of(text, citations, url)]


__all__ = [
    "A2A_PATH_PREFIX",
    "BEARER_SCHEME",
    "INPUT_MODES",
    "OUTPUT_MODES",
    "SOURCES_MEDIA_TYPE",
    "agent_card",
    "agent_path",
    "default_description",
    "handler_card",
    "sources_of",
]
