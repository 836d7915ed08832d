"""In-process stand-ins for the conversation's peers, speaking the contract's messages: modelhub's
ChatStream / Decide events, toolrunner's ListTools / ExecuteTool responses, memory's texts and
retrieval's passages. Each test scripts what the model says.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere.toolrunner.v1 import toolrunner_pb2 as tpb
from knowsphere_clients.errors import FailedPrecondition, ModelFailure, ServiceError
from knowsphere_conversation.domain.graph import Summary
from knowsphere_runtime.identity import Identity

CALLER = Identity("acme", "alice")
Script = Callable[[mpb.ChatStreamRequest], list[mpb.ChatStreamResponse]]


def text(*pieces: str) -> list[mpb.ChatStreamResponse]:
    events = [mpb.ChatStreamResponse(text_delta=mpb.TextDelta(text=p)) for p in pieces]
    events.append(mpb.ChatStreamResponse(usage=mpb.TokenUsage(prompt_tokens=100, completion_tokens=10)))
    return events


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call-1") -> list[mpb.ChatStreamResponse]:
    raw = json.dumps(arguments)
    return [
        mpb.ChatStreamResponse(
            tool_call_delta=mpb.ToolCallDelta(index=0, id=call_id, name=name, arguments_delta=raw[:5])
        ),
        mpb.ChatStreamResponse(tool_call_delta=mpb.ToolCallDelta(index=0, arguments_delta=raw[5:])),
    ]


def no_model() -> ServiceError:
    return FailedPrecondition(
        "no chat model",
        model=ModelFailure(code=ModelErrorCode.NO_MODEL_CONFIGURED, user_message="add a model"),
    )


class Models:
    """modelhub as the graph sees it; ``agent`` answers the main requests, ``intent`` names the label."""

    def __init__(
        self, agent: Script, intent: str = "E", *, missing: bool = False, vision: str | None = "a bar chart"
    ) -> None:
        self.agent = agent
        self.intent = intent
        self.missing = missing
        self.vision = vision  # what the vision model sees in any image; None: no vision model configured
        self.requests: list[mpb.ChatStreamRequest] = []
        self.decisions: list[mpb.DecideRequest] = []
        self.described: list[mpb.DescribeImageRequest] = []

    async def describe(self, request: mpb.DescribeImageRequest) -> mpb.DescribeImageResponse:
        self.described.append(request)
        if self.vision is None:
            raise no_model()
        return mpb.DescribeImageResponse(description=self.vision)

    async def decide(self, request: mpb.DecideRequest) -> mpb.DecideResponse:
        if self.missing:
            raise no_model()
        self.decisions.append(request)
        return mpb.DecideResponse(label=self.intent, probability=0.9, method=mpb.DECISION_METHOD_LOGPROBS)

    def chat_stream(self, request: mpb.ChatStreamRequest) -> AsyncIterator[mpb.ChatStreamResponse]:
        async def events() -> AsyncIterator[mpb.ChatStreamResponse]:
            if self.missing:
                raise no_model()
            self.requests.append(request)
            if request.purpose == "conversation.rewrite":
                yield from_text(f"rewritten: {request.messages[-1].content[0].text.splitlines()[-1]}")
                return
            for event in self.agent(request):
                if isinstance(event, BaseException):
                    raise event
                yield event

        return events()


def from_text(value: str) -> mpb.ChatStreamResponse:
    return mpb.ChatStreamResponse(text_delta=mpb.TextDelta(text=value))


class Tools:
    """The tool runner: doc_retrieval finds one passage per call, numbered after the turn's sources."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.listed: list[tpb.ListToolsRequest] = []
        self.executed: list[tpb.ExecuteToolRequest] = []

    async def list_tools(self, request: tpb.ListToolsRequest) -> tpb.ListToolsResponse:
        self.listed.append(request)
        schema = '{"properties":{"query":{"type":"string"}},"type":"object"}'
        return tpb.ListToolsResponse(
            tools=[tpb.ToolSpec(name="doc_retrieval", description="search", parameters_json_schema=schema)]
        )

    async def execute_tool(self, request: tpb.ExecuteToolRequest) -> tpb.ExecuteToolResponse:
        self.executed.append(request)
        if self.fail:
            return tpb.ExecuteToolResponse(
                error=tpb.ToolError(code=tpb.TOOL_ERROR_CODE_FAILED, message="retrieval is down"), attempts=3
            )
        n = len(request.context.sources) + 1
        source = tpb.Source(
            label=f"c{n}",
            handle=f"h-{n}",
            index=n,
            kind=tpb.SOURCE_KIND_CHUNK,
            chunk_id=f"chunk-{n}",
            document_id="doc-handbook",
            file_name="handbook.pdf",
            knowledge_base_id="kb-1",
            snippet="Employees get 25 days of annual leave.",
        )
        return tpb.ExecuteToolResponse(
            content=f"[c{n}] Employees get 25 days of annual leave.", sources=[source], attempts=1
        )


class Memory:
    """Memory as the graph sees it: fixed background and summary; records what the turn asked of it."""

    def __init__(self, background: str = "", handoff: str = "", *, compacts_to: str = "") -> None:
        self._background = background
        self._summary = Summary(text=handoff, revision=1 if handoff else 0)
        self._compacts_to = compacts_to
        self.statements: list[str] = []
        self.compactions: list[dict[str, Any]] = []
        self.notes: list[tuple[str, str, str]] = []

    async def background(self, knowledge_base_ids: Sequence[str], language: str) -> str:
        return self._background

    async def summary(self, session_id: str) -> Summary:
        return self._summary

    async def working_memory(self, session_id: str) -> str:
        return "\n".join(f"- {q} → {a}" for _, q, a in self.notes)

    async def note_turn(self, session_id: str, turn_id: str, question: str, answer: str) -> None:
        self.notes.append((turn_id, question, answer))

    async def apply_statements(self, text: str, session_id: str, message_id: str) -> None:
        self.statements.append(text)

    async def compact(self, session_id: str, messages: Sequence[Any], **fields: Any) -> Summary | None:
        self.compactions.append({"messages": list(messages), **fields})
        if not self._compacts_to:
            return None
        # Everything but the current question is archived.
        self._summary = Summary(self._compacts_to, messages[-2]["id"], self._summary.revision + 1)
        return self._summary


class Search:
    def __init__(self, results: Sequence[rpb.SearchResult] = ()) -> None:
        self.results = list(results)
        self.queries: list[str] = []

    async def __call__(self, query: str, knowledge_base_ids: Sequence[str]) -> Sequence[rpb.SearchResult]:
        self.queries.append(query)
        return self.results
