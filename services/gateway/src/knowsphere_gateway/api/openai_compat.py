"""The OpenAI-compatible API under ``/v1``: chat completions answered by the tenant's agents, the
agents as models, and embeddings — in OpenAI's wire format, so the official ``openai`` client works.

``model`` names an agent of the caller's tenant, by name or id; :data:`DEFAULT_MODEL` is the default
agent (the tenant's default chat model and the built-in instructions). The request's messages are the
whole conversation: the last one (a user's) is the question, the user and assistant messages before it
travel as the turn's history (the newest that fit the bus's limits; the conversation reads its usual
number of recent turns from them); system and developer messages are not used — the agent's
instructions apply. The turn searches the agent's knowledge bases plus those named in the
``knowledge_base_ids`` extension (``extra_body``); the default agent with none of either searches the
tenant's knowledge bases.

``model`` may also name an application of the tenant (by name; an application's name wins over an
agent's of the same name): the turn runs the application's orchestrator, with the knowledge bases of
``knowledge_base_ids`` only. A token of an application may name only that application (anything else is
a 400 naming ``model``) and lists only it in ``/v1/models``.

Citations: ``[[cN]]`` markers stay in ``content``; each cited source comes once as a ``url_citation``
annotation (``domain.annotations``) — in a stream as ``delta.annotations`` just before the chunk that
first cites it — and the answer's ``citations`` list rides on the final chunk (and on the completion).

Every error on these routes, the gateway's own and the services', is OpenAI's shape:
``{"error": {"message", "type", "code", "param"}}`` (:class:`OpenAIRoute`).
"""

import asyncio
import base64
import json
import struct
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any

import grpc
import structlog
from fastapi import APIRouter, Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute
from opentelemetry import trace
from starlette.exceptions import HTTPException as StarletteHTTPException

from knowsphere.conversation.v1 import conversation_pb2 as cpb
from knowsphere.ingestion.v1 import ingestion_pb2 as ipb
from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode, ModelType
from knowsphere_clients import ConversationClient, IngestionClient, ModelHubClient
from knowsphere_clients.errors import ServiceError
from knowsphere_contracts.events import (
    MAX_HISTORY_CHARS,
    MAX_HISTORY_MESSAGES,
    MAX_IMAGES_PER_MESSAGE,
    MAX_KNOWLEDGE_BASES_PER_TURN,
    MAX_MESSAGE_CHARS,
    ChatRequested,
    ChatTurnEvent,
    HistoryMessage,
    TurnEventKind,
    check_images_total,
)
from knowsphere_gateway.api.bus import GatewayBus
from knowsphere_gateway.api.caller import Caller, Unauthenticated
from knowsphere_gateway.api.chat import BUS_UNAVAILABLE_CODE, TURN_TIMEOUT_CODE, requested_turn_events
from knowsphere_gateway.api.errors import HttpError, error_body, http_status
from knowsphere_gateway.api.openai_wire import (
    CHUNK_SCHEMA,
    DEFAULT_EMBEDDING_MODELS,
    DEFAULT_MODEL,
    ERROR_RESPONSES,
    MAX_EMBEDDING_CHARS,
    OWNER,
    Annotation,
    AssistantMessage,
    ChatCompletion,
    ChatCompletionRequest,
    Choice,
    EmbeddingList,
    EmbeddingRequest,
    EmbeddingUsage,
    ModelCard,
    ModelList,
    OpenAIChatMessage,
    OpenAIEmbedding,
    OpenAIImagePart,
    Refusal,
    TextPart,
    Usage,
)
from knowsphere_gateway.domain.annotations import AnnotatedStream, DocumentUrl, annotations_of, located
from knowsphere_gateway.domain.applications import ApplicationRecord, ApplicationStore
from knowsphere_runtime.bus import Fanout
from knowsphere_telemetry import attributes

tracer = trace.get_tracer(__name__)
log = structlog.get_logger(__name__)


def _param(location: tuple[Any, ...]) -> str:
    """``("body", "messages", 0, "content")`` → ``messages[0].content``."""
    name = ""
    for part in location[1:] if location and location[0] == "body" else location:
        name += f"[{part}]" if isinstance(part, int) else f".{part}" if name else str(part)
    return name


def refusal_of(error: Exception) -> tuple[Refusal, dict[str, str] | None]:
    """The OpenAI-shaped refusal of any error the gateway's routes raise."""
    if isinstance(error, Refusal):
        return error, None
    if isinstance(error, Unauthenticated):
        return Refusal(401, error.body["code"], error.body["message"]), {"www-authenticate": "Bearer"}
    if isinstance(error, HttpError):
        body = error.body
        headers = dict(error.headers) or None  # e.g. Retry-After of a rate limit
        return Refusal(error.status_code, body["code"], body["message"], body.get("field")), headers
    if isinstance(error, ServiceError):
        body = error_body(error)
        return Refusal(http_status(error), body["code"], body["message"], body.get("field")), None
    if isinstance(error, StarletteHTTPException):  # e.g. a body that is not JSON at all
        code = "invalid_argument" if error.status_code == 400 else f"http_{error.status_code}"
        return Refusal(error.status_code, code, str(error.detail)), dict(error.headers or {}) or None
    assert isinstance(error, RequestValidationError)
    problems = error.errors()
    first = problems[0] if problems else {"loc": (), "msg": "malformed request"}
    param = _param(tuple(first.get("loc", ())))
    message = "; ".join(
        f"{_param(tuple(p.get('loc', ()))) or 'body'}: {p.get('msg', 'invalid')}" for p in problems[:5]
    )
    return Refusal(400, "invalid_argument", message or "malformed request", param or None), None


REFUSED = (Refusal, HttpError, ServiceError, RequestValidationError, StarletteHTTPException)


class OpenAIRoute(APIRoute):
    """A route whose every refusal — authentication, role, validation, a service's — is OpenAI's
    error JSON rather than the gateway's own shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except (
                Refusal,
                HttpError,
                ServiceError,
                RequestValidationError,
                StarletteHTTPException,
            ) as error:
                refusal, headers = refusal_of(error)
                return refusal.response(headers)

        return handle


# --- what a request asks --------------------------------------------------------------------------


def _text_and_images(message: OpenAIChatMessage, index: int) -> tuple[str, list[str]]:
    if message.content is None:
        return "", []
    if isinstance(message.content, str):
        text, images = message.content, []
    else:
        text = "\n".join(p.text for p in message.content if isinstance(p, TextPart))
        images = [p.image_url.url for p in message.content if isinstance(p, OpenAIImagePart)]
    if len(text) > MAX_MESSAGE_CHARS:
        raise Refusal(
            400,
            "invalid_argument",
            f"messages[{index}].content: {len(text)} characters; at most {MAX_MESSAGE_CHARS}",
            f"messages[{index}].content",
        )
    return text, images


def conversation_of(messages: list[OpenAIChatMessage]) -> tuple[str, list[str], list[HistoryMessage]]:
    """The question (the last message, a user's), its images, and the history before it: the newest
    user and assistant messages within the bus's limits."""
    last = len(messages) - 1
    if messages[last].role != "user":
        raise Refusal(
            400,
            "invalid_argument",
            f"messages[{last}].role: the last message must be the user's question",
            f"messages[{last}].role",
        )
    question, images = _text_and_images(messages[last], last)
    if not question.strip():
        raise Refusal(
            400, "invalid_argument", f"messages[{last}].content: the question is empty", f"messages[{last}]"
        )
    if len(images) > MAX_IMAGES_PER_MESSAGE:
        raise Refusal(
            400,
            "invalid_argument",
            f"messages[{last}].content: {len(images)} images; at most {MAX_IMAGES_PER_MESSAGE}",
            f"messages[{last}].content",
        )
    try:
        check_images_total(images)
    except ValueError as error:
        raise Refusal(
            400, "invalid_argument", f"messages[{last}].content: {error}", f"messages[{last}].content"
        ) from None
    history: list[HistoryMessage] = []
    chars = 0
    for index in range(last - 1, -1, -1):
        message = messages[index]
        if message.role not in ("user", "assistant"):
            continue  # the agent's own instructions apply
        text, _ = _text_and_images(message, index)
        if not text.strip():
            continue
        if len(history) == MAX_HISTORY_MESSAGES or chars + len(text) > MAX_HISTORY_CHARS:
            break
        chars += len(text)
        history.append(HistoryMessage(role=message.role, content=text))
    history.reverse()
    return question, images, history


def _refuse_unsupported(body: ChatCompletionRequest) -> None:
    if body.tools:
        raise Refusal(
            400,
            "unsupported_parameter",
            "tools: not supported; KnowSphere agents run their own tools",
            "tools",
        )
    if body.response_format and body.response_format.get("type", "text") != "text":
        raise Refusal(
            400,
            "unsupported_value",
            "response_format: only {'type': 'text'} is supported",
            "response_format",
        )


def _model_not_found(model: str, why: str = "does not exist") -> Refusal:
    return Refusal(404, "model_not_found", f"The model `{model}` {why}.", "model")


def _not_found(error: ServiceError) -> bool:
    return error.status in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)


TURN_ERROR_STATUS = {
    "invalid_input": 400,
    "agent_not_found": 404,
    "agent_inactive": 404,
    "orchestrator_not_found": 404,
    "orchestrator_inactive": 404,
    "orchestration_mode_unavailable": 501,
    TURN_TIMEOUT_CODE: 504,
    BUS_UNAVAILABLE_CODE: 503,
    ModelErrorCode.RATE_LIMITED.value: 429,
    ModelErrorCode.QUOTA_EXHAUSTED.value: 429,
    ModelErrorCode.CONTENT_FILTERED.value: 400,
    ModelErrorCode.NO_MODEL_CONFIGURED.value: 503,
    ModelErrorCode.TIMEOUT.value: 504,
}


def turn_refusal(event: ChatTurnEvent) -> Refusal:
    """A turn that ended without an answer, as an error."""
    if event.kind is TurnEventKind.CANCELLED:
        return Refusal(499, "turn_cancelled", "the answer was cancelled")
    code = event.error_code or "turn_failed"
    return Refusal(TURN_ERROR_STATUS.get(code, 502), code, event.error_message or "the turn failed")


def _application_card(application: ApplicationRecord) -> ModelCard:
    return ModelCard(
        id=application.name,
        object="model",
        created=int(application.create_time.timestamp()),
        owned_by=application.tenant_id,
        application_id=application.id,
        display_name=application.display_name,
        description=f"application on {application.platform} running orchestrator "
        f"{application.orchestrator_id}",
    )


def _data(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def _usage(event: ChatTurnEvent) -> Usage:
    prompt, completion = event.prompt_tokens or 0, event.completion_tokens or 0
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


# --- the router -----------------------------------------------------------------------------------


def build_openai_router(
    bus: GatewayBus,
    events: Fanout[ChatTurnEvent],
    caller: Callable[..., Caller],
    turn_timeout_seconds: float,
    conversation: ConversationClient,
    ingestion: IngestionClient,
    modelhub: ModelHubClient,
    applications: ApplicationStore,
) -> APIRouter:
    """``events`` is fed by the bus's subscriber of turn events; ``turn_timeout_seconds`` is the longest
    wait for a turn's next event; ``applications`` are the tenants' applications (models too)."""
    router = APIRouter(prefix="/v1", tags=["openai"], route_class=OpenAIRoute, responses=ERROR_RESPONSES)
    Who = Annotated[Caller, Depends(caller)]

    async def agents() -> list[cpb.Agent]:
        found: list[cpb.Agent] = []
        token = ""
        while True:
            page = await conversation.list_agents(cpb.ListAgentsRequest(page_token=token))
            found.extend(page.agents)
            token = page.next_page_token
            if not token or not page.agents:
                return found

    async def agent_named(model: str) -> cpb.Agent | None:
        """The agent ``model`` names (None: the default agent); 404 for an unknown or switched-off one."""
        if model == DEFAULT_MODEL:
            return None
        agent: cpb.Agent | None
        with tracer.start_as_current_span("gateway.openai.resolve_model"):
            try:
                agent = await conversation.get_agent(model)
            except ServiceError as error:
                if not _not_found(error):
                    raise
                agent = next((a for a in await agents() if a.name == model), None)
        if agent is None or not agent.id:
            raise _model_not_found(model)
        if not agent.active:
            raise _model_not_found(model, "is switched off")
        return agent

    async def application_named(who: Caller, model: str) -> ApplicationRecord | None:
        """The application ``model`` names, if any (404 for a switched-off one); an application's token
        may name only its own (400 naming ``model`` otherwise)."""
        own = who.application
        if own is not None:
            if model != own.name:
                raise Refusal(
                    400,
                    "invalid_argument",
                    f"model: this token is for application {own.name}; send model={own.name!r}",
                    "model",
                )
            return own
        found = await applications.get_by_name(who.identity.tenant_id, model)
        if found is not None and not found.active:
            raise _model_not_found(model, "is switched off")
        return found

    async def knowledge_bases(
        agent: cpb.Agent | None, extra: list[str], *, fallback: bool = True
    ) -> list[str]:
        for kb_id in extra:
            try:
                await ingestion.get_knowledge_base(kb_id)
            except ServiceError as error:
                if not _not_found(error):
                    raise
                raise Refusal(
                    404, "not_found", f"knowledge base {kb_id} not found", "knowledge_base_ids"
                ) from None
        chosen = list(dict.fromkeys([*(agent.knowledge_base_ids if agent else ()), *extra]))
        if len(chosen) > MAX_KNOWLEDGE_BASES_PER_TURN:
            raise Refusal(
                400,
                "invalid_argument",
                f"knowledge_base_ids: {len(chosen)} with the agent's; at most {MAX_KNOWLEDGE_BASES_PER_TURN}",
                "knowledge_base_ids",
            )
        if not chosen and agent is None and fallback:
            listed = await ingestion.list_knowledge_bases(
                ipb.ListKnowledgeBasesRequest(page_size=MAX_KNOWLEDGE_BASES_PER_TURN)
            )
            chosen = [kb.id for kb in listed.knowledge_bases]
        return chosen

    cancelling: set[asyncio.Task[None]] = set()

    async def cancel(who: Caller, turn_id: str) -> None:
        try:
            with who.bound():
                await conversation.cancel_turn(turn_id)
        except ServiceError as error:
            log.warning("abandoned turn not cancelled", turn_id=turn_id, error=str(error))

    async def turn_events(who: Caller, chat: ChatRequested) -> AsyncIterator[ChatTurnEvent]:
        """The turn's events, to its final one (an ``error`` ``turn_timeout`` when it falls silent).

        A client that goes away before the final event cannot come back for the rest (an OpenAI-style
        answer has no resume), so its turn is cancelled instead of spending the model's tokens.
        """
        ended = False
        with tracer.start_as_current_span("gateway.openai.turn") as span:
            span.set_attribute(attributes.TURN_ID, chat.turn_id)
            span.set_attribute(attributes.KNOWLEDGE_BASE_IDS, chat.knowledge_base_ids)
            try:
                async for event in requested_turn_events(bus, events, who, chat, turn_timeout_seconds):
                    if event.error_code:
                        span.set_attribute(attributes.ERROR_CODE, event.error_code)
                    ended = event.is_final
                    yield event
            finally:
                if not ended:
                    span.set_attribute(attributes.ERROR_CODE, "client_disconnected")
                    # A task of its own: this one is being cancelled with the request.
                    task = asyncio.get_running_loop().create_task(cancel(who, chat.turn_id))
                    cancelling.add(task)
                    task.add_done_callback(cancelling.discard)

    def document_url(request: Request) -> DocumentUrl:
        base = str(request.base_url).rstrip("/")
        return lambda source: f"{base}/api/v1/documents/{source.document_id}" if source.document_id else ""

    @router.post(
        "/chat/completions",
        response_model=ChatCompletion,
        responses={
            200: {
                "description": "the completion; with `stream: true`, server-sent `data:` events, each a "
                "chat.completion.chunk, ending with `data: [DONE]`",
                "content": {"text/event-stream": {"schema": CHUNK_SCHEMA}},
            }
        },
    )
    async def chat_completions(body: ChatCompletionRequest, request: Request, who: Who) -> Response:
        """Ask an agent or an application, OpenAI-style; the answer cites its sources (``[[cN]]`` and
        annotations)."""
        _refuse_unsupported(body)
        question, images, history = conversation_of(body.messages)
        application = await application_named(who, body.model)
        agent: cpb.Agent | None = None
        with who.bound():
            if application is None:
                agent = await agent_named(body.model)
                kb_ids = await knowledge_bases(agent, body.knowledge_base_ids)
            else:  # the application's orchestrator chooses its knowledge; only those asked for are added
                kb_ids = await knowledge_bases(None, body.knowledge_base_ids, fallback=False)
        turn_id = uuid.uuid4().hex
        chat = ChatRequested(
            turn_id=turn_id,
            message=question,
            knowledge_base_ids=kb_ids,
            web_search=body.web_search,
            knowledge_graph=body.knowledge_graph,
            images=images,
            agent_id=agent.id if agent else "",
            orchestrator_id=application.orchestrator_id if application else "",
            history=history,
        )
        completion_id, created = f"chatcmpl-{turn_id}", int(time.time())
        url = document_url(request)
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            head = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": body.model,
            }
            chunks = streamed(who, chat, head, url, include_usage)
            return StreamingResponse(chunks, media_type="text/event-stream")
        final: ChatTurnEvent | None = None
        async for event in turn_events(who, chat):
            final = event
        assert final is not None
        if final.kind is not TurnEventKind.COMPLETED:
            raise turn_refusal(final)
        text = final.text or ""
        completion = ChatCompletion(
            id=completion_id,
            object="chat.completion",
            created=created,
            model=body.model,
            choices=[
                Choice(
                    index=0,
                    message=AssistantMessage(
                        role="assistant",
                        content=text,
                        annotations=[Annotation(**a) for a in annotations_of(text, final.citations, url)],
                    ),
                    finish_reason="stop",
                )
            ],
            usage=_usage(final),
            citations=[located(c, url).model_dump() for c in final.citations],
        )
        return JSONResponse(completion.model_dump(mode="json"))

    async def streamed(
        who: Caller, chat: ChatRequested, head: dict[str, Any], url: DocumentUrl, include_usage: bool
    ) -> AsyncIterator[str]:
        """The turn as chat.completion.chunk events (``head``: their id, object, created and model)."""

        def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            return _data({**head, "choices": [choice], **extra})

        annotated = AnnotatedStream(url)
        yield chunk({"role": "assistant", "content": ""})
        async for event in turn_events(who, chat):
            if event.kind is TurnEventKind.SOURCES:
                annotated.add_sources(event.citations)
                continue
            if event.kind is TurnEventKind.TEXT_DELTA:
                pieces = annotated.feed(event.text or "")
            elif event.kind is TurnEventKind.COMPLETED:
                annotated.add_sources(event.citations)
                pieces = annotated.flush()
            elif event.is_final:
                yield _data(turn_refusal(event).body())
                return
            else:
                continue
            for piece in pieces:
                if piece.annotations:
                    yield chunk({"annotations": piece.annotations})
                yield chunk({"content": piece.content})
            if event.kind is TurnEventKind.COMPLETED:
                citations = [located(c, url).model_dump(mode="json") for c in event.citations]
                yield chunk({}, "stop", citations=citations)
                if include_usage:
                    usage = _usage(event).model_dump()
                    yield _data({**head, "choices": [], "usage": usage, "citations": citations})
                yield "data: [DONE]\n\n"
                return

    @router.get("/models", response_model=ModelList)
    async def list_models(who: Who) -> dict[str, Any]:
        """The default agent and the tenant's active agents and applications, as models to name in chat
        completions (an application's token: its application only)."""
        if who.application is not None:
            return ModelList(object="list", data=[_application_card(who.application)]).model_dump(mode="json")
        with who.bound():
            found = await agents()
        default = ModelCard(
            id=DEFAULT_MODEL,
            object="model",
            created=0,
            owned_by=OWNER,
            display_name="KnowSphere",
            description="the default agent: the tenant's default chat model over its knowledge bases",
        )
        cards = [default] + [
            ModelCard(
                id=a.name,
                object="model",
                created=a.create_time.seconds,
                owned_by=who.identity.tenant_id,
                agent_id=a.id,
                display_name=a.display_name or a.name,
                description=a.description,
            )
            for a in found
            if a.active
        ]
        apps = await applications.list(who.identity.tenant_id)
        cards.extend(_application_card(a) for a in apps if a.active)
        return ModelList(object="list", data=cards).model_dump(mode="json")

    async def embedding_model(model: str) -> str:
        """The modelhub id of the embedding model ``model`` names ("" for the tenant's default)."""
        if model in DEFAULT_EMBEDDING_MODELS:
            return ""
        token = ""
        while True:
            page = await modelhub.list_models(
                mpb.ListModelsRequest(type=ModelType.EMBEDDING.to_proto(), page_token=token)
            )
            for candidate in page.models:
                if model in (candidate.id, candidate.model_name, candidate.display_name):
                    return candidate.id
            token = page.next_page_token
            if not token or not page.models:
                raise _model_not_found(model)

    @router.post("/embeddings", response_model=EmbeddingList)
    async def embeddings(body: EmbeddingRequest, who: Who) -> dict[str, Any]:
        """Vectors of texts from an embedding model of modelhub, OpenAI-style."""
        texts = [body.input] if isinstance(body.input, str) else list(body.input)
        total = sum(len(t) for t in texts)
        if total > MAX_EMBEDDING_CHARS:
            raise Refusal(
                400, "invalid_argument", f"input: {total} characters; at most {MAX_EMBEDDING_CHARS}", "input"
            )
        with tracer.start_as_current_span("gateway.openai.embed") as span, who.bound():
            span.set_attribute(attributes.RESULT_COUNT, len(texts))
            model_id = await embedding_model(body.model)
            embedded = await modelhub.embed_counted(model_id, [str(t) for t in texts])
        vectors = embedded.vectors
        if body.dimensions is not None and vectors and len(vectors[0]) != body.dimensions:
            raise Refusal(
                400,
                "unsupported_value",
                f"dimensions: the model gives {len(vectors[0])}-dimensional vectors, not {body.dimensions}",
                "dimensions",
            )
        data = [
            OpenAIEmbedding(
                object="embedding",
                index=index,
                embedding=(
                    base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
                    if body.encoding_format == "base64"
                    else vector
                ),
            )
            for index, vector in enumerate(vectors)
        ]
        # The tokens the model read, as modelhub counted them (0 when its provider reports none).
        usage = EmbeddingUsage(prompt_tokens=embedded.prompt_tokens, total_tokens=embedded.prompt_tokens)
        return EmbeddingList(object="list", data=data, model=body.model, usage=usage).model_dump(mode="json")

    return router


__all__ = ["OpenAIRoute", "build_openai_router", "conversation_of", "refusal_of", "turn_refusal"]
