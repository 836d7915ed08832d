"""What the conversation benchmarks share: the whole stack (as `make up` runs it) with a scripted
OpenAI-compatible chat model registered as a tenant's default, and an SSE client of the gateway.

The scripted model is real HTTP on loopback speaking OpenAI's wire format (the test suite's
``services/modelhub/tests/scripted_provider.py``); what it answers is decided per request by the
benchmark. It is a stand-in for a hosted provider, which this machine cannot reach.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from knowsphere_stack import Stack, StackConfig

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "services" / "modelhub" / "tests"))
from scripted_provider import Recorded, Reply, ScriptedProvider  # noqa: E402

PROXY_SECRET = "bench-proxy-secret-" + "0123456789abcdef" * 2

HANDBOOK = (
    b"# Employee handbook\n\n## Annual leave\n\n"
    b"Every employee gets 27 days of paid annual leave per calendar year. "
    b"Unused leave can be carried over until the end of March.\n\n## Expenses\n\n"
    b"Taxi rides are reimbursed only after 22:00 or when carrying equipment.\n"
)


@contextmanager
def running_stack(
    extra_env: dict[str, str] | None = None, model_server: ScriptedProvider | None = None
) -> Iterator[Stack]:
    """The stack; with ``model_server``, its modelhub may call that (loopback) provider."""
    with tempfile.TemporaryDirectory(prefix="ks-bench-conversation-") as data_dir:
        config = StackConfig.with_free_ports(
            data_dir=Path(data_dir),
            temporal_headless=True,
            extra_env={
                "OTEL_TRACES_EXPORTER": "none",
                # Each benchmark tenant is named by an authenticating proxy's headers.
                "KS_GATEWAY_PROXY_SECRET": PROXY_SECRET,
                **(model_server.modelhub_egress_env() if model_server else {}),
                **(extra_env or {}),
            },
        )
        with Stack(config) as stack:
            stack.sign_as_local_client()
            yield stack


@contextmanager
def scripted_model(respond: Callable[[Recorded], Reply]) -> Iterator[ScriptedProvider]:
    server = ScriptedProvider()
    server.start()
    server.respond("/v1/chat/completions", respond)
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Tenant:
    """A tenant of its own with the scripted model as its default chat model."""

    stack: Stack
    headers: dict[str, str] = field(
        default_factory=lambda: {
            "x-ks-proxy-secret": PROXY_SECRET,
            "x-ks-tenant-id": f"bench{uuid.uuid4().hex[:8]}",
            "x-ks-user-id": "bench",
            "x-ks-role": "admin",
        }
    )

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.stack.gateway_url}/api/v1",
            headers=self.headers,
            timeout=httpx.Timeout(30, read=300),
        )

    def async_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=f"{self.stack.gateway_url}/api/v1",
            headers=self.headers,
            timeout=httpx.Timeout(30, read=300),
            limits=httpx.Limits(max_connections=500, max_keepalive_connections=500),
        )

    def use_model(self, server: ScriptedProvider, context_window: int = 32768) -> None:
        """Registers the scripted model (with this context window) as the tenant's default chat model."""
        with self.client() as http:
            created = http.post(
                "/models",
                json={
                    "display_name": "scripted chat",
                    "provider_id": "custom",
                    "model_name": "scripted-chat",
                    "types": ["knowledge_qa"],
                    "base_url": f"{server.url}/v1",
                    "api_key": "sk-bench-scripted-0001",
                    "parameters": {"context_window": context_window},
                },
            )
            created.raise_for_status()
            http.put(
                "/models/defaults/knowledge_qa", json={"model_id": created.json()["id"]}
            ).raise_for_status()

    def knowledge_base(self, data: bytes = HANDBOOK, name: str = "handbook.md") -> str:
        with self.client() as http:
            kb = http.post("/knowledge-bases", json={"name": f"kb-{uuid.uuid4().hex[:8]}"})
            kb.raise_for_status()
            uploaded = http.post(
                f"/knowledge-bases/{kb.json()['id']}/documents", files={"file": (name, data)}
            )
            uploaded.raise_for_status()
            document_id = uploaded.json()["document"]["id"]
            deadline = time.monotonic() + 300
            while http.get(f"/documents/{document_id}").json()["status"] not in ("ready", "failed"):
                if time.monotonic() > deadline:
                    raise TimeoutError("the bench document did not become ready")
                time.sleep(0.5)
            return str(kb.json()["id"])

    def session(self) -> str:
        with self.client() as http:
            created = http.post("/sessions", json={})
            created.raise_for_status()
            return str(created.json()["id"])


async def sse(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    name, data = "message", list[str]()
    async for line in response.aiter_lines():
        if line.startswith(":"):
            continue
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").strip())


def rss_mb(pid: int) -> float:
    """Resident memory of a process and its children, in MiB."""
    total = 0
    for one in [pid, *_children(pid)]:
        try:
            for line in Path(f"/proc/{one}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


def _children(pid: int) -> list[int]:
    try:
        direct = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    found: list[int] = []
    for child in map(int, direct):
        found += [child, *_children(child)]
    return found


def machine() -> str:
    import platform

    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
