"""Who calls (``knowsphere_gateway.api.caller``): the identity and language a route's service calls carry.

What a caller notices: a malformed ``Accept-Language`` neither stalls nor breaks a call (the services
answer in their default language); identity headers count only with the proxy's secret, and a malformed
one there is a 400 naming it (``test_auth`` has the rest of who may call).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_gateway.api.caller import language_tag
from knowsphere_runtime.identity import require_identity


class FakeIngestion:
    """Answers ``GetDocument`` and records the tenant and ``accept-language`` each call arrived with."""

    def __init__(self) -> None:
        self.callers: list[tuple[str, str | None]] = []

    async def GetDocument(self, request: pb.GetDocumentRequest, context: Any) -> Any:
        language = dict(context.invocation_metadata()).get("accept-language")
        self.callers.append((require_identity().tenant_id, language))
        return pb.GetDocumentResponse(document=pb.Document(id=request.document_id))


@pytest.mark.parametrize(
    ("header", "tag"),
    [
        ("de", "de"),
        ("zh-Hans-CN", "zh-Hans-CN"),
        ("de-DE;q=0.9, en;q=0.8", "de-DE"),
        (" fr-CH , fr;q=0.9", "fr-CH"),
        (None, None),
        ("", None),
        ("*", None),
        ("é", None),
        ("de\x7f", None),
        ("a" * 20_000, None),
        ("toolonglanguage", None),
        ("de-", None),
        ("de_DE", None),
    ],
)
def test_only_a_well_formed_first_language_tag_is_kept(header: str | None, tag: str | None) -> None:
    assert language_tag(header) == tag


async def test_a_malformed_accept_language_answers_normally_in_the_default_language(
    gateway: Any, client: Any
) -> None:
    ingestion = FakeIngestion()
    headers: list[bytes] = ["é".encode(), b"de\x7f", b"a" * 20_000, b"de-DE;q=0.9, en;q=0.8"]
    async with client(await gateway(ingestion)) as http:
        async with asyncio.timeout(5):  # such a value used to stall the service call
            responses = [
                await http.get("/api/v1/documents/d1", headers={"accept-language": value})
                for value in headers
            ]
    assert [r.status_code for r in responses] == [200] * len(headers)
    assert [language for _, language in ingestion.callers] == [None, None, None, "de-DE"]


PROXY_SECRET = "proxy-secret-of-the-caller-tests-0123456"


async def test_identity_headers_without_the_proxy_secret_are_refused_not_ignored(
    gateway: Any, client: Any
) -> None:
    ingestion = FakeIngestion()
    async with client(await gateway(ingestion)) as http:  # local mode: no credentials needed
        response = await http.get(
            "/api/v1/documents/d1", headers={"x-ks-tenant-id": "other", "x-ks-user-id": "mallory"}
        )
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert ingestion.callers == []  # the request reached nobody


async def test_a_malformed_trusted_tenant_header_is_a_400_naming_it(gateway: Any, client: Any) -> None:
    ingestion = FakeIngestion()
    proxy = {"x-ks-proxy-secret": PROXY_SECRET, "x-ks-user-id": "alice", "x-ks-role": "member"}
    async with client(await gateway(ingestion, proxy_secret=PROXY_SECRET)) as http:
        response = await http.get("/api/v1/documents/d1", headers={**proxy, "x-ks-tenant-id": "acme corp"})
        trusted = await http.get("/api/v1/documents/d1", headers={**proxy, "x-ks-tenant-id": "acme"})
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "code": "invalid_argument",
            "message": "identity headers: ks-tenant-id='acme corp' has characters outside letters, "
            "digits and _ . : @ -",
        }
    }
    assert trusted.status_code == 200
    assert ingestion.callers == [("acme", None)]  # the refused request reached nobody
