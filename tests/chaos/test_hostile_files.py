"""Hostile files uploaded to the running stack by one tenant while another tenant uploads a plain
document: every hostile file fails with a code that says why, within its parse budget; nothing an XML
entity names becomes searchable; the other tenant's document is ready within a minute; and the ingestion
worker (with the processes it parses in) stays within a bound of memory.

Tenant A uploads, each in a request of its own and all at once: a 2,000-page scanned PDF (one small
image on every page, no text layer), a DOCX whose 2 MB archive inflates to a 100 MB XML part, a TIFF
whose second frame declares 10,000 x 10,000 pixels, a DOCX and an XLSX declaring an internal entity
(its text a marker) and an external one (a file holding another marker), and a PDF that is also a ZIP
of that DOCX. Tenant B uploads one plain text file at the same moment. The stack is the one `make up`
runs (NATS, Temporal, modelhub, retrieval, the ingestion API and its worker), with the parse's CPU and
wall-clock budgets lowered to ``PARSE_BUDGET_SECONDS`` so that a parser that ran away would be stopped
within the test instead of after the default 20 minutes.

The memory bound: the worker's tree (worker, forkserver, parse children; RSS summed over processes, so
pages they share count more than once) measured 0.42 GB idle and 0.79 GB at its peak on the 2-core
build machine. With the parsers' content limits lifted (``KS_INGESTION_PARSE_MAX_OCR_PAGES``,
``_MAX_XML_BYTES`` and ``_MAX_IMAGE_PIXELS`` set far above these files: OCR started on the scanned pages,
the XML part read whole, the bomb frame decoded) the same run peaked at 2.6 GB. ``PEAK_RSS_BOUND`` lies
between, with room for a slower machine.
"""

from __future__ import annotations

import asyncio
import importlib.util
import secrets
import string
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import open_channel
from knowsphere_stack import Stack, StackConfig
from knowsphere_stack.config import INGESTION_WORKER

from . import hostile_documents as hostile
from .conftest import ScenarioReport
from .process_memory import TreeMemory, tree_rss_bytes

pytestmark = pytest.mark.chaos

GIB = 1024**3
PARSE_BUDGET_SECONDS = 30
PEAK_RSS_BOUND = 1.5 * GIB
PLAIN_READY_WITHIN_SECONDS = 60.0
UPLOAD_CHUNK_BYTES = 1024 * 1024
TERMINAL = (pb.DOCUMENT_STATUS_READY, pb.DOCUMENT_STATUS_FAILED)
OCR_INSTALLED = importlib.util.find_spec("rapidocr_onnxruntime") is not None


def _marker(kind: str) -> str:
    """A word no document holds by chance: letters only, so every tokenizer keeps it whole."""
    return kind + "".join(secrets.choice(string.ascii_lowercase) for _ in range(12))


@dataclass(frozen=True)
class Upload:
    name: str
    data: bytes
    # The failure codes that say why this file is refused; empty: a clean failure or a harmless parse.
    codes: frozenset[str]


@dataclass(frozen=True)
class Markers:
    internal: str  # the text of the internal entity
    external: str  # the content of the file the external entity names
    polyglot: str  # text on the polyglot's PDF page, readable by design
    plain: str  # text of tenant B's document

    @property
    def secret(self) -> tuple[str, str]:
        return (self.internal, self.external)

    def by_role(self) -> dict[str, str]:
        return {
            "xxe_internal": self.internal,
            "xxe_external": self.external,
            "polyglot": self.polyglot,
            "plain": self.plain,
        }


def _hostile_uploads(markers: Markers, external: Path) -> list[Upload]:
    visible = "Quarterly figures"

    def xxe(data: bytes, part: str) -> bytes:
        return hostile.with_entities(data, part, visible, markers.internal, external)

    xxe_docx = xxe(hostile.docx_with_text(visible), "word/document.xml")
    polyglot_page = hostile.text_pdf([f"Brochure of the spring fair, see {markers.polyglot} for the plan."])
    # Without an OCR engine the scanned pages are kept empty, and a document of empty pages is empty.
    scanned = "too_many_ocr_pages" if OCR_INSTALLED else "empty_document"
    return [
        Upload("scan.pdf", hostile.scanned_pdf(), frozenset({scanned})),
        Upload("contract.docx", hostile.xml_bomb_docx(), frozenset({"archive_too_large"})),
        Upload("fax.tiff", hostile.tiff_with_bomb_frame(), frozenset({"decompression_bomb"})),
        Upload("letter.docx", xxe_docx, frozenset({"corrupt_file"})),
        Upload(
            "sheet.xlsx",
            xxe(hostile.xlsx_with_text(visible), "xl/worksheets/sheet1.xml"),
            frozenset({"corrupt_file"}),
        ),
        Upload("brochure.pdf", hostile.pdf_zip_polyglot(polyglot_page, xxe_docx), frozenset()),
    ]


def _plain_document(marker: str) -> bytes:
    lines = [f"Canteen notice {i}: lunch is served from 11:30 to 14:00, ask for {marker}." for i in range(30)]
    return "\n\n".join(lines).encode()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, identity_keys_dir: Path) -> Iterator[Stack]:
    config = StackConfig.with_free_ports(
        data_dir=tmp_path_factory.mktemp("chaos-hostile"),
        temporal_headless=True,
        services=["modelhub", "retrieval", "ingestion"],
        identity_keys_dir=identity_keys_dir,
        extra_env={
            "OTEL_TRACES_EXPORTER": "none",
            "KS_INGESTION_PARSE_WALL_SECONDS": str(PARSE_BUDGET_SECONDS),
            "KS_INGESTION_PARSE_CPU_SECONDS": str(PARSE_BUDGET_SECONDS),
        },
    )
    with Stack(config) as running:
        yield running


@asynccontextmanager
async def clients(stack: Stack) -> AsyncIterator[tuple[Any, Any]]:
    async with (
        open_channel(stack.grpc_addr("ingestion"), services=[CONTRACTS["ingestion"].descriptor]) as i,
        open_channel(stack.grpc_addr("retrieval"), services=[CONTRACTS["retrieval"].descriptor]) as r,
    ):
        yield CONTRACTS["ingestion"].stub(i), CONTRACTS["retrieval"].stub(r)


async def _kb(ingestion: Any, who: Identity) -> str:
    with bound_identity(who):
        request = pb.CreateKnowledgeBaseRequest(name=f"chaos-{uuid.uuid4().hex[:8]}")
        return str((await ingestion.CreateKnowledgeBase(request)).knowledge_base.id)


async def _upload(ingestion: Any, who: Identity, kb_id: str, name: str, data: bytes) -> tuple[str, float]:
    """Uploads one file as ``who``; returns its document id and when the upload was answered."""

    async def requests() -> AsyncIterator[pb.UploadDocumentRequest]:
        header = pb.UploadHeader(knowledge_base_id=kb_id, file_name=name, declared_size_bytes=len(data))
        yield pb.UploadDocumentRequest(header=header)
        for start in range(0, len(data), UPLOAD_CHUNK_BYTES):
            yield pb.UploadDocumentRequest(chunk=data[start : start + UPLOAD_CHUNK_BYTES])

    with bound_identity(who):
        uploaded = await ingestion.UploadDocument(requests(), timeout=60)
    assert not uploaded.duplicate, name
    return uploaded.document.id, time.monotonic()


async def _until_terminal(
    ingestion: Any, who: Identity, document_id: str, within: float
) -> tuple[pb.Document, float]:
    """The document once it is ready or failed, and when that was seen."""
    deadline = time.monotonic() + within
    with bound_identity(who):
        while True:
            document = (await ingestion.GetDocument(pb.GetDocumentRequest(document_id=document_id))).document
            if document.status in TERMINAL:
                return document, time.monotonic()
            assert time.monotonic() < deadline, (document.file_name, pb.DocumentStatus.Name(document.status))
            await asyncio.sleep(0.25)


async def _texts_found(retrieval: Any, who: Identity, kb_id: str, query: str) -> list[str]:
    """The texts of what a search for ``query`` in ``kb_id`` returns to ``who`` (none when refused)."""
    with bound_identity(who):
        try:
            found = await retrieval.Search(
                rpb.SearchRequest(query=query, knowledge_base_ids=[kb_id], top_k=20)
            )
        except Exception as error:  # another tenant's knowledge base: refused is as good as empty
            code = getattr(error, "code", lambda: None)()
            assert code is not None and code.name in ("NOT_FOUND", "PERMISSION_DENIED"), error
            return []
    return [" ".join([r.text, r.parent_text, *r.heading_path]) for r in found.results]


async def _listed(ingestion: Any, who: Identity, kb_id: str) -> list[pb.Document]:
    with bound_identity(who):
        return list(
            (await ingestion.ListDocuments(pb.ListDocumentsRequest(knowledge_base_id=kb_id))).documents
        )


async def _indexed_chunks(retrieval: Any, who: Identity, kb_id: str) -> int:
    with bound_identity(who):
        stats = await retrieval.GetIndexStats(rpb.GetIndexStatsRequest(knowledge_base_ids=[kb_id]))
    return sum(kb.chunk_count for kb in stats.knowledge_bases)


def test_hostile_files_fail_with_a_reason_and_leak_nothing_while_another_tenant_ingests(
    stack: Stack, tmp_path: Path, scenario_report: ScenarioReport
) -> None:
    tenant_a = Identity(f"chaos-a-{uuid.uuid4().hex[:8]}", "mallory")
    tenant_b = Identity(f"chaos-b-{uuid.uuid4().hex[:8]}", "bob")
    markers = Markers(_marker("xxeint"), _marker("xxeext"), _marker("poly"), _marker("plain"))
    external = tmp_path / "external-entity.txt"
    external.write_text(f"{markers.external}\n")
    uploads = _hostile_uploads(markers, external)
    plain = _plain_document(markers.plain)
    state = stack.state()
    worker_pid = state.component(INGESTION_WORKER).pid if state else None
    assert worker_pid is not None

    async def scenario() -> dict[str, Any]:
        async with clients(stack) as (ingestion, retrieval):
            kb_a, kb_b = await _kb(ingestion, tenant_a), await _kb(ingestion, tenant_b)
            memory = TreeMemory(worker_pid, interval=0.05).start()
            try:
                started = time.monotonic()
                sent = await asyncio.gather(
                    _upload(ingestion, tenant_b, kb_b, "canteen.txt", plain),
                    *(_upload(ingestion, tenant_a, kb_a, u.name, u.data) for u in uploads),
                )
                (plain_id, plain_sent), hostile_sent = sent[0], sent[1:]
                ended = await asyncio.gather(
                    _until_terminal(ingestion, tenant_b, plain_id, within=300),
                    *(_until_terminal(ingestion, tenant_a, i, within=300) for i, _ in hostile_sent),
                )
            finally:
                memory.stop()
            (plain_doc, plain_at), hostile_ended = ended[0], ended[1:]
            await asyncio.sleep(2)  # a parse child that outlived its document would show now
            _, processes_after = tree_rss_bytes(worker_pid)

            # Each marker searched for by each tenant in each knowledge base: "xxe_internal as a in b".
            found: dict[str, list[str]] = {}
            for role, marker in markers.by_role().items():
                for who, name in ((tenant_a, "a"), (tenant_b, "b")):
                    for kb, kb_name in ((kb_a, "a"), (kb_b, "b")):
                        texts = await _texts_found(retrieval, who, kb, marker)
                        found[f"{role} as {name} in {kb_name}"] = [t for t in texts if marker in t]
            listed_a, listed_b = (
                await _listed(ingestion, tenant_a, kb_a),
                await _listed(ingestion, tenant_b, kb_b),
            )
            indexed_a = await _indexed_chunks(retrieval, tenant_a, kb_a)
            indexed_b = await _indexed_chunks(retrieval, tenant_b, kb_b)

        results: list[dict[str, Any]] = []
        for upload, (document_id, sent_at), (document, at) in zip(
            uploads, hostile_sent, hostile_ended, strict=True
        ):
            assert document.id == document_id
            results.append(
                {
                    "file": upload.name,
                    "size_bytes": len(upload.data),
                    "status": pb.DocumentStatus.Name(document.status)
                    .removeprefix("DOCUMENT_STATUS_")
                    .lower(),
                    "stage": pb.IngestionStage.Name(document.failure.stage)
                    if document.HasField("failure")
                    else "",
                    "code": document.failure.code,
                    "reason": document.failure.reason,
                    "expected": sorted(upload.codes),
                    "seconds": round(at - sent_at, 1),
                }
            )
        uploaded_ids = {plain_id, *(i for i, _ in hostile_sent)}
        listed_ids = [d.id for d in (*listed_a, *listed_b)]
        leaks = {key: texts for key, texts in found.items() if texts and key.startswith("xxe_")}
        processes_left = max(0, processes_after - memory.baseline_processes)
        return {
            "scenario": "hostile files beside another tenant's upload",
            "documents": len(uploaded_ids),
            "lost": sorted(uploaded_ids - set(listed_ids)),
            "duplicated": len(listed_ids) - len(set(listed_ids)),
            "failed_as_expected": sum(
                r["status"] == "failed" and r["code"] in r["expected"] for r in results
            ),
            "hostile": len(results),
            # Text an entity named that became searchable, and parse processes that outlived their document.
            "leaked": sum(len(texts) for texts in leaks.values()) + processes_left,
            "leaks": leaks,
            "processes_left": processes_left,
            "plain_status": pb.DocumentStatus.Name(plain_doc.status),
            "plain_ready_seconds": round(plain_at - plain_sent, 1),
            "plain_chunks": plain_doc.chunk_count,
            "indexed_chunks": {"a": indexed_a, "b": indexed_b},
            "ready_chunks_a": sum(
                d.chunk_count for d, _ in hostile_ended if d.status == pb.DOCUMENT_STATUS_READY
            ),
            "found": {key: len(texts) for key, texts in found.items()},
            "seconds_to_all_ended": round(max(at for _, at in ended) - started, 1),
            "worker_rss_baseline_bytes": memory.baseline_bytes,
            "worker_rss_peak_bytes": memory.peak_bytes,
            "worker_processes_peak": memory.peak_processes,
            "rss_samples": memory.samples,
            "files": results,
        }

    report = asyncio.run(scenario())
    scenario_report(report)
    # Nothing was lost or recorded twice, and nothing an entity names is readable anywhere.
    assert report["lost"] == [] and report["duplicated"] == 0
    assert report["leaks"] == {}, report["leaks"]
    for result in report["files"]:
        if result["expected"]:
            assert (result["status"], result["code"]) == ("failed", result["expected"][0]), result
            assert result["stage"] == "INGESTION_STAGE_PARSE" and result["file"] in result["reason"], result
            assert result["seconds"] <= PARSE_BUDGET_SECONDS, result
        else:  # the polyglot: refused cleanly, or read as the PDF it is, never as the ZIP behind it
            assert result["status"] in ("failed", "ready"), result
            assert result["status"] == "ready" or result["code"], result
        assert not any(marker in result["reason"] for marker in markers.secret), result
    polyglot = report["files"][-1]
    if polyglot["status"] == "ready":  # its own page is what was read, and only by its own tenant
        assert report["found"]["polyglot as a in a"] > 0, report["found"]
        assert report["found"]["polyglot as b in a"] == 0, report["found"]
    # Tenant B's document was not held up by the hostile ones, and is B's alone.
    assert report["plain_status"] == "DOCUMENT_STATUS_READY"
    assert report["plain_ready_seconds"] <= PLAIN_READY_WITHIN_SECONDS, report["plain_ready_seconds"]
    assert report["found"]["plain as b in b"] > 0, report["found"]
    assert report["found"]["plain as a in b"] == 0, report["found"]
    # Only what became ready is indexed: a refused file left no chunk behind.
    assert report["indexed_chunks"] == {"a": report["ready_chunks_a"], "b": report["plain_chunks"]}
    # Memory stayed bounded, and no parse outlived its document.
    assert report["worker_rss_peak_bytes"] < PEAK_RSS_BOUND, report["worker_rss_peak_bytes"]
    assert report["processes_left"] == 0
