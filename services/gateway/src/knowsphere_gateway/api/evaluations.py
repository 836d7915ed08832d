"""Retrieval evaluation runs (``/api/v1/knowledge-bases/{kb_id}/evaluations``, ``/api/v1/evaluations``):
labelled questions run through a knowledge base's search in several modes, scored per question
(nDCG@10, Recall@5/10/20, MRR@10) and averaged per mode, kept as a run that can be listed, read and
deleted.

A run is started (202) and runs in the background (``api/evaluation_runs.py``); its ``progress`` moves
as batches of questions are scored. The knowledge base must be one of the caller's tenant (404
otherwise, checked before anything else); another tenant's run is a 404 like one that never was.

A request outside the limits is a 400 naming the field and the limit (413 for more questions than a
run takes); a tenant with as many runs running as it may is answered 429. The bodies are hand-written:
runs are the gateway's own records; the averages of a mode are retrieval's ``RankingMetrics`` as JSON.
"""

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, Field, WithJsonSchema, create_model

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere.retrieval.v1.retrieval_enums import SearchMode
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import SERVICE_RESPONSES, HttpError, error_response
from knowsphere_gateway.api.evaluation_runs import EvaluationRuns
from knowsphere_gateway.api.knowledge import PageSize
from knowsphere_gateway.api.protojson import JSON_INTEGER, RequestBody, json_model
from knowsphere_gateway.api.search import MAX_QUERY_CHARS
from knowsphere_gateway.domain.evaluations import (
    DEFAULT_MODES,
    MAX_EVALUATION_NAME_CHARS,
    MAX_EVALUATION_QUERIES,
    MAX_GRADE,
    MAX_LABELS_PER_QUERY,
    MAX_QUERY_ID_CHARS,
    METRICS,
    EvaluationQuery,
    EvaluationRefused,
    EvaluationRun,
    EvaluationStatus,
    TooManyRunning,
    check_modes,
    check_name,
    check_queries,
)
from knowsphere_sqlstore import decode_page_token, encode_page_token

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200

# The limits are checked by the route (400 or 413 naming the field and the limit, rather than a 422);
# the schema states them.
Grade = Annotated[int, JSON_INTEGER, WithJsonSchema({"type": "integer", "minimum": 0, "maximum": MAX_GRADE})]


class EvaluationQueryBody(RequestBody):
    """A labelled question."""

    id: str = Field(
        description=f"unique in the run, at most {MAX_QUERY_ID_CHARS} characters (BEIR's query id)",
        json_schema_extra={"minLength": 1, "maxLength": MAX_QUERY_ID_CHARS},
    )
    text: str = Field(
        description=f"the question, at most {MAX_QUERY_CHARS} characters",
        json_schema_extra={"minLength": 1, "maxLength": MAX_QUERY_CHARS},
    )
    relevant: dict[str, Grade] = Field(
        default_factory=dict,
        description=f"relevance judgements, label → grade 0..{MAX_GRADE} (0: judged not relevant), at most "
        f"{MAX_LABELS_PER_QUERY}; a label names a document by its id, its file name, or its file name "
        "without the extension (a BEIR corpus uploaded as <corpus-id>.txt is judged by corpus id)",
        json_schema_extra={"maxProperties": MAX_LABELS_PER_QUERY},
    )


class EvaluationCreate(RequestBody):
    name: str = Field(
        default="",
        description=f"at most {MAX_EVALUATION_NAME_CHARS} characters",
        json_schema_extra={"maxLength": MAX_EVALUATION_NAME_CHARS},
    )
    modes: list[SearchMode] | None = Field(
        default=None, description="the search modes to evaluate, each once; absent or null: all of them"
    )
    queries: list[EvaluationQueryBody] = Field(
        description=f"at most {MAX_EVALUATION_QUERIES}; at least one must judge a document relevant",
        json_schema_extra={"minItems": 1, "maxItems": MAX_EVALUATION_QUERIES},
    )


RankingMetricsJson = json_model(rpb.RankingMetrics.DESCRIPTOR)

EvaluationModeResult: type[BaseModel] = create_model(
    "EvaluationModeResult",
    __doc__="One question's scores in one mode and the first 10 documents found (file names without the "
    "extension), best first.",
    **{name: (float, ...) for name in METRICS},  # type: ignore[call-overload]
    ranking=(list[str], ...),
)


class EvaluationProgress(BaseModel):
    done: int = Field(description="questions scored so far")
    total: int = Field(description="questions of the run")


class Evaluation(BaseModel):
    """A run without its questions."""

    id: str
    knowledge_base_id: str
    name: str
    status: EvaluationStatus = Field(
        description="running, then completed; failed with an error (also when a restart interrupted it)"
    )
    modes: list[SearchMode]
    created_at: datetime
    finished_at: datetime | None
    progress: EvaluationProgress
    error: str | None = Field(description="why the run failed; null unless failed")
    metrics: dict[str, RankingMetricsJson] = Field(  # type: ignore[valid-type]
        description="per mode, each score averaged over the questions that judge a document relevant; {} "
        "until the run has completed"
    )

    @classmethod
    def of(cls, run: EvaluationRun) -> "Evaluation":
        return cls(
            id=run.id,
            knowledge_base_id=run.knowledge_base_id,
            name=run.name,
            status=run.status,
            modes=list(run.modes),
            created_at=run.created_at,
            finished_at=run.finished_at,
            progress=EvaluationProgress(done=run.done, total=run.total),
            error=run.error,
            metrics={mode.value: dict(values) for mode, values in run.metrics.items()},
        )


class EvaluationQueryResult(BaseModel):
    id: str
    text: str
    relevant: dict[str, int]
    results: dict[str, EvaluationModeResult] = Field(  # type: ignore[valid-type]
        description="per mode, once the question has been scored; {} before"
    )

    @classmethod
    def of(cls, query: EvaluationQuery) -> "EvaluationQueryResult":
        return cls(
            id=query.id,
            text=query.text,
            relevant=dict(query.relevant),
            results={
                mode.value: {**result.scores, "ranking": list(result.ranking)}
                for mode, result in query.results.items()
            },
        )


class EvaluationDetail(Evaluation):
    """A run with its questions, in the order they were given."""

    queries: list[EvaluationQueryResult]


class EvaluationList(BaseModel):
    evaluations: list[Evaluation] = Field(description="newest first")
    next_page_token: str = Field(description="for the next page; empty on the last")


NOT_FOUND: dict[int | str, dict[str, Any]] = {404: error_response("no such run of the caller's tenant")}
REFUSED: dict[int | str, dict[str, Any]] = {
    400: error_response("a field is outside its limits (error.field names it, the message the limit)"),
    404: error_response("no such knowledge base of the caller's tenant"),
    413: error_response(f"more than {MAX_EVALUATION_QUERIES} queries, or a body over the size limit"),
    429: error_response("the tenant already has as many evaluation runs running as it may"),
}


def not_found(evaluation_id: str) -> HttpError:
    return HttpError(404, "not_found", f"evaluation {evaluation_id} not found")


def refused(error: EvaluationRefused) -> HttpError:
    if error.too_large:
        return HttpError(413, "payload_too_large", str(error), field=error.field)
    return HttpError(400, "invalid_argument", str(error), field=error.field)


def page_after(page_token: str) -> tuple[datetime, str] | None:
    if not page_token:
        return None
    try:
        created_at, last_id = decode_page_token(page_token, 2)
        after = datetime.fromisoformat(created_at)
    except ValueError:
        raise HttpError(
            400, "invalid_argument", "page_token: not a token from a previous response", field="page_token"
        ) from None
    if after.tzinfo is None:
        raise HttpError(
            400, "invalid_argument", "page_token: not a token from a previous response", field="page_token"
        )
    return after, last_id


def build_evaluations_router(
    runs: EvaluationRuns,
    caller: Callable[..., Awaitable[Caller]],
    knowledge_base_exists: Callable[..., Awaitable[str]],
) -> APIRouter:
    """``knowledge_base_exists`` checks the path's knowledge base as the caller (404 first)."""
    router = APIRouter(prefix="/api/v1", tags=["evaluation"], responses=SERVICE_RESPONSES)
    Who = Annotated[Caller, Depends(caller)]
    KnowledgeBase = Annotated[str, Depends(knowledge_base_exists)]
    store = runs.store

    @router.post(
        "/knowledge-bases/{kb_id}/evaluations", status_code=202, response_model=Evaluation, responses=REFUSED
    )
    async def start_evaluation(kb_id: KnowledgeBase, body: EvaluationCreate, who: Who) -> Evaluation:
        """Starts a run over the knowledge base; it goes on in the background (read its progress)."""
        queries = [
            EvaluationQuery(position, query.id, query.text, dict(query.relevant))
            for position, query in enumerate(body.queries)
        ]
        try:
            name = check_name(body.name)
            modes = check_modes(DEFAULT_MODES if body.modes is None else body.modes)
            check_queries(queries, max_query_chars=MAX_QUERY_CHARS)
            run = await runs.begin(who.identity, kb_id, name, modes, queries)
        except EvaluationRefused as error:
            raise refused(error) from None
        except TooManyRunning as error:
            raise HttpError(429, "too_many_running_evaluations", str(error)) from None
        return Evaluation.of(run)

    @router.get("/knowledge-bases/{kb_id}/evaluations", response_model=EvaluationList)
    async def list_evaluations(
        kb_id: KnowledgeBase, who: Who, page_size: PageSize = 0, page_token: str = ""
    ) -> EvaluationList:
        """The knowledge base's runs, newest first, without their questions."""
        size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        found = await store.list(who.identity.tenant_id, kb_id, limit=size + 1, after=page_after(page_token))
        token = ""
        if len(found) > size:
            last = found[size - 1]
            token = encode_page_token([last.created_at.isoformat(), last.id])
        return EvaluationList(evaluations=[Evaluation.of(run) for run in found[:size]], next_page_token=token)

    @router.get("/evaluations/{evaluation_id}", response_model=EvaluationDetail, responses=NOT_FOUND)
    async def get_evaluation(evaluation_id: str, who: Who) -> EvaluationDetail:
        """The run with its averages and every question with its scores and rankings per mode."""
        tenant_id = who.identity.tenant_id
        run = await store.get(tenant_id, evaluation_id)
        if run is None:
            raise not_found(evaluation_id)
        queries = await store.queries(tenant_id, evaluation_id)
        summary = Evaluation.of(run)
        return EvaluationDetail(
            **dict(summary), queries=[EvaluationQueryResult.of(query) for query in queries]
        )

    @router.delete("/evaluations/{evaluation_id}", status_code=204, responses=NOT_FOUND)
    async def delete_evaluation(evaluation_id: str, who: Who) -> Response:
        """Deletes the run with its results; a running run is cancelled first."""
        if not await runs.delete(who.identity.tenant_id, evaluation_id):
            raise not_found(evaluation_id)
        return Response(status_code=204)

    return router


__all__ = [
    "Evaluation",
    "EvaluationCreate",
    "EvaluationDetail",
    "EvaluationList",
    "EvaluationQueryResult",
    "build_evaluations_router",
]
