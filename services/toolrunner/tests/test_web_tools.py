"""web_fetch and web_search through the real gRPC server, against a real HTTP server on 127.0.0.1 that
serves pages and speaks SearXNG's and Tavily's formats. The server is reachable only because each test
allow-lists 127.0.0.1 in the egress policy, as an operator would for an in-cluster service; without
that, and for metadata and private addresses (directly, by redirect or through a name), the model gets
a clean tool error and the server sees no request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import struct_pb2

from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_egress import EgressPolicy, StaticResolver
from knowsphere_runtime.identity import bound_identity

from .conftest import ACME
from .web_site import ARTICLE_SENTENCE, PDF_SENTENCE, TAVILY_KEY, Site, serve

BLOCKED = "the destination is not allowed or cannot be reached"


@pytest.fixture
def site() -> Iterator[Site]:
    found = Site()
    server, thread = serve(found)
    yield found
    server.shutdown()
    server.server_close()
    thread.join()


def allowed(site: Site) -> EgressPolicy:
    return EgressPolicy(allow_networks=("127.0.0.1/32",), allowed_ports=frozenset({80, 443, site.port}))  # type: ignore[arg-type]


def not_allow_listed(site: Site) -> EgressPolicy:
    """The site's port is allowed, its address is not: what a tenant meets by default."""
    return EgressPolicy(allowed_ports=frozenset({80, 443, site.port}))


def call(
    name: str, arguments: dict[str, Any], sources: list[pb.Source] | None = None
) -> pb.ExecuteToolRequest:
    struct = struct_pb2.Struct()
    struct.update(arguments)
    context = pb.ToolContext(
        session_id="s1", turn_id="t1", switches=pb.TurnSwitches(web_search=True), sources=sources or []
    )
    return pb.ExecuteToolRequest(name=name, arguments=struct, tool_call_id="call-1", context=context)


async def test_web_fetch_reads_the_article_and_the_pdf_and_cites_them(lone_toolrunner, site):
    earlier = pb.Source(label="c1", index=1, kind=pb.SOURCE_KIND_CHUNK, chunk_id="doc-1-0")
    async with lone_toolrunner(egress=allowed(site)) as stub:
        with bound_identity(ACME):
            article = await stub.ExecuteTool(call("web_fetch", {"url": site.url("/article")}, [earlier]))
            pdf = await stub.ExecuteTool(call("web_fetch", {"url": site.url("/handbook.pdf")}))
            missing = await stub.ExecuteTool(call("web_fetch", {"url": site.url("/missing")}))
    page = json.loads(article.content)
    assert ARTICLE_SENTENCE in page["text"] and "Operating margin rose to 31 percent" in page["text"]
    for boilerplate in ("Cookie settings", "Careers", "newsletter"):
        assert boilerplate not in page["text"]
    assert page["title"] == "Quarterly results" and page["source"] == "c2" and page["kind"] == "html"
    [source] = article.sources
    assert (source.label, source.kind, source.url) == ("c2", pb.SOURCE_KIND_WEB, site.url("/article"))
    assert source.title == "Quarterly results" and ARTICLE_SENTENCE[:40] in source.snippet

    document = json.loads(pdf.content)
    assert PDF_SENTENCE in document["text"] and document["kind"] == "pdf"
    assert document["title"] == "Employee handbook" and pdf.sources[0].url == site.url("/handbook.pdf")

    assert missing.error.code == pb.TOOL_ERROR_CODE_FAILED and "HTTP 404" in missing.content
    assert missing.attempts == 1


async def test_web_search_through_searxng(lone_toolrunner, site):
    settings = {"egress": allowed(site), "web_search_provider": "searxng", "searxng_url": site.url("")}
    async with lone_toolrunner(**settings) as stub:
        with bound_identity(ACME):
            found = await stub.ExecuteTool(call("web_search", {"query": "q3 revenue", "max_results": 2}))
    answer = json.loads(found.content)
    assert [(r["source"], r["title"], r["url"]) for r in answer["results"]] == [
        ("c1", "Q3 results", "https://example.com/q3"),
        ("c2", "Leave policy", "https://example.org/leave"),
    ]
    assert answer["results"][0]["snippet"] == "Revenue grew 12 percent."
    assert [(s.label, s.url, s.title) for s in found.sources] == [
        ("c1", "https://example.com/q3", "Q3 results"),
        ("c2", "https://example.org/leave", "Leave policy"),
    ]
    method, path, _, _ = site.requests[-1]
    assert method == "GET" and "q=q3+revenue" in path and "format=json" in path


async def test_web_search_through_tavily_with_its_key(lone_toolrunner, site):
    common = {"egress": allowed(site), "web_search_provider": "tavily", "tavily_url": site.url("")}
    async with lone_toolrunner(tavily_api_key=TAVILY_KEY, **common) as stub:
        with bound_identity(ACME):
            found = await stub.ExecuteTool(call("web_search", {"query": "annual leave"}))
    async with lone_toolrunner(tavily_api_key="tvly-wrong", **common) as stub:
        with bound_identity(ACME):
            refused = await stub.ExecuteTool(call("web_search", {"query": "annual leave"}))
    answer = json.loads(found.content)
    assert [r["url"] for r in answer["results"]] == [
        "https://example.com/q3",
        "https://example.org/leave",
        "https://example.net/margin",
    ]
    assert [s.label for s in found.sources] == ["c1", "c2", "c3"]
    _, _, headers, body = site.requests[0]
    assert json.loads(body)["query"] == "annual leave" and json.loads(body)["max_results"] == 5
    assert headers["authorization"] == f"Bearer {TAVILY_KEY}"
    assert refused.error.code == pb.TOOL_ERROR_CODE_FAILED and refused.attempts == 1
    assert "Tavily refused the API key" in refused.content and "tvly-wrong" not in refused.content


async def test_web_search_without_a_provider_says_how_to_configure_one(lone_toolrunner):
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            answer = await stub.ExecuteTool(call("web_search", {"query": "weather"}))
    assert answer.error.code == pb.TOOL_ERROR_CODE_FAILED and answer.attempts == 1
    assert "no web search provider is configured" in answer.content
    assert "KS_TOOLRUNNER_WEB_SEARCH_PROVIDER=searxng" in answer.content
    assert "KS_TOOLRUNNER_TAVILY_API_KEY" in answer.content


async def test_internal_addresses_are_refused_cleanly_and_never_reached(lone_toolrunner, site):
    async with lone_toolrunner(egress=not_allow_listed(site)) as stub:
        with bound_identity(ACME):
            loopback = await stub.ExecuteTool(call("web_fetch", {"url": site.url("/article")}))
            metadata = await stub.ExecuteTool(
                call("web_fetch", {"url": "http://169.254.169.254/latest/meta-data/iam/"})
            )
            decimal = await stub.ExecuteTool(
                call("web_fetch", {"url": f"http://2130706433:{site.port}/article"})
            )
            scheme = await stub.ExecuteTool(call("web_fetch", {"url": "file:///etc/passwd"}))
    assert site.requests == []  # nothing reached the server
    for answer in (loopback, metadata, decimal):
        assert answer.error.code == pb.TOOL_ERROR_CODE_FAILED and answer.attempts == 1
        assert BLOCKED in answer.content  # the same words for blocked and for nothing there
    assert "only http and https" in scheme.content


async def test_redirects_to_private_addresses_and_private_names_are_refused(lone_toolrunner, site):
    resolver = StaticResolver({"intranet.example": ["10.1.2.3"]})
    async with lone_toolrunner(egress=allowed(site), resolver=resolver) as stub:
        with bound_identity(ACME):
            to_metadata = await stub.ExecuteTool(call("web_fetch", {"url": site.url("/to-metadata")}))
            to_private = await stub.ExecuteTool(call("web_fetch", {"url": site.url("/to-private")}))
            private_name = await stub.ExecuteTool(call("web_fetch", {"url": "http://intranet.example/"}))
    for answer in (to_metadata, to_private, private_name):
        assert answer.error.code == pb.TOOL_ERROR_CODE_FAILED and answer.attempts == 1
        assert BLOCKED in answer.content and not answer.sources
    assert site.paths() == ["/to-metadata", "/to-private"]  # the redirect targets were never fetched


async def test_a_page_over_the_size_budget_is_refused(lone_toolrunner, site):
    async with lone_toolrunner(egress=allowed(site), web_fetch_max_bytes=100_000) as stub:
        with bound_identity(ACME):
            answer = await stub.ExecuteTool(call("web_fetch", {"url": site.url("/huge")}))
    assert answer.error.code == pb.TOOL_ERROR_CODE_FAILED and answer.attempts == 1
    assert "larger than 100000 bytes" in answer.content


def test_a_search_provider_needs_its_settings_and_its_key_is_never_printed():
    from pydantic import ValidationError

    from knowsphere_runtime.settings import describe_errors
    from knowsphere_toolrunner.settings import Settings

    base = {"data_dir": "/tmp/unused", "retrieval_addr": "x", "modelhub_addr": "y"}

    def message(**values: Any) -> str:
        with pytest.raises(ValidationError) as raised:
            Settings(**base, **values)
        return describe_errors(Settings, raised.value)

    assert (
        "KS_TOOLRUNNER_SEARXNG_URL='': Value error, required when web_search_provider is searxng"
        in message(web_search_provider="searxng")
    )
    assert "KS_TOOLRUNNER_TAVILY_API_KEY (value hidden): Value error, required" in message(
        web_search_provider="tavily"
    )
    slow = message(
        web_search_provider="tavily", tavily_api_key="tvly-secret-1234", web_fetch_timeout_seconds=50
    )
    assert "KS_TOOLRUNNER_WEB_SEARCH_TIMEOUT_SECONDS" in slow and "web_tool_timeout_seconds (40)" in slow
    assert "tvly-secret-1234" not in slow
