"""Ingestion in the running stack: upload over gRPC, the workflow on Temporal, search in retrieval.

Everything is real: the ingestion API and its worker process, Temporal's dev server, NATS for progress,
modelhub's built-in embedding model, retrieval's embedded indexes and the filesystem object store.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import signal
import uuid
import zipfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_ingestion.domain.chunking import chunk_document
from knowsphere_ingestion.domain.records import ChunkingSettings
from knowsphere_ingestion.parsing import parse
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import open_channel

from .otlp_receiver import ReceivedSpan

pytestmark = pytest.mark.e2e
LOCAL = Identity("local", "local")
OTHER = Identity("other-tenant", "eve")

POLICY = (
    b"# Leave policy\n\n"
    b"Employees receive 25 days of paid annual leave per calendar year.\n\n"
    b"## Carry over\n\n"
    b"Unused annual leave can be carried over until the end of March.\n\n"
    b"## Sick leave\n\n"
    b"Sick leave of more than three days needs a doctor's note.\n"
)


class Api:
    def __init__(self, ingestion: Any, retrieval: Any) -> None:
        self.ingestion = ingestion
        self.retrieval = retrieval

    async def kb(self, name: str | None = None, **fields: Any) -> pb.KnowledgeBase:
        request = pb.CreateKnowledgeBaseRequest(name=name or f"kb-{uuid.uuid4().hex[:8]}", **fields)
        return (await self.ingestion.CreateKnowledgeBase(request)).knowledge_base

    async def upload(
        self, kb_id: str, file_name: str, data: bytes, *, declared: int | None = None, piece: int = 64 * 1024
    ) -> pb.UploadDocumentResponse:
        async def requests() -> AsyncIterator[pb.UploadDocumentRequest]:
            yield pb.UploadDocumentRequest(
                header=pb.UploadHeader(
                    knowledge_base_id=kb_id,
                    file_name=file_name,
                    declared_size_bytes=len(data) if declared is None else declared,
                )
            )
            for start in range(0, len(data), piece):
                yield pb.UploadDocumentRequest(chunk=data[start : start + piece])

        return await self.ingestion.UploadDocument(requests())

    async def upload_many(
        self,
        kb_id: str,
        files: list[tuple[str, bytes]],
        *,
        piece: int = 64 * 1024,
        other: dict[str, str] | None = None,
    ) -> list[pb.UploadResult]:
        """Uploads files in one UploadDocuments stream, into ``kb_id`` or, by file name, ``other``."""

        async def requests() -> AsyncIterator[pb.UploadDocumentsRequest]:
            for file_name, data in files:
                yield pb.UploadDocumentsRequest(
                    header=pb.UploadHeader(
                        knowledge_base_id=(other or {}).get(file_name, kb_id),
                        file_name=file_name,
                        declared_size_bytes=len(data),
                    )
                )
                for start in range(0, len(data), piece):
                    yield pb.UploadDocumentsRequest(chunk=data[start : start + piece])

        return list((await self.ingestion.UploadDocuments(requests())).results)

    async def wait(
        self, document_id: str, timeout: float = 180
    ) -> tuple[pb.Document, list[pb.DocumentProgress]]:
        seen: list[pb.DocumentProgress] = []
        request = pb.WatchDocumentProgressRequest(documents=pb.DocumentIdList(document_ids=[document_id]))
        async for update in self.ingestion.WatchDocumentProgress(request, timeout=timeout):
            seen.append(update.progress)
        document = (await self.ingestion.GetDocument(pb.GetDocumentRequest(document_id=document_id))).document
        return document, seen

    async def stats(self, kb_id: str) -> rpb.KnowledgeBaseIndexStats:
        response = await self.retrieval.GetIndexStats(rpb.GetIndexStatsRequest(knowledge_base_ids=[kb_id]))
        return response.knowledge_bases[0] if response.knowledge_bases else rpb.KnowledgeBaseIndexStats()

    async def chunk_ids(self, document_id: str) -> list[str]:
        selector = rpb.ChunkSelector(
            range=rpb.PositionRange(document_id=document_id, start_position=0, end_position=100_000)
        )
        ids: list[str] = []
        token = ""
        while True:
            response = await self.retrieval.ListChunks(
                rpb.ListChunksRequest(selectors=[selector], page_size=100, page_token=token)
            )
            ids.extend(c.chunk_id for c in response.chunks)
            token = response.next_page_token
            if not token:
                return ids


def run(stack: Any, identity: Identity, work: Callable[[Api], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with (
            open_channel(stack.grpc_addr("ingestion"), services=[CONTRACTS["ingestion"].descriptor]) as i,
            open_channel(stack.grpc_addr("retrieval"), services=[CONTRACTS["retrieval"].descriptor]) as r,
        ):
            with bound_identity(identity):
                return await work(Api(CONTRACTS["ingestion"].stub(i), CONTRACTS["retrieval"].stub(r)))

    return asyncio.run(main())


def blob_files(stack: Any) -> list[Path]:
    root = Path(stack.config.service_data_dir("ingestion")) / "blobs"
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def test_an_upload_becomes_searchable_with_progress_and_headings(stack: Any) -> None:
    async def work(api: Api) -> None:
        kb = await api.kb(description="HR documents")
        assert kb.embedding_model_id == "builtin-minilm-l6-v2" and kb.embedding_dimension == 384
        uploaded = await api.upload(kb.id, "policy.md", POLICY, piece=50)
        assert not uploaded.duplicate
        assert uploaded.document.status == pb.DOCUMENT_STATUS_QUEUED
        assert uploaded.document.content_sha256 == hashlib.sha256(POLICY).hexdigest()
        document, progress = await api.wait(uploaded.document.id)
        assert document.status == pb.DOCUMENT_STATUS_READY, document.failure
        assert document.title == "Leave policy"
        assert document.chunk_count == 3 and document.language == "en"
        statuses = [p.status for p in progress]
        assert statuses[-1] == pb.DOCUMENT_STATUS_READY
        assert pb.DOCUMENT_STATUS_EMBEDDING in statuses and pb.DOCUMENT_STATUS_INDEXING in statuses
        percents = [p.percent for p in progress]
        assert percents == sorted(percents) and percents[-1] == 100
        # Searchable, with the heading path and file name each chunk came from.
        found = await api.retrieval.Search(
            rpb.SearchRequest(
                query="how many days of annual leave do I get", knowledge_base_ids=[kb.id], top_k=3
            )
        )
        top = found.results[0]
        assert "25 days" in top.text and top.file_name == "policy.md"
        assert list(top.heading_path) == ["Leave policy"]
        stats = await api.stats(kb.id)
        assert stats.chunk_count == 3 and stats.lexical_entry_count == 3
        # The knowledge base counts its documents and chunks.
        again = (
            await api.ingestion.GetKnowledgeBase(pb.GetKnowledgeBaseRequest(knowledge_base_id=kb.id))
        ).knowledge_base
        assert (again.document_count, again.chunk_count, again.size_bytes) == (1, 3, len(POLICY))

        # The same content again is not stored twice: the existing document comes back.
        before = len(blob_files(stack))
        duplicate = await api.upload(kb.id, "copy-of-policy.md", POLICY)
        assert duplicate.duplicate and duplicate.document.id == document.id
        assert len(blob_files(stack)) == before
        listed = await api.ingestion.ListDocuments(pb.ListDocumentsRequest(knowledge_base_id=kb.id))
        assert [d.id for d in listed.documents] == [document.id]

        # Another tenant sees none of it.
        with bound_identity(OTHER):
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await api.ingestion.GetDocument(pb.GetDocumentRequest(document_id=document.id))
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND

        # Deleting removes the blob, the chunks, vectors and lexical entries.
        await api.ingestion.DeleteDocument(pb.DeleteDocumentRequest(document_id=document.id))
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await api.ingestion.GetDocument(pb.GetDocumentRequest(document_id=document.id))
        assert gone.value.code() == grpc.StatusCode.NOT_FOUND
        stats = await api.stats(kb.id)
        assert (stats.chunk_count, stats.lexical_entry_count) == (0, 0)
        assert sum(e.vector_count for e in stats.embeddings) == 0
        assert not [p for p in blob_files(stack) if f"/doc/{document.id}/" in str(p)]

    run(stack, LOCAL, work)


def test_every_activity_span_descends_from_the_upload_span(stack: Any, otlp: Any) -> None:
    async def work(api: Api) -> str:
        kb = await api.kb()
        uploaded = await api.upload(
            kb.id, "trace.md", b"# Traced\n\nOne trace from the upload to the index.\n"
        )
        document, _ = await api.wait(uploaded.document.id)
        assert document.status == pb.DOCUMENT_STATUS_READY
        return document.id

    document_id = run(stack, LOCAL, work)
    upload = otlp.wait_for_spans(
        lambda s: (
            s.service == "ingestion"
            and s.name == "ingestion.upload"
            and s.attributes.get("ks.document.id") == document_id
        )
    )
    assert len(upload) == 1
    trace_id = upload[0].trace_id
    activities = ("parse_documents", "chunk_documents", "embed_chunks", "index_chunks")

    def served(spans: list[ReceivedSpan], service: str, method: str) -> bool:
        return any(s.service == service and s.kind == "SERVER" and s.name.endswith(method) for s in spans)

    def complete(spans: list[ReceivedSpan]) -> bool:
        return (
            all(any(s.name == f"RunActivity:{a}" for s in spans) for a in activities)
            and served(spans, "modelhub", "/Embed")
            and served(spans, "retrieval", "/IndexChunks")
        )

    spans = otlp.wait_for(trace_id, complete, timeout=60)
    by_id = {s.span_id: s for s in spans}

    def ancestors(span: ReceivedSpan) -> list[str]:
        chain = []
        while span.parent_span_id in by_id:
            span = by_id[span.parent_span_id]
            chain.append(span.span_id)
        return chain

    runs = [s for s in spans if s.name.startswith("RunActivity:")]
    assert {s.name.split(":", 1)[1] for s in runs} >= set(activities)
    assert {s.service for s in runs} == {"ingestion-worker"}
    for span in runs:
        assert upload[0].span_id in ancestors(span), span.name
    # The calls the activities make continue the same trace into modelhub and retrieval.
    for service, method in (("modelhub", "/Embed"), ("retrieval", "/IndexChunks")):
        server = next(
            s for s in spans if s.service == service and s.kind == "SERVER" and s.name.endswith(method)
        )
        assert upload[0].span_id in ancestors(server)


def _zip_bomb() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", b"\0" * (300 * 1024 * 1024))
    return buffer.getvalue()


def test_bad_files_are_refused_or_fail_with_nothing_left_behind(stack: Any) -> None:
    async def work(api: Api) -> None:
        kb = await api.kb()
        refused = {
            "empty.txt": (b"", None, "declared_size_bytes"),
            "tool.exe": (b"MZ\x90\x00binary", None, "unsupported file type"),
            "report.docx": (b"%PDF-1.7\n% a pdf in disguise\n", None, "is a PDF"),
            "notes.txt": (b"\x7fELF\x02\x01\x01" + b"\x00" * 64, None, "executable"),
            "short.md": (b"# Title\n\nbody\n", 10_000, "declared 10000 bytes but 14 arrived"),
        }
        before = blob_files(stack)
        for name, (data, declared, words) in refused.items():
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await api.upload(kb.id, name, data, declared=declared)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
            assert words in error.value.details(), (name, error.value.details())
        assert blob_files(stack) == before
        listed = await api.ingestion.ListDocuments(pb.ListDocumentsRequest(knowledge_base_id=kb.id))
        assert not listed.documents

        failing = {
            "corrupt.pdf": (b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog" + os.urandom(2000), "corrupt_file"),
            "bomb.docx": (_zip_bomb(), "archive_too_large"),
        }
        for name, (data, code) in failing.items():
            uploaded = await api.upload(kb.id, name, data)
            document, _ = await api.wait(uploaded.document.id)
            assert document.status == pb.DOCUMENT_STATUS_FAILED, name
            assert document.failure.stage == pb.INGESTION_STAGE_PARSE, name
            assert document.failure.code == code, (name, document.failure)
            assert name in document.failure.reason
            assert not [p for p in blob_files(stack) if f"/doc/{document.id}/run-" in str(p)]
        stats = await api.stats(kb.id)
        assert stats.chunk_count == 0

    run(stack, LOCAL, work)


def test_files_uploaded_together_are_ingested_together_and_fail_alone(stack: Any) -> None:
    handbook = b"# Travel handbook\n\nTrain tickets over 300 euros need the approval of a director.\n"
    corrupt = b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog" + os.urandom(2000)

    async def work(api: Api) -> None:
        kb = await api.kb()
        elsewhere = await api.kb()
        results = await api.upload_many(
            kb.id,
            [
                ("policy.md", POLICY),
                ("empty.txt", b""),
                ("broken.pdf", corrupt),
                ("handbook.md", handbook),
                ("policy-copy.md", POLICY),
                ("policy-elsewhere.md", POLICY),
            ],
            piece=40,
            other={"policy-elsewhere.md": elsewhere.id},
        )
        assert [r.file_name for r in results] == [
            "policy.md",
            "empty.txt",
            "broken.pdf",
            "handbook.md",
            "policy-copy.md",
            "policy-elsewhere.md",
        ]
        policy, empty, broken, travel, copy, second = results
        assert empty.error.code == "INVALID_ARGUMENT" and "declared_size_bytes" in empty.error.message
        assert not empty.HasField("document")
        assert copy.duplicate and copy.document.id == policy.document.id
        # The same content in another knowledge base is a document of its own there.
        assert not second.duplicate and second.document.knowledge_base_id == elsewhere.id
        for accepted in (policy, broken, travel, second):
            assert not accepted.HasField("error"), accepted.error
            assert accepted.document.status == pb.DOCUMENT_STATUS_QUEUED

        # The corrupt file fails on its own; the files beside it become searchable.
        failed, _ = await api.wait(broken.document.id)
        assert failed.status == pb.DOCUMENT_STATUS_FAILED
        assert failed.failure.stage == pb.INGESTION_STAGE_PARSE and failed.failure.code == "corrupt_file"
        ready = [(await api.wait(r.document.id))[0] for r in (policy, travel)]
        assert all(d.status == pb.DOCUMENT_STATUS_READY for d in ready), [d.failure for d in ready]
        there, _ = await api.wait(second.document.id)
        assert there.status == pb.DOCUMENT_STATUS_READY and (await api.stats(elsewhere.id)).chunk_count > 0
        listed = await api.ingestion.ListDocuments(pb.ListDocumentsRequest(knowledge_base_id=kb.id))
        assert sorted(d.file_name for d in listed.documents) == ["broken.pdf", "handbook.md", "policy.md"]
        stats = await api.stats(kb.id)
        assert stats.chunk_count == sum(d.chunk_count for d in ready) > 0
        hits = await api.retrieval.Search(
            rpb.SearchRequest(
                knowledge_base_ids=[kb.id], query="approval for expensive train tickets", top_k=1
            )
        )
        assert hits.results[0].document_id == travel.document.id
        assert not [p for p in blob_files(stack) if f"/doc/{broken.document.id}/run-" in str(p)]

    run(stack, LOCAL, work)


def test_deleting_one_document_of_a_batch_mid_ingestion_leaves_the_others_whole(stack: Any) -> None:
    async def work(api: Api) -> None:
        kb = await api.kb(chunking=pb.ChunkingConfig(chunk_size_tokens=48, chunk_overlap_tokens=8))
        long_one, short_one = await api.upload_many(
            kb.id, [("turbine.md", _long_document()), ("policy.md", POLICY)]
        )
        doomed = long_one.document.id
        request = pb.WatchDocumentProgressRequest(documents=pb.DocumentIdList(document_ids=[doomed]))
        deleted = False
        async for update in api.ingestion.WatchDocumentProgress(request, timeout=300):
            p = update.progress
            if p.status == pb.DOCUMENT_STATUS_EMBEDDING and p.chunks_embedded >= 64:
                await api.ingestion.DeleteDocument(pb.DeleteDocumentRequest(document_id=doomed))
                deleted = True
                break
        assert deleted, "the long document finished embedding before it could be deleted"
        kept, _ = await api.wait(short_one.document.id)
        assert kept.status == pb.DOCUMENT_STATUS_READY, kept.failure
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await api.ingestion.GetDocument(pb.GetDocumentRequest(document_id=doomed))
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
        # The batch's workflow notices the deletion at its next step and takes back what it wrote.
        for _ in range(60):
            stats = await api.stats(kb.id)
            leftovers = [p for p in blob_files(stack) if f"/doc/{doomed}/" in str(p)]
            if stats.chunk_count == kept.chunk_count and not leftovers and not await api.chunk_ids(doomed):
                break
            await asyncio.sleep(1)
        assert stats.chunk_count == stats.lexical_entry_count == kept.chunk_count
        assert await api.chunk_ids(doomed) == []
        assert leftovers == []

    run(stack, LOCAL, work)


def test_knowledge_base_crud_is_tenant_scoped(stack: Any) -> None:
    async def work(api: Api) -> None:
        name = f"handbook-{uuid.uuid4().hex[:6]}"
        kb = await api.kb(
            name,
            chunking=pb.ChunkingConfig(strategy=pb.CHUNKING_STRATEGY_PARENT_CHILD, child_size_tokens=128),
            language_hint="en",
        )
        assert kb.chunking.strategy == pb.CHUNKING_STRATEGY_PARENT_CHILD
        with pytest.raises(grpc.aio.AioRpcError) as duplicate:
            await api.kb(name)
        assert duplicate.value.code() == grpc.StatusCode.ALREADY_EXISTS
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await api.kb(chunking=pb.ChunkingConfig(chunk_size_tokens=100_000))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "chunking.chunk_size_tokens" in bad.value.details()
        updated = await api.ingestion.UpdateKnowledgeBase(
            pb.UpdateKnowledgeBaseRequest(knowledge_base_id=kb.id, name=name + "-v2", description="new")
        )
        assert (updated.knowledge_base.name, updated.knowledge_base.description) == (name + "-v2", "new")
        names = [
            k.name
            for k in (await api.ingestion.ListKnowledgeBases(pb.ListKnowledgeBasesRequest())).knowledge_bases
        ]
        assert name + "-v2" in names
        with bound_identity(OTHER):
            others = await api.ingestion.ListKnowledgeBases(pb.ListKnowledgeBasesRequest())
            assert name + "-v2" not in [k.name for k in others.knowledge_bases]
            with pytest.raises(grpc.aio.AioRpcError) as hidden:
                await api.ingestion.DeleteKnowledgeBase(
                    pb.DeleteKnowledgeBaseRequest(knowledge_base_id=kb.id)
                )
            assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
        uploaded = await api.upload(kb.id, "policy.md", POLICY)
        await api.wait(uploaded.document.id)
        await api.ingestion.DeleteKnowledgeBase(pb.DeleteKnowledgeBaseRequest(knowledge_base_id=kb.id))
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await api.ingestion.GetKnowledgeBase(pb.GetKnowledgeBaseRequest(knowledge_base_id=kb.id))
        assert gone.value.code() == grpc.StatusCode.NOT_FOUND
        assert (await api.stats(kb.id)).chunk_count == 0
        assert not [p for p in blob_files(stack) if f"/kb/{kb.id}/" in str(p)]

    run(stack, LOCAL, work)


def test_a_chinese_knowledge_base_gets_the_multilingual_builtin_by_default(stack: Any) -> None:
    """The tenant's default (English-only MiniLM) cannot read Chinese: a knowledge base that says it is
    Chinese, by its hint or its name, gets the multilingual built-in; an explicit model always wins."""

    async def work(api: Api) -> None:
        suffix = uuid.uuid4().hex[:6]
        by_name = await api.kb(f"员工手册-{suffix}")
        by_hint = await api.kb(f"handbook-zh-{suffix}", language_hint="zh-CN")
        english = await api.kb(f"handbook-en-{suffix}", language_hint="en")
        named = await api.kb(f"手册-{suffix}", embedding_model_id="builtin-minilm-l6-v2")
        assert by_name.embedding_model_id == by_hint.embedding_model_id == "builtin-multilingual-e5-small"
        assert english.embedding_model_id == named.embedding_model_id == "builtin-minilm-l6-v2"
        for kb in (by_name, by_hint, english, named):
            await api.ingestion.DeleteKnowledgeBase(pb.DeleteKnowledgeBaseRequest(knowledge_base_id=kb.id))

    run(stack, LOCAL, work)


def _long_document() -> bytes:
    sentences = [
        f"Section {i} explains how component {i} of the turbine is inspected, cleaned and logged "
        f"by the maintenance crew every {i % 12 + 1} weeks, with torque values noted in the book."
        for i in range(420)
    ]
    return ("# Turbine maintenance\n\n" + "\n\n".join(sentences) + "\n").encode()


def test_killing_the_worker_mid_embedding_resumes_with_exactly_the_expected_chunks(
    stack: Any, otlp: Any
) -> None:
    data = _long_document()
    settings = ChunkingSettings(chunk_size_tokens=48, chunk_overlap_tokens=8)

    async def work(api: Api) -> tuple[str, list[str]]:
        kb = await api.kb(chunking=pb.ChunkingConfig(chunk_size_tokens=48, chunk_overlap_tokens=8))
        uploaded = await api.upload(kb.id, "turbine.md", data)
        document_id = uploaded.document.id
        request = pb.WatchDocumentProgressRequest(documents=pb.DocumentIdList(document_ids=[document_id]))
        killed = False
        async for update in api.ingestion.WatchDocumentProgress(request, timeout=300):
            p = update.progress
            if (
                not killed
                and p.status == pb.DOCUMENT_STATUS_EMBEDDING
                and 64 <= p.chunks_embedded < p.chunks_total
            ):
                worker = stack.state().component("ingestion-worker")
                os.kill(worker.pid, signal.SIGKILL)
                killed = True
                killed_at = p.chunks_embedded
        assert killed, "the embedding stage ended before the worker could be killed"
        document = (await api.ingestion.GetDocument(pb.GetDocumentRequest(document_id=document_id))).document
        assert document.status == pb.DOCUMENT_STATUS_READY, document.failure
        assert killed_at < document.chunk_count
        stats = await api.stats(kb.id)
        assert stats.chunk_count == document.chunk_count == stats.lexical_entry_count
        assert sum(e.vector_count for e in stats.embeddings) == document.chunk_count
        return document_id, await api.chunk_ids(document_id)

    document_id, indexed = run(stack, LOCAL, work)
    expected = [c.id for c in chunk_document(document_id, parse(data, "turbine.md"), settings.to_config())]
    assert len(expected) > 128
    assert indexed == expected  # none lost, none duplicated, in reading order

    # It resumed at the embed stage, at the batch it was on: the file was parsed once (a re-run stage
    # finds its stored output), and the restarted worker's embed span reports the batches it found
    # already embedded.
    (upload,) = otlp.wait_for_spans(
        lambda s: s.name == "ingestion.upload" and s.attributes.get("ks.document.id") == document_id
    )

    def resumed(spans: list[ReceivedSpan]) -> bool:
        return any(
            s.name == "ingestion.embed_batches" and s.attributes.get("ks.chunks.resumed") for s in spans
        )

    spans = otlp.wait_for(upload.trace_id, resumed, timeout=60)
    embed = next(
        s for s in spans if s.name == "ingestion.embed_batches" and s.attributes.get("ks.chunks.resumed")
    )
    assert 64 <= int(embed.attributes["ks.chunks.resumed"]) < len(expected)
    assert len([s for s in spans if s.name == "ingestion.parse_file"]) == 1


def test_the_upload_policy_names_limits_and_types(stack: Any) -> None:
    async def work(api: Api) -> pb.GetUploadPolicyResponse:
        return await api.ingestion.GetUploadPolicy(pb.GetUploadPolicyRequest())

    policy = run(stack, LOCAL, work)
    assert policy.max_file_size_bytes == 100 * 1024 * 1024
    by_extension = {t.extension: t for t in policy.file_types}
    assert {"pdf", "docx", "pptx", "xlsx", "csv", "md", "txt", "html", "png", "mp3"} <= set(by_extension)
    assert list(by_extension["mp3"].missing_components) == ["asr"]  # no speech model in a fresh stack


def test_changing_the_embedding_model_re_embeds_and_switches_over_when_complete(stack: Any) -> None:
    new_model = "builtin-multilingual-e5-small"

    async def work(api: Api) -> None:
        kb = await api.kb()
        first = await api.upload(kb.id, "policy.md", POLICY)
        assert (await api.wait(first.document.id))[0].status == pb.DOCUMENT_STATUS_READY
        request = pb.UpdateKnowledgeBaseRequest(knowledge_base_id=kb.id, embedding_model_id=new_model)
        started = (await api.ingestion.UpdateKnowledgeBase(request)).knowledge_base
        assert started.migration.state == pb.MIGRATION_STATE_RUNNING
        assert (started.migration.from_model_id, started.migration.to_model_id) == (
            kb.embedding_model_id,
            new_model,
        )
        # Until the switch, queries keep using the old model; a retried request starts nothing new.
        again = (await api.ingestion.UpdateKnowledgeBase(request)).knowledge_base
        assert again.migration.start_time == started.migration.start_time
        query = rpb.SearchRequest(query="how many days of annual leave", knowledge_base_ids=[kb.id], top_k=3)
        assert "25 days" in (await api.retrieval.Search(query)).results[0].text
        deadline = asyncio.get_running_loop().time() + 180
        while True:
            current = (
                await api.ingestion.GetKnowledgeBase(pb.GetKnowledgeBaseRequest(knowledge_base_id=kb.id))
            ).knowledge_base
            if current.migration.state != pb.MIGRATION_STATE_RUNNING:
                break
            assert asyncio.get_running_loop().time() < deadline, current.migration
            await asyncio.sleep(1)
        assert current.migration.state == pb.MIGRATION_STATE_COMPLETED, current.migration.failure_reason
        assert current.embedding_model_id == new_model
        assert (current.migration.documents_done, current.migration.documents_total) == (1, 1)
        stats = await api.stats(kb.id)
        vectors = {e.model_id: (e.vector_count, e.active) for e in stats.embeddings}
        assert vectors[new_model] == (3, True)
        assert vectors.get(kb.embedding_model_id, (0, False))[0] == 0  # the old vectors are gone
        assert "25 days" in (await api.retrieval.Search(query)).results[0].text
        # New documents are embedded with the new model.
        second = await api.upload(kb.id, "sick.md", b"# Sick leave\n\nCall your manager before 9 am.\n")
        assert (await api.wait(second.document.id))[0].status == pb.DOCUMENT_STATUS_READY
        stats = await api.stats(kb.id)
        assert {e.model_id: e.vector_count for e in stats.embeddings}[new_model] == 4

    run(stack, LOCAL, work)
