"""The ``ks`` command-line client, run as the installed console script against the running stack.

Local single-user mode (no token, as after `make up`) for knowledge bases; a tenant of its own, reached
with an API token, for ingestion, questions answered by the scripted chat model, models and tokens; and
another for agents and an orchestrator that routes questions between them.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "services" / "modelhub" / "tests"))
from scripted_provider import (
    Recorded,
    Reply,
    ScriptedProvider,
    openai_decision,
    openai_text_stream,
    openai_tool_call_stream,
)

pytestmark = pytest.mark.e2e

KS = Path(sys.executable).with_name("ks")
# A question's turn goes through the graph and retrieval; the ingestion of a small folder runs the
# whole workflow on a cold worker.
KS_TIMEOUT_SECONDS = 240
HANDBOOK = (
    "# Employee handbook\n\n## Annual leave\n\n"
    "Every employee gets 27 days of paid annual leave per calendar year. "
    "Unused leave can be carried over until the end of March.\n\n## Expenses\n\n"
    "Taxi rides are reimbursed only after 22:00 or when carrying equipment.\n"
)
TRAVEL = "# Travel\n\nTrain journeys under four hours are booked in second class.\n"


@dataclass
class Ks:
    """Runs ``ks`` as a user would, with only the environment given (no KS_* of the test runner)."""

    url: str
    config: Path

    def __call__(
        self,
        *args: str,
        token: str | None = None,
        url: str | None = None,
        url_from_env: bool = True,
        typed: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``typed``: what the user types at the prompt (stdin)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("KS_")}
        env["KS_CONFIG"] = str(self.config)
        env["COLUMNS"] = "200"  # tables unwrapped, as on a wide terminal
        if url_from_env:
            env["KS_URL"] = url or self.url
        if token:
            env["KS_TOKEN"] = token
        return subprocess.run(
            [str(KS), *args],
            env=env,
            input=typed,
            capture_output=True,
            text=True,
            timeout=KS_TIMEOUT_SECONDS,
            check=False,
        )


@pytest.fixture
def ks(stack: Any, tmp_path: Path) -> Ks:
    return Ks(stack.gateway_url, tmp_path / "knowsphere" / "config.toml")


def tenant_admin_token(stack: Any) -> str:
    """An admin token of a new tenant of its own, made through the authenticating proxy's headers."""
    headers = {
        "x-ks-proxy-secret": stack.config.extra_env["KS_GATEWAY_PROXY_SECRET"],
        "x-ks-tenant-id": f"cli{uuid.uuid4().hex[:8]}",
        "x-ks-user-id": "alice",
        "x-ks-role": "admin",
    }
    created = httpx.post(
        f"{stack.gateway_url}/api/v1/tokens", headers=headers, json={"name": "cli tests", "role": "admin"}
    )
    assert created.status_code == 201, created.text
    token: str = created.json()["token"]
    return token


@pytest.fixture(scope="module")
def admin_token(stack: Any) -> str:
    return tenant_admin_token(stack)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def refused(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """The one-line error a refused command prints on stderr."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_knowledge_bases_in_local_mode_need_no_token(ks: Ks) -> None:
    assert "(none: local mode)" in ok(ks("config", "show"))
    name = f"cli-local-{uuid.uuid4().hex[:6]}"
    created = ok(ks("kb", "create", name, "--description", "from the CLI"))
    kb_id = created.strip().rsplit(" ", 1)[-1]
    listed = json.loads(ok(ks("kb", "list", "--json")))
    assert [kb["name"] for kb in listed if kb["id"] == kb_id] == [name]
    assert name in ok(ks("kb", "list"))
    assert f"deleted knowledge base {name}" in ok(ks("kb", "delete", name, "--yes"))
    assert kb_id not in ok(ks("kb", "list"))
    assert "no knowledge base with the id or name" in refused(ks("kb", "delete", name, "--yes"))


def test_a_folder_is_ingested_with_failures_listed_and_a_question_cites_its_file(
    ks: Ks, admin_token: str, model_server: ScriptedProvider, tmp_path: Path
) -> None:
    def model(request: Recorded) -> Reply:
        decision = openai_decision("E", request.json)  # kb_search
        if decision is not None:
            return decision
        if request.json["messages"][-1]["role"] == "tool":
            return openai_text_stream(["Employees get 27 days", " of paid leave a year [[c1]]."])
        return openai_tool_call_stream("doc_retrieval", {"query": "annual leave days"})

    model_server.reset()
    model_server.respond("/v1/chat/completions", model)
    added = ok(
        ks(
            "models", "add", "--provider", "custom", "--model", "scripted-chat", "--type", "knowledge_qa",
            "--base-url", f"{model_server.url}/v1", "--api-key", "sk-cli-scripted-0001", "--default",
            token=admin_token,
        )
    )  # fmt: skip
    assert "default for knowledge_qa" in added
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "handbook.md").write_text(HANDBOOK)
    (folder / "travel.md").write_text(TRAVEL)
    (folder / "diagram.xyz").write_bytes(b"\x00\x01 not a document")
    (folder / ".hidden.md").write_text("never uploaded")
    name = f"handbook-{uuid.uuid4().hex[:6]}"
    ok(ks("kb", "create", name, token=admin_token))

    ingested = ks("ingest", name, str(folder), token=admin_token)
    assert ingested.returncode == 1, (ingested.stdout, ingested.stderr)  # one file failed
    out = ingested.stdout
    assert "3 files: 2 ready, 1 failed" in out, (out, ingested.stderr)
    assert "ready  docs/handbook.md" in out and "ready  docs/travel.md" in out, out
    [failure] = [line for line in out.splitlines() if "docs/diagram.xyz" in line and "refused" not in line]
    assert "xyz" in failure.split("docs/diagram.xyz", 1)[1], out  # the reason names the type
    assert ".hidden" not in out

    asked = ks("ask", name, "How many days of annual leave do employees get?", token=admin_token)
    answer = ok(asked)
    assert answer.startswith("Employees get 27 days of paid leave a year [[c1]].\n"), answer
    [source] = answer.split("Sources:\n", 1)[1].splitlines()
    assert source.strip().startswith("[c1] handbook.md"), answer  # markdown has no pages

    # An interactive chat: two questions in one session, then /exit.
    chatted = ks(
        "chat",
        "--kb",
        name,
        token=admin_token,
        typed="How many days of annual leave?\nAnd for part-time staff?\n/exit\n",
    )
    transcript = ok(chatted)
    assert transcript.count("Employees get 27 days of paid leave a year [[c1]].") == 2, transcript
    assert "handbook.md" in transcript, transcript
    session = chatted.stderr.split("session ", 1)[1].split(";", 1)[0]
    history = httpx.get(
        f"{ks.url}/api/v1/sessions/{session}/messages",
        headers={"Authorization": f"Bearer {admin_token}"},
        timeout=30,
    )
    assert history.status_code == 200, history.text
    newest_first = [(m["role"], m["content"][0]["text"]) for m in history.json()["messages"]]
    assert [role for role, _ in newest_first] == ["assistant", "user", "assistant", "user"], history.text
    assert [text for role, text in newest_first if role == "user"] == [
        "And for part-time staff?",
        "How many days of annual leave?",
    ]

    # The same folder again: nothing new is stored, and the answer counts stay the same.
    again = ks("ingest", name, str(folder / "handbook.md"), token=admin_token)
    assert "1 file: 1 ready, 0 failed" in ok(again)
    listed = json.loads(ok(ks("kb", "list", "--json", token=admin_token)))
    assert [kb["document_count"] for kb in listed if kb["name"] == name] == [2]

    assert "no knowledge base with the id or name 'missing'" in refused(
        ks("ask", "missing", "?", token=admin_token)
    )


def test_tokens_are_created_listed_and_revoked_and_a_bad_token_is_one_clear_line(
    ks: Ks, admin_token: str
) -> None:
    name = f"cli-member-{uuid.uuid4().hex[:6]}"
    created = ks("token", "create", name, "--role", "member", token=admin_token)
    member = ok(created).strip()
    assert member.startswith("ks_") and "\n" not in member  # the token alone on stdout
    assert "shown only now" in created.stderr
    [info] = [
        t for t in json.loads(ok(ks("token", "list", "--json", token=admin_token))) if t["name"] == name
    ]
    assert info["role"] == "member" and info["revoke_time"] is None
    assert name in ok(ks("token", "list", token=admin_token))

    ok(ks("kb", "list", token=member))
    forbidden = refused(ks("token", "list", token=member))
    assert forbidden.startswith("error: 403 permission_denied:") and "admin" in forbidden

    assert f"revoked token {info['id']}" in ok(ks("token", "revoke", info["id"], token=admin_token))
    revoked = refused(ks("kb", "list", token=member))
    assert revoked == f"error: 401 unauthenticated: the token {info['id']} has been revoked"
    assert (
        refused(ks("kb", "list", token="ks_" + "x" * 43))
        == "error: 401 unauthenticated: the token is not known"
    )

    wrong_role = refused(ks("token", "create", "x", "--role", "owner", token=admin_token))
    assert wrong_role.startswith("error: 422 ") and "role: Input should be" in wrong_role, wrong_role
    assert refused(ks("token", "revoke", "tok_missing", token=admin_token)) == (
        "error: 404 not_found: token tok_missing not found"
    )


def test_the_config_file_keeps_url_and_token_readable_by_its_owner_only(
    ks: Ks, admin_token: str, stack: Any
) -> None:
    assert ks("config", "set", "url", "ftp://nowhere").returncode == 2
    ok(ks("config", "set", "url", stack.gateway_url))
    ok(ks("login", "--token", admin_token, url_from_env=False))
    assert stat.S_IMODE(ks.config.stat().st_mode) == 0o600
    assert stat.S_IMODE(ks.config.parent.stat().st_mode) == 0o700
    shown = ok(ks("config", "show", url_from_env=False))
    assert admin_token not in shown and admin_token[-4:] in shown
    # With no KS_URL or KS_TOKEN, the file's token is used: the tenant's token list answers.
    assert "cli tests" in ok(ks("token", "list", url_from_env=False))

    unreachable = refused(ks("kb", "list", url="http://127.0.0.1:9"), code=3)
    assert "cannot reach the gateway at http://127.0.0.1:9" in unreachable
    assert refused(ks("login", "--token", "ks_" + "y" * 43, url_from_env=False)).endswith(
        "the token is not known"
    )


def test_agents_and_an_orchestrator_are_managed_and_answer_with_handoffs_shown(
    ks: Ks, stack: Any, model_server: ScriptedProvider, tmp_path: Path
) -> None:
    def model(request: Recorded) -> Reply:
        decision = openai_decision("E", request.json)  # kb_search
        if decision is not None:
            return decision
        if "billing desk" in json.dumps(request.json["messages"][0]["content"]):
            return openai_text_stream(["Billing here:", " your invoice is on its way."])
        return openai_text_stream(["The front desk answers."])

    model_server.reset()
    model_server.respond("/v1/chat/completions", model)
    token = tenant_admin_token(stack)  # agent names are unique per tenant: a tenant of this test's own
    ok(
        ks(
            "models", "add", "--provider", "custom", "--model", "scripted-chat", "--type", "knowledge_qa",
            "--base-url", f"{model_server.url}/v1", "--api-key", "sk-cli-scripted-0002", "--default",
            token=token,
        )
    )  # fmt: skip
    assert "no agents yet" in ok(ks("agent", "list", token=token))

    created = ok(ks("agent", "create", "billing", "--prompt", "You are the billing desk.", token=token))
    assert created.startswith("created agent billing: "), created
    billing = created.strip().rsplit(" ", 1)[-1]
    prompt_file = tmp_path / "front.txt"
    prompt_file.write_text("You are the front desk [of the office].\n")
    front = ok(
        ks(
            "agent",
            "create",
            "front",
            "--prompt-file",
            str(prompt_file),
            "--description",
            "general",
            token=token,
        )
    )
    front = front.strip().rsplit(" ", 1)[-1]
    listed = ok(ks("agent", "list", token=token))
    assert billing in listed and front in listed and "general" in listed, listed
    shown = ok(ks("agent", "show", "front", token=token))  # by name
    assert front in shown and "You are the front desk [of the office]." in shown, shown
    assert [a["system_prompt"] for a in json.loads(ok(ks("agent", "list", "--json", token=token)))] == [
        "You are the billing desk.",
        "You are the front desk [of the office].\n",
    ]
    assert (
        "give --prompt or --prompt-file, not both"
        in ks("agent", "create", "x1", "--prompt", "p", "--prompt-file", str(prompt_file), token=token).stderr
    )

    # A config the service refuses: the line names the field; nothing is created.
    bad_config = '{"agent_id": "no-such-agent"}'
    broken = refused(
        ks("orchestrator", "create", "broken", "--mode", "single", "--config", bad_config, token=token)
    )
    assert broken.startswith("error: 400 ") and "config.agent_id" in broken, broken
    not_json = ks(
        "orchestrator", "create", "broken", "--mode", "single", "--config", "{agent_id", token=token
    )
    assert not_json.returncode == 2 and "not valid JSON" in not_json.stderr, not_json.stderr
    assert "no orchestrators yet" in ok(ks("orchestrator", "list", token=token))

    config = tmp_path / "router.json"
    config.write_text(
        json.dumps(
            {
                "routes": [{"condition": {"keywords": ["invoice"]}, "agent_id": billing}],
                "default_agent_id": front,
            }
        )
    )
    made = ok(
        ks(
            "orchestrator",
            "create",
            "router",
            "--mode",
            "conditional",
            "--config-file",
            str(config),
            token=token,
        )
    )
    router = made.strip().rsplit(" ", 1)[-1]
    assert made.startswith(f"created orchestrator router (conditional, agents: {billing}, {front}): "), made
    assert "router" in ok(ks("orchestrator", "list", "--mode", "conditional", token=token))
    assert "no orchestrators yet" in ok(ks("orchestrator", "list", "--mode", "single", token=token))
    assert '"default_agent_id"' in ok(ks("orchestrator", "show", router, token=token))

    # Asked through the orchestrator: the billing agent answers, and -v says the turn was handed to it.
    asked = ks("ask", "--orchestrator", "router", "Where is my invoice for March?", "-v", token=token)
    assert ok(asked) == "Billing here: your invoice is on its way.\n", (asked.stdout, asked.stderr)
    assert f"handoff to {billing}" in asked.stderr, asked.stderr
    chatted = ks("chat", "--orchestrator", router, token=token, typed="Who handles parking?\n/exit\n")
    assert "The front desk answers." in ok(chatted), chatted.stdout
    assert "answered by orchestrator router" in chatted.stderr, chatted.stderr
    assert ok(ks("ask", "--agent", "billing", "Anything?", token=token)) == (
        "Billing here: your invoice is on its way.\n"
    )

    # An agent an orchestrator runs cannot be deleted; the orchestrator first, then it can.
    in_use = refused(ks("agent", "delete", "billing", token=token))
    assert in_use.startswith("error: 409 ") and "router" in in_use, in_use
    assert (
        ok(ks("orchestrator", "delete", "router", token=token)) == f"deleted orchestrator router ({router})\n"
    )
    assert ok(ks("agent", "delete", billing, token=token)) == f"deleted agent billing ({billing})\n"
    listed = ok(ks("agent", "list", token=token))
    assert billing not in listed and front in listed, listed
    assert refused(ks("orchestrator", "show", "router", token=token)) == (
        "error: 404 not_found: no orchestrator with the id or name 'router' (see `ks orchestrator list`)"
    )
