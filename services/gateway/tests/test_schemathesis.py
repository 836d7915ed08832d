"""The OpenAPI document against the gateway that serves it: Schemathesis generates requests from the
document (its coverage phase — boundary values, missing and wrong-typed fields, undeclared methods —
then random ones) and sends them to the gateway on a real socket with an admin token, checking every
answer with all its checks: no 5xx, only declared status codes and content types, every body valid
against its declared schema, schema-valid requests accepted, schema-violating ones refused, ``Allow``
on 405 and ``OPTIONS``.

The peers are fakes on real gRPC servers that answer any call with an empty message, or ``NOT_FOUND``
for about a third of the ids they are asked about (so both answers of every route are exercised), and
chat turns run on FastStream's in-memory broker with a stand-in that completes each turn at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
from faststream.nats import NatsBroker, TestNatsBroker
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from knowsphere.ingestion.v1 import ingestion_pb2 as ipb
from knowsphere.toolrunner.v1 import toolrunner_pb2 as tpb
from knowsphere_contracts.events import ChatRequested, ChatTurnEvent, TurnEventKind
from knowsphere_contracts.services import CONTRACTS
from knowsphere_gateway.api.bus import GatewayBus, build_bus
from knowsphere_gateway.api.limits import Limits
from knowsphere_gateway.domain.tokens import Role, TokenService
from knowsphere_runtime.bus import Fanout, build_broker
from knowsphere_runtime.identity import Identity, require_identity
from knowsphere_runtime.identity_token import token_headers
from knowsphere_runtime.streams import CHAT_REQUESTS

ADMIN = Identity("acme", "admin")
PEERS = ("ingestion", "retrieval", "modelhub", "conversation", "memory")
# Coverage cases are deterministic; random cases per operation stay few so that the run takes seconds.
MAX_EXAMPLES = 10
SEED = 20240601
RUN_TIMEOUT_SECONDS = 240.0
# The generated requests come far faster than a caller's default rate limit (test_limits covers it).
UNLIMITED = Limits(caller_rate_limit_per_second=1e6, caller_rate_limit_burst=1_000_000, max_upload_files=8)
# The OpenAI-compatible API answers in OpenAI's error format; its own suite holds it to its document.
# OpenAI's chat request cannot say in JSON Schema that its last message is the user's non-empty
# question; the route answers 400 naming the message, which the check accepts there (and only there).
# An application on a WeCom platform needs MASTER_KEY, which this gateway lacks: a documented 503 naming
# platform_config; and a platform_config must fit its platform (which keys each WeCom platform takes),
# which the schema cannot say: a 400 naming the key. A token's application_id names an application
# only the gateway knows: a 400 naming it otherwise. An evaluation run's questions must have unique ids,
# text that is not blank and at least one relevant judgement, which the schema cannot say (a 400 naming
# the field), a tenant runs at most two at once (429), and a page token must come from a previous page
# (a 400 naming page_token).
CONFIG = """
[[operations]]
include-path-regex = "/evaluations$"
checks.positive_data_acceptance.expected-statuses = ["2xx", 400, 401, 403, 404, 409, 413, 429, "5xx"]

[[operations]]
include-path = "/v1/chat/completions"
checks.positive_data_acceptance.expected-statuses = ["2xx", 400, 401, 403, 404, 409, 429, "5xx"]

[[operations]]
include-path-regex = "^/api/v1/applications"
checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", 503]
checks.positive_data_acceptance.expected-statuses = ["2xx", 400, 401, 403, 404, 409, 429, "5xx"]

[[operations]]
include-path = "/api/v1/tokens"
include-method = "POST"
checks.positive_data_acceptance.expected-statuses = ["2xx", 400, 401, 403, 404, 409, 429, "5xx"]
"""
ID_FIELDS = frozenset(
    {"knowledge_base_id", "document_id", "session_id", "model_id", "turn_id", "memory_item_id"}
)
ANSWERS: dict[str, Message] = {
    "GetUploadPolicy": ipb.GetUploadPolicyResponse(
        max_file_size_bytes=10_000,
        recommended_chunk_size_bytes=4096,
        max_files_per_upload=1000,
        file_types=[ipb.SupportedFileType(extension="md", content_types=["text/markdown"])],
    ),
    # A stream's one message: a download starts with the file's description (the bytes may be none).
    "DownloadArtifact": tpb.DownloadArtifactResponse(
        artifact=tpb.ToolArtifact(artifact_id="artifact-1", file_name="deck.pptx", content_type="text/plain")
    ),
}


def missing(message: Message) -> bool:
    """True for a request naming an id the fake does not have: about a third of all ids."""
    for field, value in message.ListFields():
        if field.name in ID_FIELDS and isinstance(value, str) and value:
            return hashlib.sha256(value.encode()).digest()[0] % 3 == 0
        if field.name == "header" and isinstance(value, Message):
            return missing(value)
    return False


class Anything:
    """A peer answering every method of its contract: an empty message, or NOT_FOUND for a missing id."""

    def __init__(self, service: str) -> None:
        for method in CONTRACTS[service].descriptor.methods:
            answer = ANSWERS.get(method.name)
            response = answer or GetMessageClass(method.output_type)()
            setattr(
                self,
                method.name,
                _behaviour(
                    method.client_streaming, method.server_streaming, response, streamed=answer is not None
                ),
            )


def _behaviour(
    client_streaming: bool, server_streaming: bool, response: Message, *, streamed: bool
) -> Callable[..., Any]:
    async def check(request: Message, context: grpc.aio.ServicerContext) -> None:
        if missing(request):
            await context.abort(grpc.StatusCode.NOT_FOUND, "not found")

    if client_streaming:

        async def upload(requests: AsyncIterator[Message], context: grpc.aio.ServicerContext) -> Message:
            first = await anext(aiter(requests))
            await check(first, context)
            names = [first.header.file_name]
            async for request in requests:
                if request.HasField("header"):
                    names.append(request.header.file_name)
            if isinstance(response, ipb.UploadDocumentsResponse):
                # One result per file, as ingestion answers.
                return ipb.UploadDocumentsResponse(results=[ipb.UploadResult(file_name=n) for n in names])
            return response

        return upload
    if server_streaming:

        async def watch(request: Message, context: grpc.aio.ServicerContext) -> AsyncIterator[Message]:
            await check(request, context)
            if streamed:
                yield response

        return watch

    async def unary(request: Message, context: grpc.aio.ServicerContext) -> Message:
        await check(request, context)
        return response

    return unary


@asynccontextmanager
async def answered_turns() -> AsyncIterator[tuple[GatewayBus, Fanout[ChatTurnEvent]]]:
    """The gateway's bus on an in-memory broker where every turn completes at once."""
    broker: NatsBroker = build_broker("nats://unused:4222", client_name="test")
    events: Fanout[ChatTurnEvent] = Fanout()
    bus = build_bus(events)
    broker.include_router(bus.router)

    @broker.subscriber(ChatRequested.subject, stream=CHAT_REQUESTS)
    async def conversation(request: ChatRequested) -> None:
        done = ChatTurnEvent(turn_id=request.turn_id, sequence=0, kind=TurnEventKind.COMPLETED)
        await broker.publish(
            done.model_dump(mode="json"),
            subject=ChatTurnEvent.subject_for(require_identity().tenant_id, done.turn_id),
        )

    async with TestNatsBroker(broker):
        yield bus, events


async def stored_turn_events(tenant_id: str, turn_id: str) -> list[tuple[bytes, dict[str, str]]]:
    final = ChatTurnEvent(turn_id=turn_id, sequence=0, kind=TurnEventKind.COMPLETED)
    owner = token_headers(ADMIN)
    return (
        []
        if hashlib.sha256(turn_id.encode()).digest()[0] % 3 == 0
        else [(final.model_dump_json().encode(), owner)]
    )


async def test_generated_requests_get_declared_answers_that_match_the_document(
    gateway: Any, tokens: TokenService, tmp_path: Path, listening: Any
) -> None:
    peers = {
        name: Anything(name)
        for name in ("ingestion", "retrieval", "modelhub", "conversation", "memory", "toolrunner")
    }
    async with answered_turns() as (bus, events):
        app = await gateway(
            **peers,
            bus=bus,
            chat_events=events,
            local_identity=None,
            stored_turn_events=stored_turn_events,
            limits=UNLIMITED,
        )
        token = (await tokens.issue(ADMIN, Role.ADMIN, name="schemathesis", ttl=timedelta(days=1))).token
        (tmp_path / "schemathesis.toml").write_text(CONFIG)
        async with listening(app) as (host, port):
            base_url = f"http://{host}:{port}"
            run = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "schemathesis.cli",
                "run",
                f"{base_url}/openapi.json",
                "--checks=all",
                "--phases=coverage,fuzzing",
                f"--max-examples={MAX_EXAMPLES}",
                f"--seed={SEED}",
                "--workers=1",
                "--no-shrink",
                f"--header=Authorization: Bearer {token}",
                "--output-sanitize=false",
                "--max-failures=200",
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=tmp_path,
            )
            output, _ = await asyncio.wait_for(run.communicate(), RUN_TIMEOUT_SECONDS)
    report = output.decode(errors="replace")
    assert run.returncode == 0, report
