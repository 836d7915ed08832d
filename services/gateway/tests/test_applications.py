"""Applications through the gateway, against the conversation's real servicers (agents, orchestrators,
sessions) on a real gRPC server over their SQL store on SQLite, with chat turns on FastStream's
in-memory broker and a stand-in conversation that records each request and completes it at once.

What a caller notices: an admin creates, reads, lists, changes and deletes applications; an
orchestrator the tenant does not have is refused naming ``orchestrator_id``, a name taken naming
``name``, a WeCom platform without MASTER_KEY naming ``platform_config``; another tenant sees none of
it; a token is made for an application of the tenant only; with an application's token a turn without
a session, a new session and an OpenAI-style completion run the application's orchestrator,
``/v1/models`` lists the application, and the application's own rate limit applies to all its tokens
together; a switched-off application's tokens are refused with 403; deleting an application revokes
its tokens.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from faststream.nats import NatsBroker, TestNatsBroker

from knowsphere_contracts.events import ChatRequested, ChatTurnEvent, TurnEventKind
from knowsphere_gateway.api.bus import build_bus
from knowsphere_gateway.api.openai_wire import DEFAULT_MODEL
from knowsphere_gateway.domain.limits import DEFAULT_LIMITS
from knowsphere_gateway.domain.tokens import Role, TokenService
from knowsphere_runtime.bus import Fanout, build_broker
from knowsphere_runtime.identity import Identity, require_identity
from knowsphere_runtime.streams import CHAT_REQUESTS

# The conversation service's own code, served as the gateway's peer: a gateway-only install skips.
conversation_api = pytest.importorskip(
    "knowsphere_conversation.api.grpc", reason="the conversation service is not installed"
)
sessions_sql = pytest.importorskip("knowsphere_conversation.adapters.sessions_sql")

OWNER, STRANGER = Identity("acme", "alice"), Identity("globex", "mallory")
Headers = dict[str, str]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Any]:
    sessions = sessions_sql.SqlSessionStore(f"sqlite+aiosqlite:///{tmp_path}/conversation.db")
    await sessions.open()
    yield sessions
    await sessions.close()


@asynccontextmanager
async def answering_bus() -> AsyncIterator[tuple[Any, Fanout[ChatTurnEvent], list[ChatRequested]]]:
    """The gateway's bus on a test broker with a conversation stand-in that records each request and
    completes its turn at once."""
    broker: NatsBroker = build_broker("nats://unused:4222", client_name="test")
    events: Fanout[ChatTurnEvent] = Fanout()
    bus = build_bus(events)
    broker.include_router(bus.router)
    requests: list[ChatRequested] = []

    @broker.subscriber(ChatRequested.subject, stream=CHAT_REQUESTS)
    async def conversation(request: ChatRequested) -> None:
        requests.append(request)
        done = ChatTurnEvent(
            turn_id=request.turn_id, sequence=0, kind=TurnEventKind.COMPLETED, text="Twenty days."
        )
        await broker.publish(
            done.model_dump(mode="json"),
            subject=ChatTurnEvent.subject_for(require_identity().tenant_id, done.turn_id),
        )

    async with TestNatsBroker(broker):
        yield bus, events, requests


async def bearer(tokens: TokenService, identity: Identity, role: Role, application_id: str = "") -> Headers:
    issued = await tokens.issue(
        identity,
        role,
        name=f"{role} of {identity.tenant_id}",
        ttl=timedelta(days=1),
        application_id=application_id,
    )
    return {"authorization": f"Bearer {issued.token}"}


class Api:
    """An HTTP client of the gateway, the callers' headers, and the chat requests the bus carried."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        who: dict[str, Headers],
        tokens: TokenService,
        chats: list[ChatRequested],
    ) -> None:
        self.http, self.who, self.tokens, self.chats = http, who, tokens, chats

    async def orchestrator(self, name: str = "hr-desk", headers: Headers | None = None) -> str:
        """A new single-agent orchestrator of the caller's tenant (the owner's admin by default)."""
        headers = headers or self.who["admin"]
        agent = await self.http.post("/api/v1/agents", headers=headers, json={"name": f"{name}-agent"})
        assert agent.status_code == 201, agent.text
        created = await self.http.post(
            "/api/v1/orchestrators",
            headers=headers,
            json={"name": name, "mode": "single", "config": {"agent_id": agent.json()["id"]}},
        )
        assert created.status_code == 201, created.text
        orchestrator_id: str = created.json()["id"]
        return orchestrator_id

    async def application(self, name: str, orchestrator_id: str, **fields: Any) -> dict[str, Any]:
        body = {"name": name, "platform": "api_service", "orchestrator_id": orchestrator_id, **fields}
        created = await self.http.post("/api/v1/applications", headers=self.who["admin"], json=body)
        assert created.status_code == 201, created.text
        application: dict[str, Any] = created.json()
        return application

    async def token_for(self, application_id: str, role: Role = Role.MEMBER) -> Headers:
        return await bearer(self.tokens, OWNER, role, application_id)


@pytest.fixture
async def api(gateway: Any, client: Any, tokens: TokenService, store: Any) -> AsyncIterator[Api]:
    servicers = [
        conversation_api.AgentServicer(store),
        conversation_api.OrchestratorServicer(store),
        conversation_api.ConversationServicer(store, _no_history, _no_cancel, _no_forget, bindings=store),
    ]
    async with answering_bus() as (bus, events, chats):
        app = await gateway(conversation=servicers, local_identity=None, bus=bus, chat_events=events)
        callers = {
            "admin": await bearer(tokens, OWNER, Role.ADMIN),
            "member": await bearer(tokens, OWNER, Role.MEMBER),
            "reader": await bearer(tokens, OWNER, Role.READ_ONLY),
            "stranger": await bearer(tokens, STRANGER, Role.ADMIN),
        }
        async with client(app) as http:
            yield Api(http, callers, tokens, chats)


async def _no_history(thread: str) -> list[Any]:
    return []


async def _no_cancel(turn_id: str) -> bool:
    return False


async def _no_forget(thread: str, session_id: str) -> None:
    return None


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


# --- managing applications ---


async def test_an_application_is_created_read_listed_changed_and_deleted(api: Api) -> None:
    http, admin = api.http, api.who["admin"]
    desk = await api.orchestrator()
    app = await api.application("hr-portal", desk)
    # The display name defaults to the name, the rate limit to the per-caller one.
    assert (app["display_name"], app["platform"], app["orchestrator_id"], app["active"]) == (
        "hr-portal",
        "api_service",
        desk,
        True,
    )
    assert (app["rate_limit_per_second"], app["rate_limit_burst"]) == (
        DEFAULT_LIMITS.caller_rate_limit_per_second,
        DEFAULT_LIMITS.caller_rate_limit_burst,
    )
    path = f"/api/v1/applications/{app['id']}"
    assert (await http.get(path, headers=admin)).json() == app
    await api.application("finance-portal", desk, platform="webclient", rate_limit_per_second=2.5)
    listed = (await http.get("/api/v1/applications", headers=api.who["reader"])).json()
    assert [a["name"] for a in listed["applications"]] == ["finance-portal", "hr-portal"]

    other = await api.orchestrator("front-desk")
    changed = await http.patch(
        path, headers=admin, json={"orchestrator_id": other, "rate_limit_burst": 7, "display_name": "HR"}
    )
    assert changed.status_code == 200, changed.text
    after = changed.json()
    assert (after["orchestrator_id"], after["rate_limit_burst"], after["display_name"]) == (other, 7, "HR")
    assert after["name"] == "hr-portal" and after["rate_limit_per_second"] == app["rate_limit_per_second"]
    assert (await http.get(path, headers=admin)).json() == after

    taken = await http.patch(path, headers=admin, json={"name": "finance-portal"})
    assert taken.status_code == 409 and error_of(taken)["field"] == "name"
    again = await http.post(
        "/api/v1/applications",
        headers=admin,
        json={"name": "hr-portal", "platform": "webclient", "orchestrator_id": desk},
    )
    assert again.status_code == 409 and error_of(again)["field"] == "name"

    assert (await http.delete(path, headers=admin)).status_code == 204
    assert (await http.get(path, headers=admin)).status_code == 404
    assert (await http.delete(path, headers=admin)).status_code == 404


async def test_members_and_readers_may_read_but_not_manage_applications(api: Api) -> None:
    app = await api.application("hr-portal", await api.orchestrator())
    path = f"/api/v1/applications/{app['id']}"
    for role in ("member", "reader"):
        headers = api.who[role]
        assert (await api.http.get(path, headers=headers)).status_code == 200
        refused = [
            await api.http.post(
                "/api/v1/applications",
                headers=headers,
                json={"name": "x-portal", "platform": "webclient", "orchestrator_id": app["orchestrator_id"]},
            ),
            await api.http.patch(path, headers=headers, json={"active": False}),
            await api.http.delete(path, headers=headers),
        ]
        assert [r.status_code for r in refused] == [403, 403, 403]
    assert (await api.http.get(path, headers=api.who["admin"])).json() == app


async def test_an_orchestrator_the_tenant_does_not_have_is_refused_naming_the_field(api: Api) -> None:
    http, admin = api.http, api.who["admin"]
    theirs = await api.orchestrator("their-desk", headers=api.who["stranger"])
    for orchestrator_id in ("no-such-orchestrator", theirs):
        refused = await http.post(
            "/api/v1/applications",
            headers=admin,
            json={"name": "hr-portal", "platform": "webclient", "orchestrator_id": orchestrator_id},
        )
        assert refused.status_code == 400, refused.text
        assert error_of(refused)["field"] == "orchestrator_id"
        assert orchestrator_id in error_of(refused)["message"]
    assert (await http.get("/api/v1/applications", headers=admin)).json() == {"applications": []}

    app = await api.application("hr-portal", await api.orchestrator())
    path = f"/api/v1/applications/{app['id']}"
    moved = await http.patch(path, headers=admin, json={"orchestrator_id": theirs})
    assert moved.status_code == 400 and error_of(moved)["field"] == "orchestrator_id"
    assert (await http.get(path, headers=admin)).json() == app  # nothing changed


async def test_wework_platforms_need_master_key(api: Api) -> None:
    # This gateway has no MASTER_KEY: a WeCom application's secrets could not be stored encrypted (the
    # channels themselves are tested in test_wecom.py, with a key).
    desk = await api.orchestrator()
    for platform in ("wework_aibot", "wework_traditional"):
        refused = await api.http.post(
            "/api/v1/applications",
            headers=api.who["admin"],
            json={"name": "bot", "platform": platform, "orchestrator_id": desk},
        )
        assert refused.status_code == 503, refused.text
        assert error_of(refused)["field"] == "platform_config"
        assert "MASTER_KEY is not configured" in error_of(refused)["message"]
    app = await api.application("hr-portal", desk)
    moved = await api.http.patch(
        f"/api/v1/applications/{app['id']}", headers=api.who["admin"], json={"platform": "wework_aibot"}
    )
    assert moved.status_code == 503 and error_of(moved)["field"] == "platform_config"


async def test_another_tenant_sees_no_application_of_the_owner(api: Api) -> None:
    http, stranger = api.http, api.who["stranger"]
    desk = await api.orchestrator()
    app = await api.application("hr-portal", desk)
    path = f"/api/v1/applications/{app['id']}"
    answers = [
        await http.get(path, headers=stranger),
        await http.patch(path, headers=stranger, json={"active": False}),
        await http.delete(path, headers=stranger),
    ]
    assert [a.status_code for a in answers] == [404, 404, 404]
    assert (await http.get("/api/v1/applications", headers=stranger)).json() == {"applications": []}
    # The owner's orchestrator reads as one that never was.
    borrowed = await http.post(
        "/api/v1/applications",
        headers=stranger,
        json={"name": "hr-portal", "platform": "webclient", "orchestrator_id": desk},
    )
    assert borrowed.status_code == 400 and error_of(borrowed)["field"] == "orchestrator_id"
    # A token for the owner's application cannot be made.
    token = await http.post(
        "/api/v1/tokens", headers=stranger, json={"name": "ci", "role": "member", "application_id": app["id"]}
    )
    assert token.status_code == 400 and error_of(token)["field"] == "application_id"
    assert (await http.get(path, headers=api.who["admin"])).json() == app


# --- tokens of an application ---


async def test_a_token_is_made_for_an_application_of_the_tenant_only(api: Api) -> None:
    http, admin = api.http, api.who["admin"]
    app = await api.application("hr-portal", await api.orchestrator())
    made = await http.post(
        "/api/v1/tokens",
        headers=admin,
        json={"name": "portal", "role": "member", "application_id": app["id"]},
    )
    assert made.status_code == 201, made.text
    assert made.json()["info"]["application_id"] == app["id"]
    unknown = await http.post(
        "/api/v1/tokens", headers=admin, json={"name": "x", "role": "member", "application_id": "app_nope"}
    )
    assert unknown.status_code == 400 and error_of(unknown)["field"] == "application_id"
    # The new token works, as the application.
    headers = {"authorization": f"Bearer {made.json()['token']}"}
    assert (await http.get("/v1/models", headers=headers)).json()["data"][0]["id"] == "hr-portal"


async def test_a_turn_with_an_applications_token_runs_its_orchestrator(api: Api) -> None:
    http = api.http
    desk = await api.orchestrator()
    app = await api.application("hr-portal", desk)
    portal = await api.token_for(app["id"])

    answered = await http.post("/api/v1/chat/turns", headers=portal, json={"message": "How long is leave?"})
    assert answered.status_code == 200, answered.text
    assert "completed" in answered.text
    assert [(c.orchestrator_id, c.agent_id) for c in api.chats] == [(desk, "")]
    # Another caller's turn runs the default agent, as before.
    await http.post("/api/v1/chat/turns", headers=api.who["member"], json={"message": "hi"})
    assert api.chats[-1].orchestrator_id == ""

    # A session made with the application's token is the application's and runs its orchestrator.
    session = await http.post("/api/v1/sessions", headers=portal, json={"title": "leave"})
    assert session.status_code == 201, session.text
    assert (session.json()["application_id"], session.json()["orchestrator_id"]) == (app["id"], desk)
    # A turn in it leaves the orchestrator to the session.
    await http.post(
        "/api/v1/chat/turns",
        headers=portal,
        json={"message": "and sick leave?", "session_id": session.json()["id"]},
    )
    assert (api.chats[-1].session_id, api.chats[-1].orchestrator_id) == (session.json()["id"], "")
    other = await api.orchestrator("front-desk")
    refused = await http.post("/api/v1/sessions", headers=portal, json={"orchestrator_id": other})
    assert refused.status_code == 400 and error_of(refused)["field"] == "orchestrator_id"


async def test_the_openai_api_lists_applications_and_runs_their_orchestrator(api: Api) -> None:
    http, member = api.http, api.who["member"]
    desk = await api.orchestrator()
    app = await api.application("hr-portal", desk, display_name="HR portal")
    await api.application("old-portal", desk, active=False)
    question = {"messages": [{"role": "user", "content": "How long is leave?"}]}

    models = (await http.get("/v1/models", headers=member)).json()["data"]
    cards = {m["id"]: m for m in models}
    assert cards["hr-portal"]["application_id"] == app["id"]
    assert cards["hr-portal"]["display_name"] == "HR portal"
    assert "old-portal" not in cards  # switched off
    assert "hr-desk-agent" in cards and DEFAULT_MODEL in cards  # agents as before

    completion = await http.post(
        "/v1/chat/completions", headers=member, json={"model": "hr-portal", **question}
    )
    assert completion.status_code == 200, completion.text
    assert completion.json()["choices"][0]["message"]["content"] == "Twenty days."
    assert completion.json()["model"] == "hr-portal"
    assert (api.chats[-1].orchestrator_id, api.chats[-1].agent_id) == (desk, "")
    off = await http.post("/v1/chat/completions", headers=member, json={"model": "old-portal", **question})
    assert off.status_code == 404 and off.json()["error"]["param"] == "model"

    portal = await api.token_for(app["id"])
    assert [m["id"] for m in (await http.get("/v1/models", headers=portal)).json()["data"]] == ["hr-portal"]
    mine = await http.post("/v1/chat/completions", headers=portal, json={"model": "hr-portal", **question})
    assert mine.status_code == 200, mine.text
    assert api.chats[-1].orchestrator_id == desk
    for model in (DEFAULT_MODEL, "hr-desk-agent", "old-portal"):
        refused = await http.post("/v1/chat/completions", headers=portal, json={"model": model, **question})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "model"
    assert len(api.chats) == 2  # nothing refused reached the bus


# --- limits, switching off, deleting ---


async def test_an_applications_rate_limit_is_shared_by_its_tokens(api: Api) -> None:
    http = api.http
    app = await api.application(
        "hr-portal", await api.orchestrator(), rate_limit_per_second=0.01, rate_limit_burst=2
    )
    first, second = await api.token_for(app["id"]), await api.token_for(app["id"])
    assert (await http.get("/api/v1/applications", headers=first)).status_code == 200
    assert (await http.get("/api/v1/applications", headers=second)).status_code == 200
    over = await http.get("/api/v1/applications", headers=first)
    assert over.status_code == 429, over.text
    assert int(over.headers["retry-after"]) >= 1
    assert "application hr-portal" in error_of(over)["message"]
    assert "rate_limit_per_second" in error_of(over)["message"]
    assert (await http.get("/v1/models", headers=second)).status_code == 429  # OpenAI routes too
    # The owner's other callers have their own limits.
    assert (await http.get("/api/v1/applications", headers=api.who["member"])).status_code == 200


async def test_a_switched_off_applications_tokens_are_refused(api: Api) -> None:
    http, admin = api.http, api.who["admin"]
    app = await api.application("hr-portal", await api.orchestrator())
    portal = await api.token_for(app["id"])
    path = f"/api/v1/applications/{app['id']}"
    assert (await http.patch(path, headers=admin, json={"active": False})).json()["active"] is False
    refused = await http.post("/api/v1/chat/turns", headers=portal, json={"message": "hi"})
    assert refused.status_code == 403
    assert "hr-portal is switched off" in error_of(refused)["message"]
    openai_refused = await http.get("/v1/models", headers=portal)
    assert openai_refused.status_code == 403 and "switched off" in openai_refused.json()["error"]["message"]
    assert api.chats == []
    await http.patch(path, headers=admin, json={"active": True})
    assert (await http.get("/v1/models", headers=portal)).status_code == 200


async def test_deleting_an_application_revokes_its_tokens(api: Api) -> None:
    http, admin = api.http, api.who["admin"]
    app = await api.application("hr-portal", await api.orchestrator())
    made = await http.post(
        "/api/v1/tokens",
        headers=admin,
        json={"name": "portal", "role": "member", "application_id": app["id"]},
    )
    portal = {"authorization": f"Bearer {made.json()['token']}"}
    assert (await http.get("/v1/models", headers=portal)).status_code == 200

    assert (await http.delete(f"/api/v1/applications/{app['id']}", headers=admin)).status_code == 204
    refused = await http.get("/v1/models", headers=portal)
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
    listed = (await http.get(f"/api/v1/tokens/{made.json()['info']['id']}", headers=admin)).json()
    assert listed["revoke_time"] is not None
    # Other tokens of the tenant are untouched.
    assert (await http.get("/v1/models", headers=api.who["member"])).status_code == 200
    assert json.loads((await http.get("/api/v1/applications", headers=admin)).text) == {"applications": []}
