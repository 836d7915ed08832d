"""Agents and orchestrators through the gateway, against the conversation's real servicers
(``AgentServicer``, ``OrchestratorServicer``) on a real gRPC server with their SQL store on SQLite.

What a caller notices: an admin creates, reads, lists, changes and deletes agents and orchestrators; a
change touches only the fields sent and a list sent replaces the list; a taken or malformed name, a
config that does not fit its mode or names no agent of the tenant's is refused naming the field, and
nothing is saved; an agent an orchestrator runs cannot be deleted until it is removed from it; members
and read-only callers may read but not manage; another tenant sees none of it (404, empty lists).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from knowsphere_contracts.events import MAX_KNOWLEDGE_BASES_PER_TURN
from knowsphere_gateway.domain.tokens import Role, TokenService
from knowsphere_runtime.identity import Identity

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


async def bearer(tokens: TokenService, identity: Identity, role: Role) -> Headers:
    issued = await tokens.issue(identity, role, name=f"{role} of {identity.tenant_id}", ttl=timedelta(days=1))
    return {"authorization": f"Bearer {issued.token}"}


@pytest.fixture
async def api(
    gateway: Any, client: Any, tokens: TokenService, store: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, Headers]]]:
    """An HTTP client of the gateway over the real servicers, and the headers of each caller: the
    owner's ``admin``, ``member`` and ``reader``, and another tenant's admin (``stranger``)."""
    servicers = [conversation_api.AgentServicer(store), conversation_api.OrchestratorServicer(store)]
    app = await gateway(conversation=servicers, local_identity=None)
    callers = {
        "admin": await bearer(tokens, OWNER, Role.ADMIN),
        "member": await bearer(tokens, OWNER, Role.MEMBER),
        "reader": await bearer(tokens, OWNER, Role.READ_ONLY),
        "stranger": await bearer(tokens, STRANGER, Role.ADMIN),
    }
    async with client(app) as http:
        yield http, callers


async def create_agent(http: httpx.AsyncClient, headers: Headers, name: str, **fields: Any) -> dict[str, Any]:
    created = await http.post("/api/v1/agents", headers=headers, json={"name": name, **fields})
    assert created.status_code == 201, created.text
    agent: dict[str, Any] = created.json()
    return agent


# --- agents ---


async def test_an_agent_is_created_read_listed_changed_field_by_field_and_deleted(api: Any) -> None:
    http, who = api
    admin = who["admin"]
    agent = await create_agent(
        http,
        admin,
        "hr-helper",
        system_prompt="You are the HR desk of ACME.",
        model_parameters={"temperature": 0.2},
        knowledge_base_ids=["kb-hr", "kb-policies"],
        skill_names=["payslips"],
    )
    # The display name defaults to the name, and a new agent is usable unless said otherwise.
    assert (agent["display_name"], agent["active"]) == ("hr-helper", True)
    assert agent["model_parameters"] == {"temperature": 0.2, "max_tokens": None}
    assert (await http.get(f"/api/v1/agents/{agent['id']}", headers=admin)).json() == agent
    await create_agent(http, admin, "finance-helper")
    listed = (await http.get("/api/v1/agents", headers=admin)).json()
    assert [a["name"] for a in listed["agents"]] == ["finance-helper", "hr-helper"]
    first_page = (await http.get("/api/v1/agents", params={"page_size": 1}, headers=admin)).json()
    assert [a["name"] for a in first_page["agents"]] == ["finance-helper"]
    second_page = await http.get(
        "/api/v1/agents", params={"page_size": 1, "page_token": first_page["next_page_token"]}, headers=admin
    )
    assert [a["name"] for a in second_page.json()["agents"]] == ["hr-helper"]

    changed = await http.patch(
        f"/api/v1/agents/{agent['id']}",
        headers=admin,
        json={"knowledge_base_ids": ["kb-benefits"], "skill_names": [], "description": "Leave and pay"},
    )
    assert changed.status_code == 200, changed.text
    after = changed.json()
    assert after["knowledge_base_ids"] == ["kb-benefits"] and after["skill_names"] == []
    assert after["description"] == "Leave and pay"
    # What was not sent stays as it was.
    assert after["system_prompt"] == "You are the HR desk of ACME."
    assert after["model_parameters"] == agent["model_parameters"] and after["active"] is True
    assert (await http.get(f"/api/v1/agents/{agent['id']}", headers=admin)).json() == after
    # Model types: LLM unless said; VISION on top (its model is checked by the conversation service).
    assert agent["model_types"] == ["LLM"]
    seeing = await http.patch(
        f"/api/v1/agents/{agent['id']}", headers=admin, json={"model_types": ["LLM", "VISION"]}
    )
    assert seeing.status_code == 200 and seeing.json()["model_types"] == ["LLM", "VISION"], seeing.text
    odd = await http.patch(f"/api/v1/agents/{agent['id']}", headers=admin, json={"model_types": ["SMELL"]})
    assert odd.status_code == 422 and odd.json()["error"]["field"].startswith("model_types"), odd.text
    switched_off = await http.patch(f"/api/v1/agents/{agent['id']}", headers=admin, json={"active": False})
    assert switched_off.json()["active"] is False
    assert switched_off.json()["knowledge_base_ids"] == ["kb-benefits"]

    deleted = await http.delete(f"/api/v1/agents/{agent['id']}", headers=admin)
    assert deleted.status_code == 204
    gone = await http.get(f"/api/v1/agents/{agent['id']}", headers=admin)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
    assert (await http.delete(f"/api/v1/agents/{agent['id']}", headers=admin)).status_code == 404
    listed = (await http.get("/api/v1/agents", headers=admin)).json()
    assert [a["name"] for a in listed["agents"]] == ["finance-helper"]


async def test_a_taken_or_malformed_agent_is_refused_naming_the_field_and_nothing_is_saved(api: Any) -> None:
    http, who = api
    admin = who["admin"]
    await create_agent(http, admin, "hr-helper")
    other = await create_agent(http, admin, "finance-helper")

    duplicate = await http.post("/api/v1/agents", headers=admin, json={"name": "hr-helper"})
    assert duplicate.status_code == 409
    assert (
        duplicate.json()["error"]["field"] == "name"
        and "already exists" in duplicate.json()["error"]["message"]
    )
    renamed_onto = await http.patch(
        f"/api/v1/agents/{other['id']}", headers=admin, json={"name": "hr-helper"}
    )
    assert renamed_onto.status_code == 409 and renamed_onto.json()["error"]["field"] == "name"

    for body, field in (
        ({"name": "HR Helper"}, "name"),
        ({"name": "x"}, "name"),
        ({"name": "ok-name", "system_prompt": "x" * 20_001}, "system_prompt"),
        ({"name": "ok-name", "model_parameters": {"temperature": 3}}, "model_parameters.temperature"),
        (
            {
                "name": "ok-name",
                "knowledge_base_ids": [f"kb-{n}" for n in range(MAX_KNOWLEDGE_BASES_PER_TURN + 1)],
            },
            "knowledge_base_ids",
        ),
        ({"name": "ok-name", "tool_names": [""]}, "tool_names.0"),
        ({"name": "ok-name", "active": 1}, "active"),
        ({"name": "ok-name", "sytem_prompt": "typo"}, "sytem_prompt"),
    ):
        refused = await http.post("/api/v1/agents", headers=admin, json=body)
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["error"]["field"] == field, refused.json()
    bad_rename = await http.patch(f"/api/v1/agents/{other['id']}", headers=admin, json={"name": "Finance"})
    assert bad_rename.status_code == 422 and bad_rename.json()["error"]["field"] == "name"

    listed = (await http.get("/api/v1/agents", headers=admin)).json()
    assert [a["name"] for a in listed["agents"]] == ["finance-helper", "hr-helper"]
    assert (await http.get(f"/api/v1/agents/{other['id']}", headers=admin)).json()["name"] == "finance-helper"


async def test_members_and_readers_may_read_agents_but_only_admins_manage_them(api: Any) -> None:
    http, who = api
    agent = await create_agent(http, who["admin"], "hr-helper")
    path = f"/api/v1/agents/{agent['id']}"
    for role in ("member", "reader"):
        assert (await http.get(path, headers=who[role])).status_code == 200
        assert (await http.get("/api/v1/agents", headers=who[role])).status_code == 200
        refused = [
            await http.post("/api/v1/agents", headers=who[role], json={"name": "mine"}),
            await http.patch(path, headers=who[role], json={"description": "mine now"}),
            await http.delete(path, headers=who[role]),
        ]
        assert [r.status_code for r in refused] == [403, 403, 403], role
    assert (await http.get(path, headers=who["admin"])).json() == agent


async def test_another_tenants_agent_is_not_found_and_its_list_is_empty(api: Any) -> None:
    http, who = api
    agent = await create_agent(http, who["admin"], "hr-helper")
    path = f"/api/v1/agents/{agent['id']}"
    stranger = who["stranger"]
    answers = [
        await http.get(path, headers=stranger),
        await http.patch(path, headers=stranger, json={"description": "taken over"}),
        await http.delete(path, headers=stranger),
    ]
    assert [r.status_code for r in answers] == [404, 404, 404]
    assert (await http.get("/api/v1/agents", headers=stranger)).json()["agents"] == []
    # Its own agent of the same name is no conflict: names are unique per tenant.
    await create_agent(http, stranger, "hr-helper")
    assert (await http.get(path, headers=who["admin"])).json() == agent


# --- orchestrators ---


async def test_an_orchestrator_is_created_read_listed_changed_and_deleted(api: Any) -> None:
    http, who = api
    admin = who["admin"]
    hr = await create_agent(http, admin, "hr-helper")
    finance = await create_agent(http, admin, "finance-helper")

    created = await http.post(
        "/api/v1/orchestrators",
        headers=admin,
        json={"name": "hr-desk", "mode": "single", "config": {"agent_id": hr["id"]}},
    )
    assert created.status_code == 201, created.text
    desk = created.json()
    assert (desk["mode"], desk["config"], desk["member_agent_ids"]) == (
        "single",
        {"agent_id": hr["id"]},
        [hr["id"]],
    )
    assert (desk["display_name"], desk["active"]) == ("hr-desk", True)
    path = f"/api/v1/orchestrators/{desk['id']}"
    assert (await http.get(path, headers=admin)).json() == desk

    routes = {
        "routes": [{"condition": {"keywords": ["invoice", "expense"]}, "agent_id": finance["id"]}],
        "default_agent_id": hr["id"],
    }
    router = await http.post(
        "/api/v1/orchestrators",
        headers=admin,
        json={"name": "front-desk", "mode": "conditional", "config": routes},
    )
    assert router.status_code == 201, router.text
    assert router.json()["member_agent_ids"] == [finance["id"], hr["id"]]
    listed = (await http.get("/api/v1/orchestrators", headers=admin)).json()
    assert [o["name"] for o in listed["orchestrators"]] == ["front-desk", "hr-desk"]
    singles = (await http.get("/api/v1/orchestrators", params={"mode": "single"}, headers=admin)).json()
    assert [o["name"] for o in singles["orchestrators"]] == ["hr-desk"]
    unknown_mode = await http.get("/api/v1/orchestrators", params={"mode": "dispatcher"}, headers=admin)
    assert unknown_mode.status_code == 422 and unknown_mode.json()["error"]["field"] == "mode"

    described = await http.patch(path, headers=admin, json={"description": "HR questions"})
    assert described.status_code == 200, described.text
    assert described.json()["description"] == "HR questions"
    assert described.json()["config"] == {"agent_id": hr["id"]} and described.json()["mode"] == "single"
    # A new mode with its config: the members follow the config.
    switched = await http.patch(path, headers=admin, json={"mode": "conditional", "config": routes})
    assert switched.status_code == 200, switched.text
    assert switched.json()["mode"] == "conditional" and switched.json()["config"] == routes
    assert switched.json()["member_agent_ids"] == [finance["id"], hr["id"]]
    assert switched.json()["description"] == "HR questions"
    # A new mode whose config does not fit is refused; the orchestrator stays as it was.
    misfit = await http.patch(path, headers=admin, json={"mode": "single"})
    assert misfit.status_code == 400 and misfit.json()["error"]["field"].startswith("config")
    assert (await http.get(path, headers=admin)).json() == switched.json()

    assert (await http.delete(path, headers=admin)).status_code == 204
    assert (await http.get(path, headers=admin)).status_code == 404
    assert (await http.delete(path, headers=admin)).status_code == 404
    listed = (await http.get("/api/v1/orchestrators", headers=admin)).json()
    assert [o["name"] for o in listed["orchestrators"]] == ["front-desk"]


async def test_an_agent_an_orchestrator_runs_cannot_be_deleted_until_it_is_removed(api: Any) -> None:
    http, who = api
    admin = who["admin"]
    hr = await create_agent(http, admin, "hr-helper")
    other = await create_agent(http, admin, "other-helper")
    desk = (
        await http.post(
            "/api/v1/orchestrators",
            headers=admin,
            json={"name": "hr-desk", "mode": "single", "config": {"agent_id": hr["id"]}},
        )
    ).json()

    refused = await http.delete(f"/api/v1/agents/{hr['id']}", headers=admin)
    assert refused.status_code == 409
    assert refused.json()["error"]["field"] == "agent_id" and "hr-desk" in refused.json()["error"]["message"]
    assert (await http.get(f"/api/v1/agents/{hr['id']}", headers=admin)).status_code == 200

    # The config moves to another agent and the member list is replaced ([] = none besides the config's).
    moved = await http.patch(
        f"/api/v1/orchestrators/{desk['id']}",
        headers=admin,
        json={"config": {"agent_id": other["id"]}, "member_agent_ids": []},
    )
    assert moved.status_code == 200, moved.text
    assert moved.json()["member_agent_ids"] == [other["id"]]
    assert (await http.delete(f"/api/v1/agents/{hr['id']}", headers=admin)).status_code == 204


async def test_a_config_that_does_not_fit_its_mode_is_refused_naming_the_field(api: Any) -> None:
    http, who = api
    admin = who["admin"]
    hr = await create_agent(http, admin, "hr-helper")
    idle = await create_agent(http, admin, "idle-helper", active=False)

    refused_by_the_service: list[tuple[dict[str, Any], str, str]] = [
        ({"mode": "single", "config": {}}, "config.agent_id", "required"),
        ({"mode": "single", "config": {"agent_id": "no-such-agent"}}, "config.agent_id", "no agent"),
        ({"mode": "single", "config": {"agent_id": idle["id"]}}, "config.agent_id", "not active"),
        ({"mode": "single", "config": {"agent": hr["id"]}}, "config.agent", "unknown key"),
        (
            {
                "mode": "conditional",
                "config": {"routes": [{"condition": {}, "agent_id": hr["id"]}], "default_agent_id": hr["id"]},
            },
            "config.routes[0].condition",
            "exactly one",
        ),
    ]
    for body, field, words in refused_by_the_service:
        refused = await http.post("/api/v1/orchestrators", headers=admin, json={"name": "desk", **body})
        assert refused.status_code == 400, (body, refused.text)
        error = refused.json()["error"]
        assert error["field"] == field and words in error["message"], error

    refused_by_the_gateway: list[tuple[dict[str, Any], str]] = [
        ({"mode": "dispatcher", "config": {"agent_id": hr["id"]}}, "mode"),
        ({"config": {"agent_id": hr["id"]}}, "mode"),
        ({"mode": "single", "config": {"agent_id": hr["id"], "notes": "x" * 70_000}}, "config"),
        ({"mode": "single", "config": {"agent_id": hr["id"], "big": 10**400}}, "config"),
        ({"mode": "single", "config": ["not", "an", "object"]}, "config"),
    ]
    for body, field in refused_by_the_gateway:
        refused = await http.post("/api/v1/orchestrators", headers=admin, json={"name": "desk", **body})
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["error"]["field"] == field, refused.json()

    # An external orchestrator's configuration is checked like any other mode's, naming the field.
    external = await http.post(
        "/api/v1/orchestrators",
        headers=admin,
        json={"name": "desk", "mode": "external", "config": {"integration_type": "dify"}},
    )
    assert external.status_code == 400 and external.json()["error"]["field"] == "config.integration_type"
    assert (await http.get("/api/v1/orchestrators", headers=admin)).json()["orchestrators"] == []


async def test_another_tenants_orchestrator_is_not_found_and_its_agents_cannot_be_named(api: Any) -> None:
    http, who = api
    hr = await create_agent(http, who["admin"], "hr-helper")
    desk = (
        await http.post(
            "/api/v1/orchestrators",
            headers=who["admin"],
            json={"name": "hr-desk", "mode": "single", "config": {"agent_id": hr["id"]}},
        )
    ).json()
    path = f"/api/v1/orchestrators/{desk['id']}"
    stranger = who["stranger"]
    answers = [
        await http.get(path, headers=stranger),
        await http.patch(path, headers=stranger, json={"description": "taken over"}),
        await http.delete(path, headers=stranger),
    ]
    assert [r.status_code for r in answers] == [404, 404, 404]
    assert (await http.get("/api/v1/orchestrators", headers=stranger)).json()["orchestrators"] == []
    # The owner's agent is no agent to another tenant: refused like one that does not exist.
    borrowed = await http.post(
        "/api/v1/orchestrators",
        headers=stranger,
        json={"name": "my-desk", "mode": "single", "config": {"agent_id": hr["id"]}},
    )
    assert borrowed.status_code == 400 and borrowed.json()["error"]["field"] == "config.agent_id"
    assert "no agent" in borrowed.json()["error"]["message"]
    # Readers may look but not manage.
    assert (await http.get(path, headers=who["reader"])).json() == desk
    assert (await http.delete(path, headers=who["member"])).status_code == 403
    assert (await http.get(path, headers=who["admin"])).json() == desk
