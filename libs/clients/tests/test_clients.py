"""The clients against real gRPC servers on loopback, bound to the real contracts.

What a caller notices: a failure arrives as the typed error of its status code, with the field the
service named and modelhub's model failure decoded; identity and language reach the server; chat
streams are gathered into one text; cached model facts are served from the cache until a model
changes, then asked again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import status_pb2
from grpc_status import rpc_status

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode, ModelType
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_clients import ModelHubClient, RetrievalClient, errors
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity, bound_identity, bound_language, require_identity
from knowsphere_runtime.rpc import GrpcServer, bind_service, open_channel
from knowsphere_runtime.rpc.errors import RequestError, answer, invalid
from knowsphere_runtime.rpc.testing import serving

ALICE = Identity("acme", "alice")
BOB = Identity("globex", "bob")


class FakeModelHub:
    """Answers like modelhub: a default embedding model per tenant, chat streams, model errors."""

    def __init__(self) -> None:
        self.defaults: dict[str, mpb.Model] = {
            "acme": mpb.Model(id="m-acme", types=[mpb.MODEL_TYPE_EMBEDDING]),
        }
        self.default_calls = 0
        self.languages: list[str] = []

    async def GetDefaultModel(self, request: mpb.GetDefaultModelRequest, context: Any) -> Any:
        self.default_calls += 1
        for key, value in context.invocation_metadata():
            if key == "accept-language":
                self.languages.append(value)
        model = self.defaults.get(require_identity().tenant_id)
        return mpb.GetDefaultModelResponse(
            default_model=mpb.ResolvedDefault(type=request.type, model=model)
            if model
            else mpb.ResolvedDefault(type=request.type)
        )

    async def ChatStream(self, request: mpb.ChatStreamRequest, context: Any) -> AsyncIterator[Any]:
        yield mpb.ChatStreamResponse(started=mpb.ChatStarted(model_id="m"))
        for word in ("one ", "two ", "three"):
            yield mpb.ChatStreamResponse(text_delta=mpb.TextDelta(text=word))

    async def Rerank(self, request: mpb.RerankRequest, context: Any) -> Any:
        detail = mpb.ModelErrorDetail(
            code=mpb.MODEL_ERROR_CODE_NO_MODEL_CONFIGURED, user_message="没有配置重排序模型", language="zh"
        )
        packed = any_pb2.Any()
        packed.Pack(detail)
        status = status_pb2.Status(
            code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message="no rerank model", details=[packed]
        )
        await context.abort_with_status(rpc_status.to_status(status))


class FakeRetrieval:
    async def Search(self, request: rpb.SearchRequest, context: Any) -> Any:
        async def work() -> rpb.SearchResponse:
            if not request.query:
                raise invalid("query", "empty query")
            if request.knowledge_base_ids == ["gone"]:
                raise RequestError(grpc.StatusCode.UNAVAILABLE, "index restarting")
            return rpb.SearchResponse(
                results=[rpb.SearchResult(chunk_id="c1", text=require_identity().tenant_id)]
            )

        return await answer(context, work)


@pytest.fixture
async def connect() -> AsyncIterator[Callable[[str, object], Awaitable[grpc.aio.Channel]]]:
    async with contextlib.AsyncExitStack() as stack:

        async def start(service: str, servicer: object) -> grpc.aio.Channel:
            return await stack.enter_async_context(serving(service, servicer))

        yield start


async def test_a_refused_field_arrives_as_a_typed_error_naming_the_field(connect: Any) -> None:
    client = RetrievalClient(await connect("retrieval", FakeRetrieval()))
    with bound_identity(ALICE), pytest.raises(errors.InvalidArgument) as refused:
        await client.search("", ["kb"])
    assert refused.value.field == "query"
    assert refused.value.permanent
    assert "empty query" in refused.value.message
    assert (refused.value.service, refused.value.method) == ("retrieval", "Search")


async def test_an_outage_is_unavailable_and_worth_retrying(connect: Any) -> None:
    client = RetrievalClient(await connect("retrieval", FakeRetrieval()))
    with bound_identity(ALICE), pytest.raises(errors.Unavailable) as outage:
        await client.search("q", ["gone"])
    assert not outage.value.permanent
    assert outage.value.field == ""


async def test_a_client_given_an_outage_wait_rides_out_a_peer_that_comes_back(unused_tcp_port: int) -> None:
    # Nothing listens on the port at first: the peer is down (a restart, a crash being replaced).
    address = f"127.0.0.1:{unused_tcp_port}"
    contract = CONTRACTS["retrieval"]
    server = GrpcServer(
        name="retrieval-late",
        bind=address,
        bindings=[bind_service(contract.descriptor, FakeRetrieval(), pending="")],
        grace=0.1,
    )

    async def come_back_later() -> None:
        await asyncio.sleep(2.0)
        await server.start()

    channel = open_channel(address, services=[contract.descriptor])
    patient = RetrievalClient(channel, outage_wait=30.0)
    impatient = RetrievalClient(channel)
    try:
        with bound_identity(ALICE):
            started = time.monotonic()
            with pytest.raises(errors.Unavailable):
                await impatient.search("q", ["kb"])
            assert time.monotonic() - started < 1.5  # no waiting by default
            returning = asyncio.create_task(come_back_later())
            results = await patient.search("q", ["kb"])
            waited = time.monotonic() - started
            await returning
            assert [r.text for r in results.results] == ["acme"] and waited >= 2.0
            # Only an outage is waited out: a refusal arrives at once.
            started = time.monotonic()
            with pytest.raises(errors.InvalidArgument):
                await patient.search("", ["kb"])
            assert time.monotonic() - started < 1.0
    finally:
        await channel.close()
        await server.stop(0)


async def test_an_outage_longer_than_the_wait_fails_as_unavailable(unused_tcp_port: int) -> None:
    contract = CONTRACTS["retrieval"]
    channel = open_channel(f"127.0.0.1:{unused_tcp_port}", services=[contract.descriptor])
    try:
        started = time.monotonic()
        with bound_identity(ALICE), pytest.raises(errors.Unavailable):
            await RetrievalClient(channel, outage_wait=2.0).search("q", ["kb"])
        assert 1.0 <= time.monotonic() - started < 6.0
    finally:
        await channel.close()


async def test_identity_reaches_the_service(connect: Any) -> None:
    client = RetrievalClient(await connect("retrieval", FakeRetrieval()))
    with bound_identity(BOB):
        response = await client.search("q", ["kb"])
    assert [r.text for r in response.results] == ["globex"]


async def test_a_model_failure_is_decoded_with_its_code_and_user_message(connect: Any) -> None:
    client = ModelHubClient(await connect("modelhub", FakeModelHub()))
    with bound_identity(ALICE), pytest.raises(errors.FailedPrecondition) as failed:
        await client.rerank("", "q", ["a", "b"])
    assert failed.value.model_code is ModelErrorCode.NO_MODEL_CONFIGURED
    assert failed.value.user_message == "没有配置重排序模型"


async def test_a_chat_stream_is_gathered_into_one_text(connect: Any) -> None:
    client = ModelHubClient(await connect("modelhub", FakeModelHub()))
    with bound_identity(ALICE):
        text = await client.complete([{"role": "user", "content": "count"}], purpose="test")
    assert text == "one two three"


async def test_default_models_are_cached_per_tenant_until_invalidated(connect: Any) -> None:
    hub = FakeModelHub()
    client = ModelHubClient(await connect("modelhub", hub), cache_seconds=600)
    with bound_identity(ALICE), bound_language("zh-CN"):
        assert await client.has_default(ModelType.EMBEDDING)
        assert await client.has_default(ModelType.EMBEDDING)
    assert hub.default_calls == 1
    assert hub.languages == ["zh-CN"]
    with bound_identity(BOB):
        assert not await client.has_default(ModelType.EMBEDDING)  # another tenant: its own answer
    assert hub.default_calls == 2
    hub.defaults.pop("acme")
    client.invalidate("acme", "m-acme")
    with bound_identity(ALICE):
        assert not await client.has_default(ModelType.EMBEDDING)
    assert hub.default_calls == 3


async def test_resolving_an_embedding_model_without_a_default_says_so(connect: Any) -> None:
    client = ModelHubClient(await connect("modelhub", FakeModelHub()))
    with bound_identity(BOB), pytest.raises(LookupError, match="no embedding model"):
        await client.resolve_embedding_model("")


def test_an_error_code_carried_as_data_becomes_its_typed_error() -> None:
    error = errors.from_code(
        "FAILED_PRECONDITION", "header.file_name: no ASR model", field="header.file_name"
    )
    assert isinstance(error, errors.FailedPrecondition)
    assert error.field == "header.file_name"
    assert isinstance(errors.from_code("NOT_A_CODE", "x"), errors.Unknown)
