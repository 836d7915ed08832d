"""Faults during ingestion, each by a real process's pid: retrieval killed while a batch is being
indexed and kept down, NATS stopped (SIGSTOP) for up to a minute. Every document ends ready, none
failed, none duplicated in the indexes.

Everything is a real process: NATS, Temporal, modelhub, the ingestion API and its worker from the
local stack; retrieval is started by the test itself (same wiring as the stack gives it) so that it
can be killed by its pid and kept down — the stack's supervisor would restart it at once.
``KS_CHAOS_OUTAGE_SECONDS`` sets how long it stays down (120 by default). The test prints one JSON
line per scenario: documents lost, duplicated, failed, and the seconds from retrieval's return to the
last document ready.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import open_channel
from knowsphere_stack import Stack, StackConfig
from knowsphere_stack.components import service_env
from knowsphere_stack.health import grpc_health_status

from .conftest import ScenarioReport

pytestmark = pytest.mark.chaos

OWNER = Identity(f"chaos-{uuid.uuid4().hex[:8]}", "alice")
OUTAGE_SECONDS = float(os.environ.get("KS_CHAOS_OUTAGE_SECONDS", "120"))
DOCUMENTS = 24


class Retrieval:
    """The retrieval service as a process of the test's own."""

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.process: subprocess.Popen[bytes] | None = None
        self.log = config.log_path("retrieval")

    def start(self) -> None:
        env = {**os.environ, **service_env("retrieval", self.config, identity_dir=self.config.identity_dir)}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "knowsphere_retrieval"], env=env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 120
        while grpc_health_status(self.config.grpc_addr("retrieval")) != "SERVING":
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "retrieval did not start within 120 s"
            time.sleep(0.3)

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


@pytest.fixture(scope="module")
def stack_without_retrieval(
    tmp_path_factory: pytest.TempPathFactory, identity_keys_dir: Path
) -> Iterator[tuple[Stack, Retrieval]]:
    config = StackConfig.with_free_ports(
        data_dir=tmp_path_factory.mktemp("chaos-stack"),
        temporal_headless=True,
        services=["modelhub", "ingestion"],
        identity_keys_dir=identity_keys_dir,
        extra_env={"OTEL_TRACES_EXPORTER": "none"},
    )
    retrieval = Retrieval(config)
    with Stack(config) as stack:
        retrieval.start()
        try:
            yield stack, retrieval
        finally:
            retrieval.stop()


def _document(n: int) -> bytes:
    lines = [f"# Procedure {n}", ""]
    lines += [f"Step {i} of procedure {n}: check valve {n}-{i} and record its pressure." for i in range(40)]
    return "\n\n".join(lines).encode()


async def _upload(ingestion: Any, kb_id: str) -> list[str]:
    async def requests() -> AsyncIterator[pb.UploadDocumentsRequest]:
        for n in range(DOCUMENTS):
            data = _document(n)
            yield pb.UploadDocumentsRequest(
                header=pb.UploadHeader(
                    knowledge_base_id=kb_id, file_name=f"p{n}.md", declared_size_bytes=len(data)
                )
            )
            yield pb.UploadDocumentsRequest(chunk=data)

    results = (await ingestion.UploadDocuments(requests())).results
    return [r.document.id for r in results]


async def _documents(ingestion: Any, ids: list[str]) -> list[pb.Document]:
    return [(await ingestion.GetDocument(pb.GetDocumentRequest(document_id=i))).document for i in ids]


@asynccontextmanager
async def owners_clients(stack: Stack) -> AsyncIterator[tuple[Any, Any]]:
    """Stubs of ingestion and retrieval, called as the scenario's tenant."""
    async with (
        open_channel(stack.grpc_addr("ingestion"), services=[CONTRACTS["ingestion"].descriptor]) as i,
        open_channel(stack.grpc_addr("retrieval"), services=[CONTRACTS["retrieval"].descriptor]) as r,
    ):
        with bound_identity(OWNER):
            yield CONTRACTS["ingestion"].stub(i), CONTRACTS["retrieval"].stub(r)


async def _kb(ingestion: Any, name: str) -> pb.KnowledgeBase:
    request = pb.CreateKnowledgeBaseRequest(name=name, chunking=pb.ChunkingConfig(chunk_size_tokens=48))
    return (await ingestion.CreateKnowledgeBase(request)).knowledge_base


async def _when_writing(ingestion: Any, ids: list[str]) -> None:
    """Returns once the batch has reached the stages that write to retrieval."""
    deadline = time.monotonic() + 300
    while True:
        statuses = {d.status for d in await _documents(ingestion, ids)}
        if statuses & {pb.DOCUMENT_STATUS_EMBEDDING, pb.DOCUMENT_STATUS_INDEXING}:
            return
        assert pb.DOCUMENT_STATUS_READY not in statuses, "the batch was indexed before the fault"
        assert time.monotonic() < deadline
        await asyncio.sleep(0.2)


async def _all_finished(ingestion: Any, ids: list[str], within: float) -> list[pb.Document]:
    started = time.monotonic()
    while True:
        documents = await _documents(ingestion, ids)
        ended = (pb.DOCUMENT_STATUS_READY, pb.DOCUMENT_STATUS_FAILED)
        if all(d.status in ended for d in documents):
            return documents
        assert time.monotonic() - started < within, [pb.DocumentStatus.Name(d.status) for d in documents]
        await asyncio.sleep(0.5)


async def _count(index: Any, kb_id: str, documents: list[pb.Document]) -> dict[str, Any]:
    stats = (await index.GetIndexStats(rpb.GetIndexStatsRequest(knowledge_base_ids=[kb_id]))).knowledge_bases[
        0
    ]
    chunks = sum(d.chunk_count for d in documents)
    return {
        "documents": len(documents),
        "failed": [d.id for d in documents if d.status == pb.DOCUMENT_STATUS_FAILED],
        "lost": sum(d.status != pb.DOCUMENT_STATUS_READY for d in documents),
        "duplicated": stats.chunk_count - chunks,
        "vectors": sum(e.vector_count for e in stats.embeddings),
        "lexical": stats.lexical_entry_count,
        "chunks": chunks,
    }


def _assert_nothing_lost(report: dict[str, Any], scenario_report: ScenarioReport) -> None:
    scenario_report(report)
    assert report["failed"] == [] and report["lost"] == 0
    assert report["chunks"] > DOCUMENTS  # every document has several chunks
    assert report["duplicated"] == 0
    assert report["vectors"] == report["lexical"] == report["chunks"]


def test_nats_stopped_during_ingestion_loses_and_duplicates_nothing(
    stack_without_retrieval, scenario_report: ScenarioReport
) -> None:
    stack, _ = stack_without_retrieval
    stopped_for = min(OUTAGE_SECONDS, 60.0)

    async def scenario() -> dict[str, Any]:
        async with owners_clients(stack) as (ingestion, index):
            kb = await _kb(ingestion, "chaos-nats")
            ids = await _upload(ingestion, kb.id)
            await _when_writing(ingestion, ids)
            nats_pid = stack.state().component("nats").pid
            os.kill(nats_pid, signal.SIGSTOP)  # the bus hangs: no answer, no closed connection
            try:
                await asyncio.sleep(stopped_for)
            finally:
                os.kill(nats_pid, signal.SIGCONT)
            back = time.monotonic()
            documents = await _all_finished(ingestion, ids, within=600)
            return {
                "scenario": "nats stopped during ingestion",
                "outage_seconds": stopped_for,
                **await _count(index, kb.id, documents),
                "recovered_seconds": round(time.monotonic() - back, 1),
            }

    _assert_nothing_lost(asyncio.run(scenario()), scenario_report)


def test_retrieval_down_during_indexing_loses_and_duplicates_nothing(
    stack_without_retrieval, scenario_report: ScenarioReport
) -> None:
    stack, retrieval = stack_without_retrieval

    async def scenario() -> dict[str, Any]:
        async with owners_clients(stack) as (ingestion, index):
            kb = await _kb(ingestion, "chaos-retrieval")
            ids = await _upload(ingestion, kb.id)
            await _when_writing(ingestion, ids)
            retrieval.kill()
            await asyncio.sleep(OUTAGE_SECONDS)
            during = await _documents(ingestion, ids)
            await asyncio.to_thread(retrieval.start)
            back = time.monotonic()
            documents = await _all_finished(ingestion, ids, within=600)
            return {
                "scenario": "retrieval killed during indexing",
                "outage_seconds": OUTAGE_SECONDS,
                "failed_during_outage": sum(d.status == pb.DOCUMENT_STATUS_FAILED for d in during),
                **await _count(index, kb.id, documents),
                "recovered_seconds": round(time.monotonic() - back, 1),
            }

    report = asyncio.run(scenario())
    _assert_nothing_lost(report, scenario_report)
    assert report["failed_during_outage"] == 0


def test_modelhub_killed_during_embedding_resumes_without_duplicate_vectors(
    stack_without_retrieval, scenario_report: ScenarioReport
) -> None:
    stack, _ = stack_without_retrieval

    async def scenario() -> dict[str, Any]:
        async with owners_clients(stack) as (ingestion, index):
            kb = await _kb(ingestion, "chaos-modelhub")
            ids = await _upload(ingestion, kb.id)
            await _when_writing(ingestion, ids)
            # The supervisor starts a new modelhub at once; the worker waits for it.
            os.kill(stack.state().component("modelhub").pid, signal.SIGKILL)
            killed = time.monotonic()
            documents = await _all_finished(ingestion, ids, within=600)
            return {
                "scenario": "modelhub killed during embedding",
                **await _count(index, kb.id, documents),
                "recovered_seconds": round(time.monotonic() - killed, 1),
            }

    _assert_nothing_lost(asyncio.run(scenario()), scenario_report)


def test_uploads_while_temporal_is_stopped_are_refused_or_ingested_never_half_recorded(
    stack_without_retrieval, scenario_report: ScenarioReport
) -> None:
    stack, _ = stack_without_retrieval

    async def scenario() -> dict[str, Any]:
        async with owners_clients(stack) as (ingestion, index):
            kb = await _kb(ingestion, "chaos-temporal")
            temporal = stack.state().component("temporal").pid
            os.kill(temporal, signal.SIGSTOP)  # the workflow service hangs for 30 s
            accepted: list[str] = []
            refused = 0
            try:
                stopped = time.monotonic()
                for n in range(3):
                    data = _document(100 + n)
                    header = pb.UploadHeader(
                        knowledge_base_id=kb.id, file_name=f"t{n}.md", declared_size_bytes=len(data)
                    )

                    async def requests(
                        header: pb.UploadHeader = header, data: bytes = data
                    ) -> AsyncIterator[pb.UploadDocumentRequest]:
                        yield pb.UploadDocumentRequest(header=header)
                        yield pb.UploadDocumentRequest(chunk=data)

                    try:
                        uploaded = await ingestion.UploadDocument(requests(), timeout=15)
                        accepted.append(uploaded.document.id)
                    except grpc.aio.AioRpcError as error:
                        assert error.code() in (
                            grpc.StatusCode.UNAVAILABLE,
                            grpc.StatusCode.DEADLINE_EXCEEDED,
                        ), error
                        refused += 1
                await asyncio.sleep(max(0.0, 30 - (time.monotonic() - stopped)))
            finally:
                os.kill(temporal, signal.SIGCONT)
            back = time.monotonic()
            # What the knowledge base holds is exactly what was accepted (a refused upload left
            # nothing), and every accepted document is ingested once Temporal answers again.
            listed = await ingestion.ListDocuments(pb.ListDocumentsRequest(knowledge_base_id=kb.id))
            recorded = sorted(d.id for d in listed.documents)
            # An upload once it is back is ingested as usual.
            data = _document(200)
            header = pb.UploadHeader(
                knowledge_base_id=kb.id, file_name="after.md", declared_size_bytes=len(data)
            )

            async def after() -> AsyncIterator[pb.UploadDocumentRequest]:
                yield pb.UploadDocumentRequest(header=header)
                yield pb.UploadDocumentRequest(chunk=data)

            later = (await ingestion.UploadDocument(after(), timeout=60)).document.id
            documents = await _all_finished(ingestion, [*recorded, later], within=600)
            return {
                "scenario": "temporal stopped during uploads",
                "uploads": 3,
                "refused": refused,
                "accepted": len(accepted),
                "half_recorded": sorted(set(recorded) - set(accepted)),
                "missing": sorted(set(accepted) - set(recorded)),
                **await _count(index, kb.id, documents),
                "recovered_seconds": round(time.monotonic() - back, 1),
            }

    report = asyncio.run(scenario())
    scenario_report(report)
    assert report["refused"] + report["accepted"] == report["uploads"]
    assert report["documents"] == report["accepted"] + 1  # the one uploaded after Temporal came back
    assert report["half_recorded"] == [] and report["missing"] == []
    assert report["failed"] == [] and report["lost"] == 0 and report["duplicated"] == 0
    assert report["vectors"] == report["lexical"] == report["chunks"]
