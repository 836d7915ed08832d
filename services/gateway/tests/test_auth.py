"""Who may call the gateway (``api/caller.py``, ``api/browser.py``, ``domain/access.py``, ``api/tokens.py``).

What a caller notices: without local mode nothing gets in without a token (401, ``WWW-Authenticate:
Bearer``); an admin makes, lists and revokes tokens, and a revoked one stops working at once; a role
that may not use a route gets 403 whatever the resource; an authenticating proxy is believed only with
its secret and exactly one of each identity header; local mode binds to loopback only; a page of
another site cannot post to the API, and the API does not answer to a foreign Host name.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_gateway.api.wecom import SIGNATURE_AUTHENTICATED_PATHS
from knowsphere_gateway.domain.access import ROUTE_ROLES
from knowsphere_gateway.domain.tokens import Role, TokenService
from knowsphere_gateway.settings import Settings
from knowsphere_runtime.identity import Identity, require_identity

PROXY_SECRET = "proxy-secret-of-the-auth-tests-01234567"
ACME_ADMIN = Identity("acme", "alice")
# WeCom's callbacks take no token and no role: WeCom's signature authenticates them (test_wecom.py).
PUBLIC_PATHS = {"/healthz", *SIGNATURE_AUTHENTICATED_PATHS}


class FakeIngestion:
    """Knows document d1 (of every tenant) and takes uploads; records (method, tenant) per call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def _called(self, method: str) -> None:
        self.calls.append((method, require_identity().tenant_id))

    async def GetDocument(self, request: pb.GetDocumentRequest, context: Any) -> Any:
        self._called("GetDocument")
        return pb.GetDocumentResponse(document=pb.Document(id=request.document_id))

    async def DeleteDocument(self, request: pb.DeleteDocumentRequest, context: Any) -> Any:
        self._called("DeleteDocument")
        return pb.DeleteDocumentResponse()

    async def GetUploadPolicy(self, request: pb.GetUploadPolicyRequest, context: Any) -> Any:
        self._called("GetUploadPolicy")
        md = pb.SupportedFileType(extension="md", content_types=["text/markdown"])
        return pb.GetUploadPolicyResponse(max_file_size_bytes=10_000, file_types=[md])

    async def UploadDocument(self, messages: Any, context: Any) -> Any:
        self._called("UploadDocument")
        header = (await anext(aiter(messages))).header
        async for _ in messages:
            pass
        return pb.UploadDocumentResponse(document=pb.Document(id="d2", file_name=header.file_name))


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def token_of(tokens: TokenService, role: Role, identity: Identity = ACME_ADMIN, days: int = 1) -> str:
    return (await tokens.issue(identity, role, name=f"{role} test", ttl=timedelta(days=days))).token


# --- tokens ---


async def test_without_local_mode_a_request_needs_a_token(gateway: Any, client: Any) -> None:
    ingestion = FakeIngestion()
    async with client(await gateway(ingestion, local_identity=None)) as http:
        none = await http.get("/api/v1/documents/d1")
        basic = await http.get("/api/v1/documents/d1", headers={"authorization": "Basic YWxpY2U6c2VjcmV0"})
        unknown = await http.get("/api/v1/documents/d1", headers=bearer("ks_not-a-token"))
        health = await http.get("/healthz")
    assert [r.status_code for r in (none, basic, unknown)] == [401, 401, 401]
    assert none.headers["www-authenticate"] == "Bearer"
    assert none.json()["error"] == {
        "code": "unauthenticated",
        "message": "an API token is required: send Authorization: Bearer <token>",
    }
    assert unknown.json()["error"]["message"] == "the token is not known"
    assert health.status_code == 200  # probes need no token
    assert ingestion.calls == []


async def test_token_lifecycle_through_the_api(gateway: Any, client: Any, tokens: TokenService) -> None:
    ingestion = FakeIngestion()
    admin = bearer(await token_of(tokens, Role.ADMIN))  # as `python -m knowsphere_gateway.tokens create`
    async with client(await gateway(ingestion, local_identity=None)) as http:
        created = await http.post(
            "/api/v1/tokens", headers=admin, json={"name": "ci", "role": "member", "expires_in_days": 7}
        )
        assert created.status_code == 201, created.text
        token, info = created.json()["token"], created.json()["info"]
        member = bearer(token)
        used = await http.get("/api/v1/documents/d1", headers=member)
        listed = await http.get("/api/v1/tokens", headers=admin)
        shown = await http.get(f"/api/v1/tokens/{info['id']}", headers=admin)
        member_makes_token = await http.post(
            "/api/v1/tokens", headers=member, json={"name": "x", "role": "admin"}
        )
        await tokens.flush_last_used()
        after_flush = await http.get(f"/api/v1/tokens/{info['id']}", headers=admin)
        revoked = await http.delete(f"/api/v1/tokens/{info['id']}", headers=admin)
        after_revoke = await http.get("/api/v1/documents/d1", headers=member)
        too_long = await http.post(
            "/api/v1/tokens", headers=admin, json={"name": "x", "role": "member", "expires_in_days": 366}
        )

    assert token.startswith("ks_")
    assert (info["tenant_id"], info["user_id"], info["role"], info["created_by"]) == (
        "acme",
        "alice",
        "member",
        "alice",
    )
    assert used.status_code == 200 and ingestion.calls == [("GetDocument", "acme")]
    assert token not in listed.text and token not in shown.text  # shown once: in the create answer only
    assert {t["id"] for t in listed.json()["tokens"]} >= {info["id"]}
    assert shown.json()["last_used_time"] is None  # not written per request
    assert after_flush.json()["last_used_time"] is not None
    assert member_makes_token.status_code == 403
    assert revoked.status_code == 204
    assert after_revoke.status_code == 401
    assert after_revoke.json()["error"]["message"] == f"the token {info['id']} has been revoked"
    assert too_long.status_code == 400 and too_long.json()["error"]["field"] == "expires_in_days"


async def test_an_expired_token_is_refused(gateway: Any, client: Any, tokens: TokenService) -> None:
    issued = await tokens.issue(ACME_ADMIN, Role.ADMIN, name="old", ttl=timedelta(seconds=-1))
    async with client(await gateway(FakeIngestion(), local_identity=None)) as http:
        response = await http.get("/api/v1/documents/d1", headers=bearer(issued.token))
    assert response.status_code == 401
    assert "expired" in response.json()["error"]["message"]


# --- roles ---


def test_every_api_route_has_a_role_and_every_listed_role_a_route(
    gateway_routes: set[tuple[str, str]],
) -> None:
    assert gateway_routes - ROUTE_ROLES.keys() == set(), "add these routes to domain/access.py ROUTE_ROLES"
    assert ROUTE_ROLES.keys() - gateway_routes == set(), "ROUTE_ROLES lists routes that no longer exist"


@pytest.fixture
async def gateway_routes(gateway: Any) -> set[tuple[str, str]]:
    """(method, path) of every operation of the OpenAPI document but the public ones."""
    paths = (await gateway()).openapi()["paths"]
    return {
        (method.upper(), path)
        for path, operations in paths.items()
        if path not in PUBLIC_PATHS
        for method in operations
    }


async def test_a_role_that_may_not_use_a_route_gets_403_whatever_the_resource(
    gateway: Any, client: Any, tokens: TokenService
) -> None:
    ingestion = FakeIngestion()
    reader = bearer(await token_of(tokens, Role.READ_ONLY))
    member = bearer(await token_of(tokens, Role.MEMBER))
    files = {"file": ("notes.md", b"# Notes\n", "text/markdown")}
    async with client(await gateway(ingestion, local_identity=None)) as http:
        reads = await http.get("/api/v1/documents/d1", headers=reader)
        reader_upload = await http.post("/api/v1/knowledge-bases/kb1/documents", headers=reader, files=files)
        reader_deletes_existing = await http.delete("/api/v1/knowledge-bases/kb1", headers=reader)
        reader_deletes_missing = await http.delete("/api/v1/knowledge-bases/kb-none", headers=reader)
        member_upload = await http.post("/api/v1/knowledge-bases/kb1/documents", headers=member, files=files)
        member_creates_kb = await http.post("/api/v1/knowledge-bases", headers=member, json={"name": "x"})
        member_deletes_model = await http.delete("/api/v1/models/m1", headers=member)

    assert reads.status_code == 200
    assert reader_upload.status_code == 403
    assert reader_upload.json()["error"] == {
        "code": "permission_denied",
        "message": "POST /api/v1/knowledge-bases/{kb_id}/documents needs the member role; "
        "the caller has read-only",
    }
    # The same answer for a knowledge base that exists and one that does not: no existence leak.
    assert reader_deletes_existing.status_code == reader_deletes_missing.status_code == 403
    assert reader_deletes_existing.json()["error"]["message"].replace(
        "kb1", ""
    ) == reader_deletes_missing.json()["error"]["message"].replace("kb-none", "")
    assert member_upload.status_code == 201, member_upload.text
    assert [r.status_code for r in (member_creates_kb, member_deletes_model)] == [403, 403]
    # Refused requests reached no service: only the reader's read and the member's upload did.
    assert [m for m, _ in ingestion.calls] == ["GetDocument", "GetUploadPolicy", "UploadDocument"]


# --- behind an authenticating proxy ---


def proxied(**headers: str) -> dict[str, str]:
    values = {
        "x-ks-proxy-secret": PROXY_SECRET,
        "x-ks-tenant-id": "acme",
        "x-ks-user-id": "alice",
        "x-ks-role": "member",
    }
    values.update({name.replace("_", "-"): value for name, value in headers.items()})
    return {name: value for name, value in values.items() if value}


@pytest.mark.parametrize(
    ("headers", "status", "message"),
    [
        (
            proxied(x_ks_proxy_secret=""),
            401,
            "identity headers need the proxy's x-ks-proxy-secret; it is wrong or missing",
        ),
        (
            proxied(x_ks_proxy_secret="x" * 40),
            401,
            "identity headers need the proxy's x-ks-proxy-secret; it is wrong or missing",
        ),
        (proxied(x_ks_user_id=""), 400, "identity headers: x-ks-user-id is missing; send it once"),
        (proxied(x_ks_role=""), 400, "identity headers: x-ks-role is missing; send it once"),
        (
            proxied(x_ks_role="owner"),
            400,
            "identity headers: x-ks-role='owner' is not one of read-only, member, admin",
        ),
    ],
    ids=["no-secret", "wrong-secret", "no-user", "no-role", "unknown-role"],
)
async def test_the_proxy_is_believed_only_with_its_secret_and_every_identity_header(
    gateway: Any, client: Any, headers: dict[str, str], status: int, message: str
) -> None:
    ingestion = FakeIngestion()
    async with client(await gateway(ingestion, local_identity=None, proxy_secret=PROXY_SECRET)) as http:
        response = await http.get("/api/v1/documents/d1", headers=headers)
    assert (response.status_code, response.json()["error"]["message"]) == (status, message)
    assert ingestion.calls == []


async def test_a_doubled_identity_header_or_secret_is_refused_not_picked(gateway: Any, client: Any) -> None:
    ingestion = FakeIngestion()
    base = list(proxied().items())
    doubled_tenant = [*base, ("x-ks-tenant-id", "globex")]
    doubled_secret = [*base, ("x-ks-proxy-secret", PROXY_SECRET)]
    async with client(await gateway(ingestion, local_identity=None, proxy_secret=PROXY_SECRET)) as http:
        tenant = await http.get("/api/v1/documents/d1", headers=doubled_tenant)
        secret = await http.get("/api/v1/documents/d1", headers=doubled_secret)
        good = await http.get("/api/v1/documents/d1", headers=base)
    assert tenant.status_code == 400
    assert (
        tenant.json()["error"]["message"] == "identity headers: x-ks-tenant-id is sent 2 times; send it once"
    )
    assert secret.status_code == 401
    assert good.status_code == 200
    assert ingestion.calls == [("GetDocument", "acme")]


async def test_the_proxy_role_is_enforced_and_a_gateway_without_a_proxy_secret_believes_no_headers(
    gateway: Any, client: Any
) -> None:
    async with client(await gateway(FakeIngestion(), local_identity=None, proxy_secret=PROXY_SECRET)) as http:
        member_creates_kb = await http.post("/api/v1/knowledge-bases", headers=proxied(), json={"name": "x"})
    async with client(await gateway(FakeIngestion(), local_identity=None)) as http:
        unconfigured = await http.get("/api/v1/documents/d1", headers=proxied())
    assert member_creates_kb.status_code == 403
    assert unconfigured.status_code == 401


# --- local mode ---


def settings(**values: Any) -> Settings:
    required = {
        "data_dir": "/tmp/ks-gateway-settings-test",
        "nats_url": "nats://127.0.0.1:4222",
        **{
            f"{peer}_addr": "127.0.0.1:1"
            for peer in ("conversation", "retrieval", "ingestion", "memory", "toolrunner", "modelhub")
        },
    }
    return Settings(**{**required, **values})


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "gateway.example.com"])
def test_local_mode_refuses_to_start_on_a_host_that_is_not_loopback(host: str) -> None:
    with pytest.raises(ValidationError, match="binds to loopback only; KS_GATEWAY_HTTP_HOST="):
        settings(local_mode=True, http_host=host)
    assert settings(local_mode=False, http_host=host).http_host == host  # fine with tokens


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_local_mode_starts_on_loopback(host: str) -> None:
    assert settings(local_mode=True, http_host=host).host_allow_list() == {"localhost", "127.0.0.1", "::1"}


def test_the_host_allow_list_is_set_or_defaults_to_localhost_names_in_local_mode_only() -> None:
    assert settings().host_allow_list() is None
    assert settings(allowed_hosts="KB.example.com, kb.internal").host_allow_list() == {
        "kb.example.com",
        "kb.internal",
    }


def test_a_shared_token_database_needs_a_shared_hash_key() -> None:
    with pytest.raises(ValidationError, match=r"token_hash_key\n.*required with KS_GATEWAY_DATABASE_URL"):
        settings(database_url="postgresql+asyncpg://db/ks")


# --- browsers ---


async def test_a_cross_site_upload_is_refused_and_a_same_origin_or_non_browser_one_is_not(
    gateway: Any, client: Any
) -> None:
    ingestion = FakeIngestion()
    files = {"file": ("notes.md", b"# Notes\n", "text/markdown")}
    path = "/api/v1/knowledge-bases/kb1/documents"
    app = await gateway(ingestion, allowed_origins=frozenset({"https://ui.example.com"}))
    async with client(app) as http:
        foreign = await http.post(path, files=files, headers={"origin": "https://evil.example"})
        null_origin = await http.post(path, files=files, headers={"origin": "null"})
        fetch_cross = await http.post(path, files=files, headers={"sec-fetch-site": "cross-site"})
        ingestion_calls_after_refusals = list(ingestion.calls)
        own = await http.post(
            path, files=files, headers={"origin": "http://gateway", "sec-fetch-site": "same-origin"}
        )
        allowed = await http.post(path, files=files, headers={"origin": "https://ui.example.com"})
        curl = await http.post(path, files=files)
        foreign_read = await http.get("/api/v1/documents/d1", headers={"origin": "https://evil.example"})
    assert [r.status_code for r in (foreign, null_origin, fetch_cross)] == [403, 403, 403]
    assert foreign.json()["error"]["code"] == "cross_site_request"
    assert ingestion_calls_after_refusals == []
    assert [r.status_code for r in (own, allowed, curl)] == [201, 201, 201]
    assert foreign_read.status_code == 200  # a read changes nothing, and CORS keeps its answer from the page


async def test_a_foreign_host_name_is_refused_in_local_mode(gateway: Any, client: Any) -> None:
    ingestion = FakeIngestion()
    app = await gateway(ingestion, allowed_hosts=settings(local_mode=True).host_allow_list())
    async with client(app) as http:
        rebound = await http.get("/api/v1/documents/d1", headers={"host": "evil.example:8780"})
        answers = [
            await http.get("/api/v1/documents/d1", headers={"host": host})
            for host in ("127.0.0.1:8780", "localhost:8780", "[::1]:8780", "LOCALHOST")
        ]
    assert rebound.status_code == 400
    assert rebound.json()["error"] == {
        "code": "invalid_host",
        "message": "this gateway does not answer to Host 'evil.example:8780'",
    }
    assert [r.status_code for r in answers] == [200] * 4
    assert len(ingestion.calls) == 4


def test_a_plain_postgresql_url_gets_the_async_driver() -> None:
    configured = settings(database_url="postgresql://gw:pw@db:5432/ks", token_hash_key="k" * 32)
    assert configured.sqlalchemy_url() == "postgresql+asyncpg://gw:pw@db:5432/ks"
    assert settings().sqlalchemy_url() == "sqlite+aiosqlite:////tmp/ks-gateway-settings-test/gateway.db"
