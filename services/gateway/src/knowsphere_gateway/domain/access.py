"""Which role each route of the public API needs: one table, read by the authorization dependency.

Admins manage knowledge bases, models, agents, orchestrators, applications and tokens; members chat,
upload, keep their own sessions and run retrieval evaluations; read-only callers read and search. A route
missing from the table needs ``admin`` (closed by default), and a test fails until it is listed. The role
is checked before the route looks anything up, so a 403 says nothing about whether a resource exists.
"""

from __future__ import annotations

from knowsphere_gateway.domain.tokens import Role

ADMIN, MEMBER, READ_ONLY = Role.ADMIN, Role.MEMBER, Role.READ_ONLY

ROUTE_ROLES: dict[tuple[str, str], Role] = {
    ("GET", "/api/v1/artifacts/{artifact_id}"): READ_ONLY,
    # knowledge bases and documents
    ("POST", "/api/v1/knowledge-bases"): ADMIN,
    ("GET", "/api/v1/knowledge-bases"): READ_ONLY,
    ("GET", "/api/v1/knowledge-bases/{kb_id}"): READ_ONLY,
    ("PATCH", "/api/v1/knowledge-bases/{kb_id}"): ADMIN,
    ("DELETE", "/api/v1/knowledge-bases/{kb_id}"): ADMIN,
    ("GET", "/api/v1/knowledge-bases/{kb_id}/documents"): READ_ONLY,
    ("GET", "/api/v1/documents/{document_id}"): READ_ONLY,
    ("DELETE", "/api/v1/documents/{document_id}"): MEMBER,
    ("POST", "/api/v1/documents/{document_id}/reingest"): MEMBER,
    ("GET", "/api/v1/upload-policy"): READ_ONLY,
    ("POST", "/api/v1/knowledge-bases/{kb_id}/documents"): MEMBER,
    ("POST", "/api/v1/knowledge-bases/{kb_id}/documents/batch"): MEMBER,
    ("GET", "/api/v1/documents/{document_id}/progress"): READ_ONLY,
    ("GET", "/api/v1/knowledge-bases/{kb_id}/progress"): READ_ONLY,
    ("POST", "/api/v1/knowledge-bases/{kb_id}/search"): READ_ONLY,
    # retrieval evaluation runs (members start and delete them; every role may read them)
    ("POST", "/api/v1/knowledge-bases/{kb_id}/evaluations"): MEMBER,
    ("GET", "/api/v1/knowledge-bases/{kb_id}/evaluations"): READ_ONLY,
    ("GET", "/api/v1/evaluations/{evaluation_id}"): READ_ONLY,
    ("DELETE", "/api/v1/evaluations/{evaluation_id}"): MEMBER,
    # models
    ("GET", "/api/v1/providers"): READ_ONLY,
    ("GET", "/api/v1/models"): READ_ONLY,
    ("POST", "/api/v1/models"): ADMIN,
    ("GET", "/api/v1/models/defaults/{type}"): READ_ONLY,
    ("PUT", "/api/v1/models/defaults/{type}"): ADMIN,
    ("GET", "/api/v1/models/{model_id}"): READ_ONLY,
    ("PATCH", "/api/v1/models/{model_id}"): ADMIN,
    ("DELETE", "/api/v1/models/{model_id}"): ADMIN,
    ("GET", "/api/v1/models/{model_id}/usages"): READ_ONLY,
    # chat and sessions (a session is its user's own)
    ("POST", "/api/v1/chat/turns"): MEMBER,
    ("GET", "/api/v1/chat/turns/{turn_id}/events"): MEMBER,
    ("POST", "/api/v1/chat/turns/{turn_id}/cancel"): MEMBER,
    ("POST", "/api/v1/sessions"): MEMBER,
    ("GET", "/api/v1/sessions"): READ_ONLY,
    ("GET", "/api/v1/sessions/{session_id}"): READ_ONLY,
    ("PATCH", "/api/v1/sessions/{session_id}"): MEMBER,
    ("DELETE", "/api/v1/sessions/{session_id}"): MEMBER,
    ("GET", "/api/v1/sessions/{session_id}/messages"): READ_ONLY,
    # agents and orchestrators (admins manage them; every role may read them)
    ("POST", "/api/v1/agents"): ADMIN,
    ("GET", "/api/v1/agents"): READ_ONLY,
    ("GET", "/api/v1/agents/{agent_id}"): READ_ONLY,
    ("PATCH", "/api/v1/agents/{agent_id}"): ADMIN,
    ("DELETE", "/api/v1/agents/{agent_id}"): ADMIN,
    ("POST", "/api/v1/orchestrators"): ADMIN,
    ("GET", "/api/v1/orchestrators"): READ_ONLY,
    ("GET", "/api/v1/orchestrators/{orchestrator_id}"): READ_ONLY,
    ("PATCH", "/api/v1/orchestrators/{orchestrator_id}"): ADMIN,
    ("DELETE", "/api/v1/orchestrators/{orchestrator_id}"): ADMIN,
    # applications: an orchestrator on a channel (admins manage them; every role may read them)
    ("POST", "/api/v1/applications"): ADMIN,
    ("GET", "/api/v1/applications"): READ_ONLY,
    ("GET", "/api/v1/applications/{application_id}"): READ_ONLY,
    ("PATCH", "/api/v1/applications/{application_id}"): ADMIN,
    ("DELETE", "/api/v1/applications/{application_id}"): ADMIN,
    # the caller's own memory
    ("GET", "/api/v1/memory/items"): READ_ONLY,
    ("PATCH", "/api/v1/memory/items/{item_id}"): MEMBER,
    ("DELETE", "/api/v1/memory/items/{item_id}"): MEMBER,
    ("GET", "/api/v1/memory/frequent-documents"): READ_ONLY,
    # every application as an A2A agent: its card, and its JSON-RPC endpoint (a call asks its orchestrator)
    ("GET", "/a2a/{application_id}/.well-known/agent-card.json"): READ_ONLY,
    ("POST", "/a2a/{application_id}"): MEMBER,
    # the OpenAI-compatible API
    ("POST", "/v1/chat/completions"): MEMBER,
    ("GET", "/v1/models"): READ_ONLY,
    ("POST", "/v1/embeddings"): READ_ONLY,
    # the tool catalogue and the installed skills (the platform's, read by every tenant)
    ("GET", "/api/v1/tools"): READ_ONLY,
    ("GET", "/api/v1/skills"): READ_ONLY,
    ("GET", "/api/v1/skills/{skill_name}"): READ_ONLY,
    ("GET", "/api/v1/skills/{skill_name}/file"): READ_ONLY,
    # tokens
    ("POST", "/api/v1/tokens"): ADMIN,
    ("GET", "/api/v1/tokens"): ADMIN,
    ("GET", "/api/v1/tokens/{token_id}"): ADMIN,
    ("DELETE", "/api/v1/tokens/{token_id}"): ADMIN,
}

UNLISTED_ROUTE_ROLE = ADMIN


def role_needed(method: str, path: str) -> Role:
    """The role a request to the route ``path`` (its template, e.g. ``/api/v1/models/{model_id}``)
    needs; HEAD counts as GET."""
    method = "GET" if method == "HEAD" else method
    return ROUTE_ROLES.get((method, path), UNLISTED_ROUTE_ROLE)


__all__ = ["ROUTE_ROLES", "UNLISTED_ROUTE_ROLE", "role_needed"]
