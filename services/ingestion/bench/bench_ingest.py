"""End-to-end ingestion throughput against the embedding model alone, in one run.

    make bench-ingest DIR=<folder>      # a folder of files, or a BEIR corpus (each record a document)

Starts the whole stack (the same launcher as ``make up``) on free ports in a temporary folder, creates
a knowledge base, uploads the documents through the ingestion gRPC API — in UploadDocuments streams of
``--files-per-upload`` files, ``--concurrency`` streams at a time, as a team's upload script would (or
one UploadDocument call per file with ``--files-per-upload 1``) — and waits until each one is ready
or failed. Then, in the same stack, it
embeds the very chunks that were indexed through modelhub's Embed in plain batches (32 texts, corpus
order, like a simple script) and times that alone.

Prints documents/s, pages/s, chunks/s, the share of worker time per stage and the embedding-only
throughput; the last line is one JSON object with the figures, including ``documents``, ``failed`` and
``overhead_ratio`` = end-to-end seconds / embedding-only seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.domain.chunking import ChunkDraft, embedding_text
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import open_channel
from knowsphere_stack import Stack, StackConfig

TENANT = Identity("bench", "bench")
UPLOAD_PIECE = 1024 * 1024
BASELINE_BATCH = 32


def documents(source: Path, limit: int | None) -> Iterator[tuple[str, bytes]]:
    """(file name, bytes) of every document: files of a folder, or the records of a BEIR corpus."""
    corpus = source / "corpus.jsonl"
    count = 0
    if corpus.exists():
        with corpus.open(encoding="utf-8") as lines:
            for line in lines:
                if limit is not None and count >= limit:
                    return
                record = json.loads(line)
                title = record.get("title", "").strip()
                text = record.get("text", "").strip()
                body = f"{title}\n\n{text}" if title else text
                if body:
                    count += 1
                    yield f"{record['_id']}.txt", body.encode()
        return
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        if limit is not None and count >= limit:
            return
        if (
            path.name.startswith(".")
            or "-expected" in path.name
            or path.name in ("manifest.json", "README.md")
        ):
            continue
        count += 1
        yield str(path.relative_to(source)).replace("/", "__"), path.read_bytes()


def _messages(message: Any, kb_id: str, name: str, data: bytes) -> Iterator[Any]:
    """A file as upload messages of type ``message``: its header, then its bytes in pieces."""
    yield message(
        header=pb.UploadHeader(knowledge_base_id=kb_id, file_name=name, declared_size_bytes=len(data))
    )
    for start in range(0, len(data), UPLOAD_PIECE):
        yield message(chunk=data[start : start + UPLOAD_PIECE])


async def _upload(stub: Any, kb_id: str, files: list[tuple[str, bytes]]) -> list[pb.UploadResult]:
    """Uploads files, one call each (one file) or as one UploadDocuments stream; a result per file."""

    async def requests(message: Any) -> AsyncIterator[Any]:
        for name, data in files:
            for request in _messages(message, kb_id, name, data):
                yield request

    if len(files) == 1:
        name = files[0][0]
        try:
            response = await stub.UploadDocument(requests(pb.UploadDocumentRequest), timeout=600)
        except grpc.aio.AioRpcError as error:  # refused at upload: counts as failed
            code = error.code().name
            return [pb.UploadResult(file_name=name, error=pb.UploadError(code=code, message=error.details()))]
        return [pb.UploadResult(file_name=name, document=response.document, duplicate=response.duplicate)]
    return list((await stub.UploadDocuments(requests(pb.UploadDocumentsRequest), timeout=600)).results)


async def ingest(
    stack: Stack, docs: list[tuple[str, bytes]], concurrency: int, files_per_upload: int
) -> dict[str, Any]:
    async with open_channel(
        stack.grpc_addr("ingestion"), services=[CONTRACTS["ingestion"].descriptor]
    ) as channel:
        stub = CONTRACTS["ingestion"].stub(channel)
        with bound_identity(TENANT):
            kb = (await stub.CreateKnowledgeBase(pb.CreateKnowledgeBaseRequest(name="bench"))).knowledge_base
            ids: list[str] = []
            refused: list[tuple[str, str]] = []
            semaphore = asyncio.Semaphore(concurrency)

            async def one(files: list[tuple[str, bytes]]) -> None:
                async with semaphore:
                    for result in await _upload(stub, kb.id, files):
                        if result.HasField("error"):
                            refused.append((result.file_name, f"{result.error.code}: {result.error.message}"))
                        elif not result.duplicate:
                            ids.append(result.document.id)

            started = time.perf_counter()
            groups = [docs[i : i + files_per_upload] for i in range(0, len(docs), files_per_upload)]
            await asyncio.gather(*(one(group) for group in groups))
            uploaded = time.perf_counter() - started
            # Done when no document of the knowledge base is still on its way (one cheap query a second).
            working = [
                pb.DOCUMENT_STATUS_QUEUED,
                pb.DOCUMENT_STATUS_PARSING,
                pb.DOCUMENT_STATUS_CHUNKING,
                pb.DOCUMENT_STATUS_EMBEDDING,
                pb.DOCUMENT_STATUS_INDEXING,
                pb.DOCUMENT_STATUS_GRAPH,
            ]
            last_report = 0.0
            while True:
                page = await stub.ListDocuments(
                    pb.ListDocumentsRequest(knowledge_base_id=kb.id, statuses=working, page_size=1)
                )
                if not page.documents:
                    break
                now = time.perf_counter() - started
                if now - last_report > 15:
                    last_report = now
                    print(f"  still working after {now:.0f} s", file=sys.stderr)
                await asyncio.sleep(1.0)
            elapsed = time.perf_counter() - started
            final: list[pb.Document] = []
            token = ""
            while True:
                page = await stub.ListDocuments(
                    pb.ListDocumentsRequest(knowledge_base_id=kb.id, page_size=200, page_token=token)
                )
                final.extend(page.documents)
                token = page.next_page_token
                if not token:
                    break
    return {"kb": kb, "documents": final, "refused": refused, "seconds": elapsed, "upload_seconds": uploaded}


async def indexed_chunks(stack: Stack, documents: list[pb.Document]) -> list[ChunkDraft]:
    """The chunks retrieval holds for these documents, in document and reading order."""
    out: list[ChunkDraft] = []
    async with open_channel(
        stack.grpc_addr("retrieval"), services=[CONTRACTS["retrieval"].descriptor]
    ) as channel:
        stub = CONTRACTS["retrieval"].stub(channel)
        with bound_identity(TENANT):
            for document in documents:
                if document.status != pb.DOCUMENT_STATUS_READY:
                    continue
                selector = rpb.ChunkSelector(
                    range=rpb.PositionRange(document_id=document.id, start_position=0, end_position=1_000_000)
                )
                token = ""
                while True:
                    page = await stub.ListChunks(
                        rpb.ListChunksRequest(selectors=[selector], page_size=200, page_token=token)
                    )
                    out.extend(
                        ChunkDraft(
                            id=c.chunk_id,
                            text=c.text,
                            parent_id=c.parent_id,
                            parent_text="",
                            position=c.position,
                            heading_path=tuple(c.heading_path),
                            page=c.page,
                            token_count=0,
                        )
                        for c in page.chunks
                    )
                    token = page.next_page_token
                    if not token:
                        break
    return out


async def embed_only(stack: Stack, model_id: str, texts: list[str]) -> float:
    async with open_channel(
        stack.grpc_addr("modelhub"), services=[CONTRACTS["modelhub"].descriptor]
    ) as channel:
        stub = CONTRACTS["modelhub"].stub(channel)
        with bound_identity(TENANT):
            started = time.perf_counter()
            for start in range(0, len(texts), BASELINE_BATCH):
                await stub.Embed(
                    mpb.EmbedRequest(
                        model_id=model_id,
                        texts=texts[start : start + BASELINE_BATCH],
                        input_type=mpb.EMBED_INPUT_TYPE_DOCUMENT,
                    ),
                    timeout=600,
                )
            return time.perf_counter() - started


async def stage_shares(stack: Stack, kb_id: str) -> dict[str, float]:
    data_dir = Path(stack.config.service_data_dir("ingestion"))
    store = IngestionStore(f"sqlite+aiosqlite:///{data_dir}/ingestion.db")
    await store.open()
    try:
        rows = await store.stage_seconds(TENANT.tenant_id, kb_id)
    finally:
        await store.close()
    totals: dict[str, float] = {}
    for row in rows:
        for stage, seconds in row.items():
            totals[stage] = totals.get(stage, 0.0) + seconds
    whole = sum(totals.values()) or 1.0
    return {stage: round(seconds / whole, 3) for stage, seconds in sorted(totals.items())}


def cpu_seconds(stack: Stack) -> dict[str, float]:
    """CPU time (user + system) each component of the stack has used so far, from /proc."""
    state = stack.state()
    out: dict[str, float] = {}
    if state is None:
        return out
    ticks = os.sysconf("SC_CLK_TCK")
    for component in state.components:
        if component.pid is None:
            continue
        total = 0.0
        for pid in [component.pid, *_children(component.pid)]:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / ticks
        out[component.name] = round(total, 1)
    return out


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        direct = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return found
    for child in map(int, direct):
        found.append(child)
        found.extend(_children(child))
    return found


async def bench(
    stack: Stack, docs: list[tuple[str, bytes]], concurrency: int, files_per_upload: int
) -> dict[str, Any]:
    cpu_before = cpu_seconds(stack)
    result = await ingest(stack, docs, concurrency, files_per_upload)
    cpu_after = cpu_seconds(stack)
    cpu = {name: round(cpu_after[name] - cpu_before.get(name, 0.0), 1) for name in cpu_after}
    kb = result["kb"]
    final: list[pb.Document] = result["documents"]
    ready = [d for d in final if d.status == pb.DOCUMENT_STATUS_READY]
    failed = [d for d in final if d.status != pb.DOCUMENT_STATUS_READY]
    for document in failed[:20]:
        print(
            f"  failed: {document.file_name}: {document.failure.code}: {document.failure.reason}",
            file=sys.stderr,
        )
    for name, reason in result["refused"][:20]:
        print(f"  refused: {name}: {reason}", file=sys.stderr)
    chunks = await indexed_chunks(stack, ready)
    texts = [embedding_text(c) for c in chunks]
    baseline = await embed_only(stack, kb.embedding_model_id, texts) if texts else 0.0
    seconds = result["seconds"]
    pages = sum(d.page_count for d in ready)
    return {
        "documents": len(final) + len(result["refused"]),
        "ready": len(ready),
        "failed": len(failed) + len(result["refused"]),
        "chunks": len(chunks),
        "pages": pages,
        "seconds": round(seconds, 2),
        "upload_seconds": round(result["upload_seconds"], 2),
        "documents_per_second": round(len(final) / seconds, 2) if seconds else 0.0,
        "pages_per_second": round(pages / seconds, 2) if seconds else 0.0,
        "chunks_per_second": round(len(chunks) / seconds, 2) if seconds else 0.0,
        "stage_shares": await stage_shares(stack, kb.id),
        "cpu_seconds": cpu,
        "embed_only_seconds": round(baseline, 2),
        "embed_only_chunks_per_second": round(len(chunks) / baseline, 2) if baseline else 0.0,
        "overhead_ratio": round(seconds / baseline, 3) if baseline else None,
        "embedding_model": kb.embedding_model_id,
        "concurrency": concurrency,
        "files_per_upload": files_per_upload,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("source", type=Path, help="a folder of files or a BEIR dataset folder")
    parser.add_argument("--limit", type=int, default=None, help="only the first N documents")
    parser.add_argument("--concurrency", type=int, default=4, help="upload calls in flight")
    parser.add_argument(
        "--files-per-upload",
        type=int,
        default=64,
        help="files per UploadDocuments stream (1 = one UploadDocument call per file); 64 fills one of "
        "ingestion's batches (batch_max_documents)",
    )
    parser.add_argument(
        "--embed-threads",
        type=int,
        default=None,
        help="threads of the local embedding model (modelhub's default: the stack's choice)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for the stack's services, e.g. KS_INGESTION_EMBED_BATCH_SIZE=64",
    )
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.env)
    if not args.source.is_dir():
        parser.error(f"{args.source} is not a folder")
    docs = list(documents(args.source, args.limit))
    if not docs:
        parser.error(f"no documents under {args.source}")
    print(f"{len(docs)} documents from {args.source}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="ks-bench-ingest-") as data_dir:
        config = StackConfig.with_free_ports(
            data_dir=Path(data_dir),
            temporal_headless=True,
            extra_env={
                "OTEL_TRACES_EXPORTER": "none",
                **(
                    {"KS_MODELHUB_LOCAL_EMBEDDING_THREADS": str(args.embed_threads)}
                    if args.embed_threads is not None
                    else {}
                ),
                **extra,
            },
        )
        with Stack(config) as stack:
            stack.sign_as_local_client()
            figures = asyncio.run(bench(stack, docs, args.concurrency, args.files_per_upload))
    figures["source"] = str(args.source)
    figures["embed_threads"] = args.embed_threads
    figures["env"] = extra
    figures["machine"] = f"{platform.machine()}, {os.cpu_count()} cores"
    print(
        f"{figures['documents']} documents ({figures['failed']} failed), {figures['chunks']} chunks, "
        f"{figures['pages']} pages in {figures['seconds']} s: {figures['documents_per_second']} docs/s, "
        f"{figures['pages_per_second']} pages/s, {figures['chunks_per_second']} chunks/s",
        file=sys.stderr,
    )
    print(f"stage shares of worker time: {figures['stage_shares']}", file=sys.stderr)
    print(f"CPU seconds per component while ingesting: {figures['cpu_seconds']}", file=sys.stderr)
    print(
        f"embedding alone: {figures['embed_only_seconds']} s "
        f"({figures['embed_only_chunks_per_second']} chunks/s); "
        f"overhead ratio {figures['overhead_ratio']}",
        file=sys.stderr,
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
