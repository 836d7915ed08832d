"""Every route of the OpenAPI document, walked three times: with no token, with another tenant's admin
token, and with the owner's.

What a caller notices: without a token everything but ``/healthz`` is a 401 and reaches no service;
another tenant's token gets 404 — never 403, so nothing tells it a resource exists — for a knowledge
base, document, progress stream, search, evaluation run, session, turn, model, memory item, agent,
orchestrator, application (and its A2A agent), skill or token of the owner's, and its own (empty) views
elsewhere; the owner's orchestrator in a new application's body is a 400 naming ``orchestrator_id``, as
one that never was; the owner gets the same routes answered.

The peers are tenant-scoped fakes on real gRPC servers (any request naming a resource id answers
NOT_FOUND unless it comes from the owner's tenant), so this proves that the gateway carries the token's
tenant into every call and turns the services' NOT_FOUND into a 404 with no 403 on the way; the
services' own scoping is tested in their suites.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from knowsphere.ingestion.v1 import ingestion_pb2 as ipb
from knowsphere.retrieval.v1.retrieval_enums import SearchMode
from knowsphere.toolrunner.v1 import toolrunner_pb2 as tpb
from knowsphere_clients import ToolRunnerClient
from knowsphere_contracts.events import ChatTurnEvent, TurnEventKind
from knowsphere_contracts.services import CONTRACTS
from knowsphere_gateway.adapters.applications_sql import SqlApplicationStore
from knowsphere_gateway.adapters.evaluations_sql import SqlEvaluationStore
from knowsphere_gateway.api.wecom import SIGNATURE_AUTHENTICATED_PATHS
from knowsphere_gateway.domain.applications import ApplicationRecord, Platform
from knowsphere_gateway.domain.evaluations import EvaluationQuery, EvaluationRun, EvaluationStatus
from knowsphere_gateway.domain.tokens import Role, TokenService
from knowsphere_runtime.identity import Identity, require_identity
from knowsphere_runtime.identity_token import token_headers

OWNER, STRANGER = Identity("acme", "alice"), Identity("globex", "mallory")
RESOURCE_FIELDS = frozenset(
    {
        "knowledge_base_id",
        "knowledge_base_ids",
        "document_id",
        "document_ids",
        "session_id",
        "model_id",
        "turn_id",
        "memory_item_id",
        "agent_id",
        "orchestrator_id",
        "artifact_id",
        "skill_name",
    }
)
PATH_IDS = {
    "kb_id": "kb-a",
    "document_id": "doc-a",
    "session_id": "session-a",
    "model_id": "model-a",
    "turn_id": "turn-a",
    "item_id": "item-a",
    "artifact_id": "artifact-a",
    "agent_id": "agent-a",
    "orchestrator_id": "orchestrator-a",
    "application_id": "application-a",
    "type": "knowledge_qa",
    "skill_name": "skill-a",
    "evaluation_id": "evaluation-a",
}
NOT_A_RESOURCE = frozenset({"type"})  # path parameters that name no resource of a tenant's
MD = ("notes.md", b"# Notes\n", "text/markdown")
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/api/v1/knowledge-bases"): {"json": {"name": "kb"}},
    ("PATCH", "/api/v1/knowledge-bases/{kb_id}"): {"json": {"description": "d"}},
    ("POST", "/api/v1/knowledge-bases/{kb_id}/search"): {"json": {"query": "leave"}},
    ("POST", "/api/v1/knowledge-bases/{kb_id}/evaluations"): {
        "json": {"queries": [{"id": "q1", "text": "leave", "relevant": {"handbook": 1}}]}
    },
    ("POST", "/api/v1/knowledge-bases/{kb_id}/documents"): {"files": {"file": MD}},
    ("POST", "/api/v1/knowledge-bases/{kb_id}/documents/batch"): {"files": [("file", MD)]},
    ("POST", "/api/v1/models"): {
        "json": {"display_name": "m", "provider_id": "openai", "model_name": "gpt", "types": ["knowledge_qa"]}
    },
    ("PUT", "/api/v1/models/defaults/{type}"): {"json": {"model_id": "model-a"}},
    ("PATCH", "/api/v1/models/{model_id}"): {"json": {"description": "d"}},
    # Another tenant's session in the body is a 404 like one in the path.
    ("POST", "/api/v1/chat/turns"): {"json": {"message": "hi", "session_id": "session-a"}},
    ("POST", "/api/v1/sessions"): {"json": {"title": "t"}},
    ("PATCH", "/api/v1/sessions/{session_id}"): {"json": {"title": "t"}},
    ("POST", "/api/v1/agents"): {"json": {"name": "hr-helper"}},
    ("PATCH", "/api/v1/agents/{agent_id}"): {"json": {"description": "d"}},
    ("POST", "/api/v1/orchestrators"): {
        "json": {"name": "hr-desk", "mode": "knowledge_base", "config": {"knowledge_base_ids": ["kb-b"]}}
    },
    ("PATCH", "/api/v1/orchestrators/{orchestrator_id}"): {"json": {"description": "d"}},
    ("POST", "/api/v1/applications"): {
        "json": {"name": "web-desk", "platform": "api_service", "orchestrator_id": "orchestrator-a"}
    },
    ("PATCH", "/api/v1/applications/{application_id}"): {"json": {"display_name": "d"}},
    ("POST", "/api/v1/tokens"): {"json": {"name": "n", "role": "member"}},
    ("PATCH", "/api/v1/memory/items/{item_id}"): {"json": {"content": "I work in finance"}},
    # The owner's agent as the model is a 404 like one in the path.
    ("POST", "/v1/chat/completions"): {
        "json": {"model": "agent-a", "messages": [{"role": "user", "content": "hi"}]}
    },
    ("POST", "/v1/embeddings"): {"json": {"model": "default", "input": "leave"}},
    ("GET", "/api/v1/skills/{skill_name}/file"): {"params": {"path": "SKILL.md"}},
    # The owner's application as an A2A agent: a JSON-RPC call (an unknown task is a JSON-RPC error, 200).
    ("POST", "/a2a/{application_id}"): {
        "json": {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "task-a"}}
    },
}
NAMES_A_RESOURCE_IN_ITS_BODY = {
    ("PUT", "/api/v1/models/defaults/{type}"),
    ("POST", "/api/v1/chat/turns"),
    ("POST", "/v1/chat/completions"),
}
# The owner's orchestrator named in a new application is refused like an unknown one: 400 naming the field.
REFUSED_AS_UNKNOWN = {("POST", "/api/v1/applications"): 400}
# Publishing a turn needs NATS (test_chat and test_openai_compat cover it); the owner's walk leaves it out.
OWNER_SKIPS = {("POST", "/api/v1/chat/turns"), ("POST", "/v1/chat/completions")}
# A fake answers every call with an empty response but these.
ANSWERS: dict[str, Message] = {
    "GetUploadPolicy": ipb.GetUploadPolicyResponse(
        max_file_size_bytes=10_000,
        max_files_per_upload=10,
        file_types=[ipb.SupportedFileType(extension="md", content_types=["text/markdown"])],
    ),
    "UploadDocuments": ipb.UploadDocumentsResponse(results=[ipb.UploadResult(file_name="notes.md")]),
    # Streamed once (a stream of the fakes is otherwise empty).
    "DownloadArtifact": tpb.DownloadArtifactResponse(
        artifact=tpb.ToolArtifact(artifact_id="artifact-a", file_name="a.pptx", content_type="text/plain")
    ),
}


def names_a_resource(message: Message) -> bool:
    if isinstance(message, tpb.GetSkillRequest) and message.name:
        return True  # a skill is its tenant's, named by ``name`` here
    for field, value in message.ListFields():
        if field.name in RESOURCE_FIELDS and value:
            return True
        if field.name == "header" and isinstance(value, Message) and names_a_resource(value):
            return True
    return False


class TenantScoped:
    """A peer whose every resource is the owner's: a request naming one from another tenant is NOT_FOUND.
    Records the tenant of every call."""

    def __init__(self, service: str, tenants: list[str]) -> None:
        for method in CONTRACTS[service].descriptor.methods:
            answer = ANSWERS.get(method.name)
            response = answer or GetMessageClass(method.output_type)()
            streamed = (response,) if answer is not None else ()
            setattr(
                self,
                method.name,
                self._behaviour(
                    method.client_streaming, method.server_streaming, response, streamed, tenants
                ),
            )

    @staticmethod
    def _behaviour(
        client_streaming: bool,
        server_streaming: bool,
        response: Message,
        streamed: tuple[Message, ...],
        tenants: list[str],
    ) -> Callable[..., Any]:
        async def check(request: Message, context: grpc.aio.ServicerContext) -> None:
            tenant = require_identity().tenant_id
            tenants.append(tenant)
            if tenant != OWNER.tenant_id and names_a_resource(request):
                await context.abort(grpc.StatusCode.NOT_FOUND, "not found")

        if client_streaming:

            async def upload(requests: AsyncIterator[Message], context: grpc.aio.ServicerContext) -> Message:
                await check(await anext(aiter(requests)), context)
                async for _ in requests:
                    pass
                return response

            return upload
        if server_streaming:

            async def watch(request: Message, context: grpc.aio.ServicerContext) -> AsyncIterator[Message]:
                await check(request, context)
                for message in streamed:
                    yield message

            return watch

        async def unary(request: Message, context: grpc.aio.ServicerContext) -> Message:
            await check(request, context)
            return response

        return unary


async def stored_turn_events(tenant_id: str, turn_id: str) -> list[tuple[bytes, dict[str, str]]]:
    # As the events stream keeps them: on the subject of the owner's tenant and turn.
    if (tenant_id, turn_id) != (OWNER.tenant_id, "turn-a"):
        return []
    final = ChatTurnEvent(turn_id=turn_id, sequence=0, kind=TurnEventKind.COMPLETED)
    return [(final.model_dump_json().encode(), token_headers(OWNER))]


def operations(openapi: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    # WeCom's callbacks take no token: WeCom's signature authenticates them, and another tenant's
    # application id gets the same 401 as a missing one (test_wecom.py walks them).
    return [
        (method.upper(), path, operation)
        for path, methods in openapi["paths"].items()
        if path != "/healthz" and path not in SIGNATURE_AUTHENTICATED_PATHS
        for method, operation in methods.items()
    ]


def concrete(path: str, token_id: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "token_id":
            return token_id
        assert name in PATH_IDS, f"give the walk a sample value for {name} ({path})"
        return PATH_IDS[name]

    return re.sub(r"\{(\w+)\}", value, path)


def names_owner_resource(method: str, path: str) -> bool:
    params = set(re.findall(r"\{(\w+)\}", path)) - NOT_A_RESOURCE
    return bool(params) or (method, path) in NAMES_A_RESOURCE_IN_ITS_BODY


@pytest.fixture
def tenants() -> list[str]:
    return []


async def walk(
    http: httpx.AsyncClient,
    ops: list[tuple[str, str, dict[str, Any]]],
    headers: dict[str, str],
    token_id: str,
) -> dict[tuple[str, str], httpx.Response]:
    answers = {}
    for method, path, operation in ops:
        body = BODIES.get((method, path), {})
        if "requestBody" in operation:
            assert body, f"give the walk a sample body for {method} {path}"
        answers[(method, path)] = await http.request(
            method, concrete(path, token_id), headers=headers, **body
        )
    return answers


async def test_every_route_refuses_no_token_and_hides_the_owners_resources_from_another_tenant(
    gateway: Any,
    serve: Any,
    client: Any,
    tokens: TokenService,
    applications: SqlApplicationStore,
    tenants: list[str],
    tmp_path: Path,
) -> None:
    peers = {
        name: TenantScoped(name, tenants)
        for name in ("ingestion", "retrieval", "modelhub", "conversation", "memory")
    }
    toolrunner = ToolRunnerClient(await serve("toolrunner", TenantScoped("toolrunner", tenants)))
    app = await gateway(
        **peers, toolrunner=toolrunner, local_identity=None, stored_turn_events=stored_turn_events
    )
    now = datetime.now(UTC)
    await applications.add(
        ApplicationRecord(
            id=PATH_IDS["application_id"],
            tenant_id=OWNER.tenant_id,
            name="owners-app",
            display_name="owners-app",
            platform=Platform.API_SERVICE,
            orchestrator_id="orchestrator-a",
            active=True,
            rate_limit_per_second=100.0,
            rate_limit_burst=100,
            created_by=OWNER.user_id,
            create_time=now,
            update_time=now,
        )
    )
    # The owner's finished evaluation run, in the gateway's database.
    evaluations = SqlEvaluationStore(f"sqlite+aiosqlite:///{tmp_path}/tokens.db")
    await evaluations.open()
    await evaluations.add(
        EvaluationRun(
            id=PATH_IDS["evaluation_id"],
            tenant_id=OWNER.tenant_id,
            knowledge_base_id=PATH_IDS["kb_id"],
            name="baseline",
            status=EvaluationStatus.COMPLETED,
            modes=(SearchMode.HYBRID,),
            created_by=OWNER.user_id,
            created_at=now,
            heartbeat_at=now,
            total=1,
            done=1,
            finished_at=now,
        ),
        [EvaluationQuery(0, "q1", "leave", {"handbook": 1})],
    )
    await evaluations.close()
    owner = (await tokens.issue(OWNER, Role.ADMIN, name="owner", ttl=timedelta(days=1))).token
    stranger = (await tokens.issue(STRANGER, Role.ADMIN, name="stranger", ttl=timedelta(days=1))).token
    owners_other_token = (await tokens.issue(OWNER, Role.MEMBER, name="ci", ttl=timedelta(days=1))).record.id
    ops = operations(app.openapi())
    assert len(ops) >= 35  # the walk covers the whole API, not an empty document

    async with client(app) as http:
        anonymous = await walk(http, ops, {}, owners_other_token)
        assert tenants == []  # nothing reached a service without a token
        foreign = await walk(http, ops, {"authorization": f"Bearer {stranger}"}, owners_other_token)
        assert set(tenants) == {STRANGER.tenant_id}  # every call carried the token's tenant
        tenants.clear()
        mine = await walk(
            http,
            # Deletions last: the owner's application (a real record) must still be there for its A2A agent.
            sorted((op for op in ops if op[:2] not in OWNER_SKIPS), key=lambda op: op[0] == "DELETE"),
            {"authorization": f"Bearer {owner}"},
            owners_other_token,
        )
        assert set(tenants) == {OWNER.tenant_id}

    wrong = {f"{m} {p}: {r.status_code}" for (m, p), r in anonymous.items() if r.status_code != 401}
    assert wrong == set(), "answered without a token"
    expected = {
        (m, p): REFUSED_AS_UNKNOWN.get((m, p)) or (404 if names_owner_resource(m, p) else "2xx")
        for m, p, _ in ops
    }
    got = {
        key: 404 if r.status_code == 404 else "2xx" if r.is_success else r.status_code
        for key, r in foreign.items()
    }
    assert got == expected, {
        f"{m} {p}": foreign[(m, p)].text[:200] for (m, p) in got if got[(m, p)] != expected[(m, p)]
    }
    assert {k: r.status_code for k, r in mine.items() if not r.is_success} == {}, (
        "the owner must get every route answered"
    )
