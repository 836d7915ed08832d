"""Retrieval evaluation runs through the gateway (``/api/v1/knowledge-bases/{kb_id}/evaluations``,
``/api/v1/evaluations/{id}``), in the background of the gateway's process, on its SQLite database.

What a caller notices: a run over a tiny knowledge base served by retrieval's own servicers completes
with figures that can be worked out by hand (per question and averaged per mode over the questions that
judge a document relevant); its progress moves batch by batch; each limit is refused naming the field
and the limit; a tenant runs at most two at once; another tenant can neither see, read nor delete a run,
nor start one on a knowledge base that is not its own; a failed retrieval call fails the run with a
message a person can read; a run left running by a gateway that died is failed at start-up (on a
shared database only once its heartbeat has stopped); deleting a running run cancels it and stopping
the gateway fails its runs as interrupted. Other peers are fakes on real gRPC servers.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from knowsphere.ingestion.v1 import ingestion_pb2 as ipb
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere.retrieval.v1.retrieval_enums import SearchMode
from knowsphere_clients import RetrievalClient
from knowsphere_gateway.adapters.evaluations_sql import SqlEvaluationStore
from knowsphere_gateway.api.evaluation_runs import EvaluationRuns
from knowsphere_gateway.domain.evaluations import (
    INTERRUPTED,
    EvaluationOptions,
    EvaluationQuery,
    EvaluationRun,
    EvaluationStatus,
)
from knowsphere_gateway.domain.tokens import Role, TokenService
from knowsphere_runtime.identity import Identity, require_identity

OWNER, STRANGER = Identity("acme", "alice"), Identity("globex", "mallory")
KB = "kb-1"
Headers = dict[str, str]
RUN_KEYS = {
    "id",
    "knowledge_base_id",
    "name",
    "status",
    "modes",
    "created_at",
    "finished_at",
    "progress",
    "error",
    "metrics",
}
METRIC_KEYS = {"ndcg_at_10", "recall_at_5", "recall_at_10", "recall_at_20", "mrr_at_10"}


class FakeIngestion:
    """Knows ``kb-1`` of the owner's tenant only."""

    async def GetKnowledgeBase(self, request: ipb.GetKnowledgeBaseRequest, context: Any) -> Any:
        if require_identity().tenant_id != OWNER.tenant_id or request.knowledge_base_id != KB:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"knowledge base {request.knowledge_base_id} not found"
            )
        return ipb.GetKnowledgeBaseResponse(knowledge_base=ipb.KnowledgeBase(id=KB, name="handbook"))


def scored(query: rpb.EvaluationQuery, mode: int) -> rpb.ModeEvaluation:
    """A fake's score: the question's first label found first (nDCG 1), in every mode."""
    first = sorted(query.relevance)[:1]
    value = 1.0 if first else 0.0
    metrics = rpb.RankingMetrics(
        ndcg_at_10=value, recall_at_5=value, recall_at_10=value, recall_at_20=value, mrr_at_10=value
    )
    return rpb.ModeEvaluation(mode=mode, metrics=metrics, ranking=first)  # type: ignore[arg-type]


class FakeRetrieval:
    """Scores every question at once (see :func:`scored`), or, ``held``, answers each call only when the
    test releases it; records the calls and their callers."""

    def __init__(self, *, held: bool = False, failure: tuple[grpc.StatusCode, str] | None = None) -> None:
        self.held = held
        self.failure = failure
        self.requests: list[rpb.EvaluateQueriesRequest] = []
        self.tenants: list[str] = []
        self.arrived = asyncio.Queue[rpb.EvaluateQueriesRequest]()
        self.releases = asyncio.Queue[None]()

    def release(self, calls: int = 1) -> None:
        for _ in range(calls):
            self.releases.put_nowait(None)

    async def EvaluateQueries(self, request: rpb.EvaluateQueriesRequest, context: Any) -> Any:
        self.requests.append(request)
        self.tenants.append(require_identity().tenant_id)
        self.arrived.put_nowait(request)
        if self.held:
            await self.releases.get()
        if self.failure is not None:
            await context.abort(*self.failure)
        return rpb.EvaluateQueriesResponse(
            queries=[
                rpb.QueryEvaluation(query_id=q.id, modes=[scored(q, mode) for mode in request.modes])
                for q in request.queries
            ]
        )


async def bearer(tokens: TokenService, identity: Identity, role: Role = Role.MEMBER) -> Headers:
    issued = await tokens.issue(identity, role, name=f"{role} of {identity.tenant_id}", ttl=timedelta(days=1))
    return {"authorization": f"Bearer {issued.token}"}


def body(count: int = 2, **changes: Any) -> dict[str, Any]:
    queries = [{"id": f"q{i}", "text": f"question {i}", "relevant": {f"doc{i}": 1}} for i in range(count)]
    return {"queries": queries, **changes}


async def until(
    http: httpx.AsyncClient,
    evaluation_id: str,
    condition: Callable[[dict[str, Any]], bool],
    headers: Headers | None = None,
    timeout: float = 20.0,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        answer = await http.get(f"/api/v1/evaluations/{evaluation_id}", headers=headers)
        run: dict[str, Any] = answer.json()
        if answer.status_code == 200 and condition(run):
            return run
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.02)


def finished(run: Mapping[str, Any]) -> bool:
    return run["status"] != "running"


@pytest.fixture
async def api(gateway: Any, client: Any, tokens: TokenService) -> AsyncIterator[Callable[..., Any]]:
    """``async with api(retrieval) as (http, owner_headers, stranger_headers):`` the gateway with token
    authentication over ``retrieval`` (a servicer, or a client) and the fake ingestion."""

    @asynccontextmanager
    async def open_api(
        retrieval: object, **context: Any
    ) -> AsyncIterator[tuple[httpx.AsyncClient, Headers, Headers]]:
        app = await gateway(ingestion=FakeIngestion(), retrieval=retrieval, local_identity=None, **context)
        owner, stranger = await bearer(tokens, OWNER), await bearer(tokens, STRANGER)
        async with client(app) as http:
            yield http, owner, stranger

    yield open_api


# --- a run over a real knowledge base, worked out by hand -------------------------------------------

DOCUMENTS = {
    "doc-1": ("d1.txt", ["The pump is serviced every six months.", "Pump seals are replaced yearly."]),
    "doc-2": ("d2.txt", ["Unused annual leave can be carried over until the end of March."]),
    "doc-3": ("d3.txt", ["Pump alarm: stop the pump, then restart the pump after the pump cools."]),
}


@pytest.fixture
async def real_retrieval(tmp_path: Path) -> AsyncIterator[RetrievalClient]:
    """Retrieval's own servicers over embedded stores, with the owner's ``kb-1`` holding three
    documents uploaded as ``d1.txt`` … (a gateway-only install skips)."""
    testing = pytest.importorskip("knowsphere_retrieval.testing", reason="retrieval is not installed")
    async with testing.serving_documents(tmp_path, OWNER, KB, DOCUMENTS) as retrieval:
        yield retrieval


async def test_a_run_completes_with_figures_worked_out_by_hand(
    api: Any, real_retrieval: RetrievalClient
) -> None:
    request = {
        "name": "baseline",
        "queries": [
            {"id": "q1", "text": "pump", "relevant": {"d1": 2, "doc-3": 1}},
            {"id": "q2", "text": "annual leave", "relevant": {"d2.txt": 1, "d9": 1, "d1": 0}},
            # Judges nothing relevant: scored, but left out of the averages.
            {"id": "q3", "text": "pump seals", "relevant": {}},
        ],
    }
    async with api(real_retrieval) as (http, owner, _):
        started = await http.post(f"/api/v1/knowledge-bases/{KB}/evaluations", json=request, headers=owner)
        assert started.status_code == 202, started.text
        run = started.json()
        assert set(run) == RUN_KEYS
        assert (run["knowledge_base_id"], run["name"], run["status"]) == (KB, "baseline", "running")
        assert run["modes"] == ["hybrid", "vector", "bm25"]  # every mode when none is named
        assert (run["progress"], run["metrics"], run["finished_at"], run["error"]) == (
            {"done": 0, "total": 3},
            {},
            None,
            None,
        )
        done = await until(http, run["id"], finished, owner)

    assert (done["status"], done["progress"], done["error"]) == ("completed", {"done": 3, "total": 3}, None)
    assert datetime.fromisoformat(done["finished_at"]) >= datetime.fromisoformat(done["created_at"])
    assert [q["id"] for q in done["queries"]] == ["q1", "q2", "q3"]
    q1, q2, q3 = (q["results"] for q in done["queries"])
    assert done["queries"][1]["relevant"] == {"d2.txt": 1, "d9": 1, "d1": 0}
    assert all(set(q) == {"hybrid", "vector", "bm25"} for q in (q1, q2, q3))
    assert set(q1["bm25"]) == METRIC_KEYS | {"ranking"}

    # BM25: q1 finds d3 (the pump four times), then d1 (two chunks, one document); q2 finds d2 only.
    assert (q1["bm25"]["ranking"], q2["bm25"]["ranking"]) == (["d3", "d1"], ["d2"])
    # q1: DCG = 1/log2(2) + 2/log2(3); ideal = 2/log2(2) + 1/log2(3). Every relevant document found.
    ndcg_q1 = (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))
    # q2: DCG = 1; ideal = 1 + 1/log2(3) (d9 is relevant and not in the knowledge base): half found.
    ndcg_q2 = 1 / (1 + 1 / math.log2(3))
    figures = {name: value for name, value in q1["bm25"].items() if name != "ranking"}
    assert figures == pytest.approx(
        {"ndcg_at_10": ndcg_q1, "recall_at_5": 1, "recall_at_10": 1, "recall_at_20": 1, "mrr_at_10": 1}
    )
    assert q2["bm25"]["ndcg_at_10"] == pytest.approx(0.613147, abs=1e-6)
    # Averaged over q1 and q2 only (q3 judges nothing relevant).
    assert done["metrics"]["bm25"] == pytest.approx(
        {
            "ndcg_at_10": (ndcg_q1 + ndcg_q2) / 2,
            "recall_at_5": 0.75,
            "recall_at_10": 0.75,
            "recall_at_20": 0.75,
            "mrr_at_10": 1.0,
        }
    )
    assert done["metrics"]["bm25"]["ndcg_at_10"] == pytest.approx(0.736433, abs=1e-6)
    # Every mode's averages are the means of its questions' own figures.
    for mode in ("hybrid", "vector"):
        for name in METRIC_KEYS:
            assert done["metrics"][mode][name] == pytest.approx((q1[mode][name] + q2[mode][name]) / 2)
        assert set(q1[mode]["ranking"]) >= {"d1", "d3"}
    assert sorted(q1["vector"]["ranking"]) == ["d1", "d2", "d3"]  # the toy vectors reach every document


async def test_the_run_is_listed_newest_first_page_by_page(api: Any) -> None:
    async with api(FakeRetrieval()) as (http, owner, _):
        ids = []
        for name in ("first", "second", "third"):
            started = await http.post(
                f"/api/v1/knowledge-bases/{KB}/evaluations", json=body(name=name), headers=owner
            )
            ids.append(started.json()["id"])
            await until(http, ids[-1], finished, owner)
        first = (
            await http.get(f"/api/v1/knowledge-bases/{KB}/evaluations?page_size=2", headers=owner)
        ).json()
        assert [r["name"] for r in first["evaluations"]] == ["third", "second"]
        assert all(set(r) == RUN_KEYS for r in first["evaluations"])  # no questions in a list
        assert first["evaluations"][0]["metrics"]["hybrid"] == dict.fromkeys(METRIC_KEYS, 1.0)
        rest = (
            await http.get(
                f"/api/v1/knowledge-bases/{KB}/evaluations",
                params={"page_size": 2, "page_token": first["next_page_token"]},
                headers=owner,
            )
        ).json()
        assert ([r["name"] for r in rest["evaluations"]], rest["next_page_token"]) == (["first"], "")
        bad = await http.get(
            f"/api/v1/knowledge-bases/{KB}/evaluations", params={"page_token": "nonsense"}, headers=owner
        )
        assert (bad.status_code, bad.json()["error"]["field"]) == (400, "page_token")


# --- progress, cancelling, stopping -------------------------------------------------------------------


async def test_progress_moves_batch_by_batch(api: Any) -> None:
    retrieval = FakeRetrieval(held=True)
    async with api(retrieval) as (http, owner, _):
        started = await http.post(
            f"/api/v1/knowledge-bases/{KB}/evaluations",
            json=body(120, modes=["bm25", "hybrid"]),
            headers=owner,
        )
        run_id = started.json()["id"]
        seen = []
        for done in (50, 100, 120):
            await asyncio.wait_for(retrieval.arrived.get(), 10)
            run = await until(http, run_id, lambda r: True, owner)
            seen.append(run["progress"]["done"])
            retrieval.release()
            run = await until(http, run_id, lambda r, n=done: r["progress"]["done"] == n, owner)
            scored_so_far = [q for q in run["queries"] if q["results"]]
            assert len(scored_so_far) == done and scored_so_far == run["queries"][:done]
        final = await until(http, run_id, finished, owner)

    assert seen == [0, 50, 100]
    assert [len(r.queries) for r in retrieval.requests] == [50, 50, 20]
    assert [list(r.modes) for r in retrieval.requests] == [[rpb.SEARCH_MODE_BM25, rpb.SEARCH_MODE_HYBRID]] * 3
    assert {r.knowledge_base_id for r in retrieval.requests} == {KB}
    assert set(retrieval.tenants) == {OWNER.tenant_id}  # as the user who started it
    assert (final["status"], final["progress"]) == ("completed", {"done": 120, "total": 120})
    assert set(final["metrics"]) == {"bm25", "hybrid"}


def running_task(run_id: str) -> bool:
    """Whether the run's task (named after it) is alive in this process."""
    return any(task.get_name() == f"evaluation {run_id}" for task in asyncio.all_tasks())


async def test_deleting_a_running_run_cancels_it(api: Any, tmp_path: Path) -> None:
    retrieval = FakeRetrieval(held=True)
    async with api(retrieval) as (http, owner, _):
        started = await http.post(f"/api/v1/knowledge-bases/{KB}/evaluations", json=body(120), headers=owner)
        run_id = started.json()["id"]
        await asyncio.wait_for(retrieval.arrived.get(), 10)
        assert running_task(run_id)
        assert (await http.delete(f"/api/v1/evaluations/{run_id}", headers=owner)).status_code == 204
        assert not running_task(run_id)  # cancelled before the answer
        retrieval.release(3)
        await asyncio.sleep(0.2)
        assert (await http.get(f"/api/v1/evaluations/{run_id}", headers=owner)).status_code == 404
        listed = await http.get(f"/api/v1/knowledge-bases/{KB}/evaluations", headers=owner)
        assert listed.json()["evaluations"] == []
        assert (await http.delete(f"/api/v1/evaluations/{run_id}", headers=owner)).status_code == 404
    assert len(retrieval.requests) == 1  # it never went on to a second batch
    store = SqlEvaluationStore(f"sqlite+aiosqlite:///{tmp_path}/tokens.db")
    await store.open()
    try:
        assert await store.queries(OWNER.tenant_id, run_id) == []  # nothing of it is left behind
    finally:
        await store.close()


async def test_stopping_the_gateway_fails_its_runs_as_interrupted(
    api: Any, serve: Any, tmp_path: Path
) -> None:
    retrieval = FakeRetrieval(held=True)
    client = RetrievalClient(await serve("retrieval", retrieval))
    runs = EvaluationRuns(
        SqlEvaluationStore(f"sqlite+aiosqlite:///{tmp_path}/runs.db"), client, EvaluationOptions()
    )
    await runs.start()
    async with api(retrieval, evaluations=runs) as (http, owner, _):
        started = await http.post(f"/api/v1/knowledge-bases/{KB}/evaluations", json=body(), headers=owner)
        run_id = started.json()["id"]
        await asyncio.wait_for(retrieval.arrived.get(), 10)
        await runs.stop(grace=1)
        assert not running_task(run_id)
    store = SqlEvaluationStore(f"sqlite+aiosqlite:///{tmp_path}/runs.db")
    await store.open()
    try:
        run = await store.get(OWNER.tenant_id, run_id)
        assert run is not None and (run.status, run.error) == (EvaluationStatus.FAILED, INTERRUPTED)
        assert run.finished_at is not None
    finally:
        await store.close()


# --- runs a dead gateway left running -------------------------------------------------------------


def left_running(run_id: str, heartbeat_at: datetime) -> EvaluationRun:
    return EvaluationRun(
        id=run_id,
        tenant_id=OWNER.tenant_id,
        knowledge_base_id=KB,
        name=run_id,
        status=EvaluationStatus.RUNNING,
        modes=(SearchMode.HYBRID,),
        created_by=OWNER.user_id,
        created_at=heartbeat_at,
        heartbeat_at=heartbeat_at,
        total=1,
    )


async def add_runs(url: str, *runs: EvaluationRun) -> None:
    store = SqlEvaluationStore(url)
    await store.open()
    for run in runs:
        await store.add(run, [EvaluationQuery(0, "q1", "leave", {"handbook": 1})])
    await store.close()


async def test_a_run_left_running_is_failed_at_start_up(api: Any, tmp_path: Path) -> None:
    # The gateway died mid-run a moment ago: on its own SQLite file, nothing else can be running it.
    await add_runs(f"sqlite+aiosqlite:///{tmp_path}/tokens.db", left_running("eval_left", datetime.now(UTC)))
    async with api(FakeRetrieval()) as (http, owner, _):
        run = (await http.get("/api/v1/evaluations/eval_left", headers=owner)).json()
    assert (run["status"], run["error"]) == ("failed", INTERRUPTED)
    assert run["finished_at"] is not None and run["queries"][0]["results"] == {}


class SharedStore(SqlEvaluationStore):
    """The store as on a server database, which other gateway replicas use too."""

    @property
    def shared(self) -> bool:
        return True


async def test_on_a_shared_database_only_runs_whose_heartbeat_stopped_are_failed(
    serve: Any, tmp_path: Path
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/shared.db"
    now = datetime.now(UTC)
    await add_runs(
        url,
        left_running("eval_alive", now - timedelta(seconds=5)),  # another replica is running it
        left_running("eval_dead", now - timedelta(seconds=61)),
    )
    client = RetrievalClient(await serve("retrieval", FakeRetrieval()))
    options = EvaluationOptions(heartbeat_seconds=0.05, stale_seconds=60)
    runs = EvaluationRuns(SharedStore(url), client, options)
    await runs.start()
    try:
        await asyncio.sleep(0.2)  # a few heartbeats of this gateway, each sweeping stale runs
        alive = await runs.store.get(OWNER.tenant_id, "eval_alive")
        dead = await runs.store.get(OWNER.tenant_id, "eval_dead")
        assert alive is not None and alive.status == EvaluationStatus.RUNNING
        assert dead is not None and (dead.status, dead.error) == (EvaluationStatus.FAILED, INTERRUPTED)
        # Once the other replica has not renewed it for the stale time, it is failed too.
        later = EvaluationRuns(SharedStore(url), client, options, clock=lambda: now + timedelta(seconds=56))
        await later.start()
        await later.stop()
        alive = await runs.store.get(OWNER.tenant_id, "eval_alive")
        assert alive is not None and (alive.status, alive.error) == (EvaluationStatus.FAILED, INTERRUPTED)
    finally:
        await runs.stop()


# --- failures ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (
            (grpc.StatusCode.UNAVAILABLE, "connection refused at 10.0.0.7:7412"),
            "the retrieval service is unavailable; try again shortly",
        ),
        ((grpc.StatusCode.NOT_FOUND, "knowledge base kb-1 not found"), "knowledge base kb-1 not found"),
    ],
)
async def test_a_failed_retrieval_call_fails_the_run_with_a_readable_error(
    api: Any, failure: tuple[grpc.StatusCode, str], error: str
) -> None:
    async with api(FakeRetrieval(failure=failure)) as (http, owner, _):
        started = await http.post(f"/api/v1/knowledge-bases/{KB}/evaluations", json=body(), headers=owner)
        run = await until(http, started.json()["id"], finished, owner)
    assert (run["status"], run["error"], run["metrics"]) == ("failed", error, {})
    assert run["finished_at"] is not None


# --- limits -------------------------------------------------------------------------------------------


def with_query(**changes: Any) -> dict[str, Any]:
    request = body()
    request["queries"][0].update(changes)
    return request


@pytest.mark.parametrize(
    ("request_body", "status", "field", "says"),
    [
        (body(2001), 413, "queries", "2001 queries; the limit is 2000"),
        (with_query(text="x" * 4001), 400, "queries[0].text", "4001 characters; the limit is 4000"),
        (with_query(text="   "), 400, "queries[0].text", "empty text"),
        (with_query(id="i" * 201), 400, "queries[0].id", "201 characters; the limit is 200"),
        (with_query(id=""), 400, "queries[0].id", "an id is required"),
        (with_query(id="q1"), 400, "queries[1].id", "'q1' is given twice"),
        (
            with_query(relevant={f"d{i}": 1 for i in range(101)}),
            400,
            "queries[0].relevant",
            "101 labels; the limit is 100",
        ),
        (with_query(relevant={"d": 101}), 400, "queries[0].relevant", "grade 101 of 'd' is outside 0..100"),
        (with_query(relevant={"d": -1}), 400, "queries[0].relevant", "grade -1 of 'd' is outside 0..100"),
        (
            {"queries": [{"id": "q", "text": "t", "relevant": {"d": 0}}]},
            400,
            "queries",
            "no query judges a document relevant",
        ),
        (body(0), 400, "queries", "at least one query"),
        (body(name="n" * 201), 400, "name", "201 characters; the limit is 200"),
        (body(modes=[]), 400, "modes", "at least one mode"),
        (body(modes=["bm25", "bm25"]), 400, "modes[1]", "bm25 is given twice"),
        (body(modes=["keyword"]), 422, "modes.0", "'hybrid', 'vector' or 'bm25'"),
        ({"name": "no queries"}, 422, "queries", "Field required"),
    ],
)
async def test_each_limit_is_refused_naming_the_field_and_the_limit(
    api: Any, request_body: dict[str, Any], status: int, field: str, says: str
) -> None:
    retrieval = FakeRetrieval()
    async with api(retrieval) as (http, owner, _):
        refused = await http.post(
            f"/api/v1/knowledge-bases/{KB}/evaluations", json=request_body, headers=owner
        )
        listed = (await http.get(f"/api/v1/knowledge-bases/{KB}/evaluations", headers=owner)).json()
    assert refused.status_code == status, refused.text
    error = refused.json()["error"]
    assert error["field"] == field and says in error["message"], error
    assert listed["evaluations"] == [] and retrieval.requests == []  # nothing stored, nothing run


async def test_a_request_at_every_limit_is_accepted(api: Any) -> None:
    request = body(2000, name="n" * 200)
    request["queries"][0] = {
        "id": "i" * 200,
        "text": "x" * 4000,
        "relevant": {f"d{i}": 100 if i else 0 for i in range(100)},
    }
    retrieval = FakeRetrieval()
    async with api(retrieval) as (http, owner, _):
        started = await http.post(f"/api/v1/knowledge-bases/{KB}/evaluations", json=request, headers=owner)
        assert started.status_code == 202, started.text
        run = await until(http, started.json()["id"], finished, owner)
    assert (run["status"], run["progress"]["done"]) == ("completed", 2000)
    assert len(retrieval.requests) == 40


async def test_a_tenant_runs_at_most_two_at_once(api: Any, tokens: TokenService) -> None:
    retrieval = FakeRetrieval(held=True)
    async with api(retrieval) as (http, owner, _):
        path = f"/api/v1/knowledge-bases/{KB}/evaluations"
        first = await http.post(path, json=body(), headers=owner)
        second = await http.post(path, json=body(), headers=owner)
        assert (first.status_code, second.status_code) == (202, 202)
        third = await http.post(path, json=body(), headers=owner)
        assert third.status_code == 429
        assert third.json()["error"]["code"] == "too_many_running_evaluations"
        assert "2 evaluation runs running (the limit)" in third.json()["error"]["message"]
        retrieval.release()
        await until(http, first.json()["id"], finished, owner)
        fourth = await http.post(path, json=body(), headers=owner)
        assert fourth.status_code == 202  # a place came free
        retrieval.release(2)
        for started in (second, fourth):
            await until(http, started.json()["id"], finished, owner)


# --- another tenant -------------------------------------------------------------------------------------


async def test_another_tenant_can_neither_see_read_delete_nor_start_a_run(api: Any) -> None:
    retrieval = FakeRetrieval()
    async with api(retrieval) as (http, owner, stranger):
        path = f"/api/v1/knowledge-bases/{KB}/evaluations"
        run_id = (await http.post(path, json=body(), headers=owner)).json()["id"]
        await until(http, run_id, finished, owner)

        read = await http.get(f"/api/v1/evaluations/{run_id}", headers=stranger)
        deleted = await http.delete(f"/api/v1/evaluations/{run_id}", headers=stranger)
        listed = await http.get(path, headers=stranger)
        started = await http.post(path, json=body(), headers=stranger)
        unknown = await http.get("/api/v1/evaluations/eval_0000000000000000", headers=stranger)
        assert [r.status_code for r in (read, deleted, listed, started, unknown)] == [404] * 5
        # The answers say no more than for a run that never was.
        assert read.json()["error"]["message"] == f"evaluation {run_id} not found"
        assert unknown.json()["error"]["message"] == "evaluation eval_0000000000000000 not found"

        assert (await http.get(f"/api/v1/evaluations/{run_id}", headers=owner)).status_code == 200
    assert len(retrieval.requests) == 1 and retrieval.tenants == [OWNER.tenant_id]
