"""Hostile files against the parse budget: every document is parsed in a child process that is limited
in CPU time, memory and wall-clock time, and the parsers refuse XML bombs, decompression bombs, too many
pages to OCR and XML entities. Each test asserts what a user sees of the document: its failure code and
a reason naming the limit and its setting; and, where it matters, that the worker's memory stays its own.

The hostile files are built here: an Office file whose XML part inflates to 190 MB from a 3 MB archive,
a TIFF whose second frame declares 10,000 x 10,000 or 14,000 x 14,000 pixels, a 40-page scanned PDF,
DOCX and XLSX files declaring entities, a 4 MB HTML page that takes seconds of CPU to extract.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import io
import json
import random
import subprocess
import sys
import time
import zipfile
import zlib
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docx
import openpyxl
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from PIL import Image, ImageDraw

from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere_contracts.vocabulary import DocumentStatus, IngestionStage
from knowsphere_ingestion import artifacts
from knowsphere_ingestion.activities import IngestionActivities
from knowsphere_ingestion.adapters.batching import EmbedBatcher
from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.domain.records import ChunkingSettings, Document, KnowledgeBase
from knowsphere_ingestion.parsing.budget import IN_PROCESS_MAX_BYTES, BudgetedParse, BudgetedParser
from knowsphere_ingestion.parsing.limits import MIB, ParseLimits, setting
from knowsphere_ingestion.settings import Settings
from knowsphere_ingestion.stages.identity import workflow_token
from knowsphere_ingestion.storage.blobs import build_blob_store
from knowsphere_ingestion.workflows import DocumentRun, IngestBatch
from knowsphere_runtime.identity import Identity
from knowsphere_telemetry import attributes as attr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiff_frames import deflated_zeros, tiff

XML_BOMB_BYTES = 190 * MIB
needs_ocr = pytest.mark.skipif(
    importlib.util.find_spec("rapidocr_onnxruntime") is None, reason="OCR engine rapidocr-onnxruntime missing"
)


@contextlib.asynccontextmanager
async def budgeted(limits: ParseLimits, *, in_process_max_bytes: int = 0) -> AsyncIterator[BudgetedParser]:
    """A started parser with ``limits``, one document at a time, stopped on exit; every file in a child
    (plain text too, unless ``in_process_max_bytes`` says otherwise), so a plain parse is the baseline a
    child's usage is compared with."""
    parser = BudgetedParser(limits, processes=1, in_process_max_bytes=in_process_max_bytes)
    await parser.start()
    try:
        yield parser
    finally:
        await parser.stop()


@pytest.fixture
async def parser() -> AsyncIterator[BudgetedParser]:
    async with budgeted(ParseLimits()) as started:
        yield started


async def parse_failure(parser: BudgetedParser, data: bytes, name: str) -> tuple[str, str, BudgetedParse]:
    """The failure code and reason a document parsed by ``parser`` gets, and the whole outcome."""
    outcome = await parser.parse(data, name)
    assert outcome.error is not None, f"{name} parsed, yet it should have failed"
    return outcome.error.code.value, str(outcome.error), outcome


async def plain_text_parses(parser: BudgetedParser) -> BudgetedParse:
    outcome = await parser.parse(b"Opening hours: the office opens at nine.", "hours.txt")
    assert outcome.result().text == "Opening hours: the office opens at nine."
    return outcome


# --- hostile files ------------------------------------------------------------------------------------


def _docx_with_body(paragraphs: Iterator[bytes]) -> bytes:
    """A DOCX (python-docx's template) whose document.xml body is ``paragraphs``, streamed in."""
    template = io.BytesIO()
    document = docx.Document()
    document.add_paragraph("x")
    document.save(template)
    source = zipfile.ZipFile(template)
    head, tail = source.read("word/document.xml").split(b"<w:body>", 1)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for item in source.infolist():
            if item.filename != "word/document.xml":
                archive.writestr(item.filename, source.read(item.filename))
        with archive.open("word/document.xml", "w", force_zip64=True) as part:
            part.write(head + b"<w:body>")
            for chunk in paragraphs:
                part.write(chunk)
            part.write(tail)
    return out.getvalue()


@pytest.fixture(scope="module")
def xml_bomb() -> bytes:
    """A 3 MB DOCX whose document.xml inflates to 190 MB: under the 200 MB and 100:1 archive checks.

    One paragraph in eight carries a random number, so that deflate compresses it about 50:1."""
    rng = random.Random(7)
    same = b"<w:p><w:r><w:t>The same clause applies to every item listed in the schedule.</w:t></w:r></w:p>"
    block = b"".join(
        b"<w:p><w:r><w:t>Clause %d applies.</w:t></w:r></w:p>" % rng.randrange(10**12) if i % 8 == 0 else same
        for i in range(12_000)
    )
    return _docx_with_body(iter([block] * (XML_BOMB_BYTES // len(block))))


def _scanned_pdf(pages: int) -> bytes:
    """A PDF of ``pages`` page images of typed lines and no text layer, as a scanner writes them."""
    page = Image.new("L", (850, 1100), 255)
    draw = ImageDraw.Draw(page)
    for line in range(30):
        draw.text((60, 60 + line * 32), f"Line {line} of a scanned contract page.", fill=0, font_size=22)
    buffer = io.BytesIO()
    page.save(buffer, format="PDF", save_all=True, append_images=[page] * (pages - 1), resolution=100)
    return buffer.getvalue()


_DOCTYPE = '<!DOCTYPE root [<!ENTITY secret "INTERNALSECRET"><!ENTITY file SYSTEM "file:///etc/hostname">]>'


def _with_entities(data: bytes, part: str, visible: str, encoding: str) -> bytes:
    """``data`` (an Office file) with a DTD declaring entities in ``part``, and ``visible`` text followed
    by references to them; the part re-encoded in ``encoding``."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in source.infolist():
            content = source.read(item.filename)
            if item.filename == part:
                text = content.decode("utf-8")
                if text.startswith("<?xml"):
                    text = text[text.index("?>") + 2 :]
                text = f'<?xml version="1.0" encoding="{encoding}"?>' + _DOCTYPE + text.lstrip()
                text = text.replace(visible, f"{visible} &secret; &file;")
                content = text.encode(encoding)
                if encoding == "utf-16":
                    assert content.startswith((b"\xff\xfe", b"\xfe\xff"))  # Python writes a byte-order mark
            archive.writestr(item.filename, content)
    return out.getvalue()


def _docx(text: str) -> bytes:
    buffer = io.BytesIO()
    document = docx.Document()
    document.add_paragraph(text)
    document.save(buffer)
    return buffer.getvalue()


def _xlsx(text: str) -> bytes:
    buffer = io.BytesIO()
    workbook = openpyxl.Workbook()
    workbook.active["A1"] = text  # type: ignore[index]
    workbook.save(buffer)
    return buffer.getvalue()


def _slow_html() -> bytes:
    """A 4 MB article of 50,000 paragraphs: extracting it takes about 6 CPU seconds here."""
    paragraphs = "".join(
        f"<p>Paragraph {i} tells about topic {i % 97} in a sentence long enough to be kept.</p>"
        for i in range(50_000)
    )
    return f"<html><body><article>{paragraphs}</article></body></html>".encode()


# --- the tests ----------------------------------------------------------------------------------------


async def test_an_xml_bomb_docx_fails_naming_the_xml_part_limit_without_inflating_it(
    parser: BudgetedParser, xml_bomb: bytes
) -> None:
    declared = sum(member.file_size for member in zipfile.ZipFile(io.BytesIO(xml_bomb)).infolist())
    assert len(xml_bomb) < 4 * MIB and declared < 200 * MIB and declared < 100 * len(xml_bomb)
    baseline = await plain_text_parses(parser)

    code, reason, outcome = await parse_failure(parser, xml_bomb, "contract.docx")

    assert code == "archive_too_large"
    assert reason == (
        "contract.docx: its XML part word/document.xml decompresses to more than 67108864 bytes, the "
        "limit per XML part (KS_INGESTION_PARSE_MAX_XML_BYTES)"
    )
    # The part was counted as it streamed by, never held: the child stayed near a plain text parse.
    assert outcome.usage is not None and baseline.usage is not None
    assert outcome.usage.peak_rss_bytes < baseline.usage.peak_rss_bytes + 32 * MIB


@pytest.mark.parametrize("side", [10_000, 14_000])
async def test_a_tiff_whose_second_frame_is_a_bomb_fails_before_that_frame_is_decoded(
    parser: BudgetedParser, side: int
) -> None:
    pixels = side * side
    first = (64, 64, zlib.compress(bytes([255]) * 64 * 64))
    # Pixels that really decode: a decoder that went ahead would fill all side x side bytes.
    data = tiff([first, (side, side, deflated_zeros(pixels))])
    assert len(data) < 300 * 1024
    baseline = await plain_text_parses(parser)

    code, reason, outcome = await parse_failure(parser, data, "scan.tiff")

    assert code == "decompression_bomb"
    assert reason.startswith(f"scan.tiff is too large: frame 2 is {side}x{side} = {pixels} pixels, over ")
    assert "the limit of 89478485 pixels (KS_INGESTION_PARSE_MAX_IMAGE_PIXELS)" in reason
    assert outcome.usage is not None and baseline.usage is not None
    assert outcome.usage.peak_rss_bytes < baseline.usage.peak_rss_bytes + pixels // 4


@needs_ocr
async def test_a_scanned_pdf_over_the_ocr_page_limit_fails_before_ocr_starts() -> None:
    data = _scanned_pdf(40)
    async with budgeted(ParseLimits(max_ocr_pages=5)) as parser:
        code, reason, outcome = await parse_failure(parser, data, "scan.pdf")

    assert code == "too_many_ocr_pages"
    assert reason == (
        "scan.pdf has 40 pages without a text layer to read by OCR, over the limit of 5 pages per "
        "document (KS_INGESTION_PARSE_MAX_OCR_PAGES)"
    )
    # Refused before the first page was read by OCR, which alone takes about 5 CPU seconds here.
    assert outcome.usage is not None and outcome.usage.cpu_seconds < 4


@pytest.mark.parametrize(
    ("name", "build", "part", "encoding"),
    [
        ("letter.docx", _docx, "word/document.xml", "utf-8"),
        ("sheet.xlsx", _xlsx, "xl/worksheets/sheet1.xml", "utf-8"),
        ("sheet16.xlsx", _xlsx, "xl/worksheets/sheet1.xml", "utf-16"),
    ],
)
async def test_an_office_file_declaring_xml_entities_is_refused_and_their_text_never_read(
    parser: BudgetedParser, name: str, build: Any, part: str, encoding: str
) -> None:
    visible = "Quarterly figures"
    plain = await parser.parse(build(visible), name)
    assert visible in plain.result().text  # the same file without the entities is read

    code, reason, _ = await parse_failure(
        parser, _with_entities(build(visible), part, visible, encoding), name
    )

    assert code == "corrupt_file"
    assert reason == (
        f"{name}: its XML part {part} declares XML entities (<!ENTITY>), which Office files do not use; "
        "refused so that no entity's text or referenced file is read into the document"
    )
    assert "INTERNALSECRET" not in reason


async def test_a_small_plain_text_file_is_parsed_without_a_child_and_a_large_one_in_a_child() -> None:
    async with budgeted(ParseLimits(), in_process_max_bytes=IN_PROCESS_MAX_BYTES) as parser:
        await _small_in_process_large_in_a_child(parser)


async def _small_in_process_large_in_a_child(parser: BudgetedParser) -> None:
    small = await parser.parse(b"# Leave\n\nEmployees get 27 days of leave.\n", "leave.md")
    assert small.usage is None and "27 days" in small.result().text  # no child started for it
    large_text = ("Employees get 27 days of leave. " * 10_000).encode()  # 320 KB
    large = await parser.parse(large_text, "leave.txt")
    assert large.usage is not None and large.usage.cpu_seconds >= 0  # a child parsed it
    assert "27 days" in large.result().text
    # Formats that can expand always go to a child, however small.
    html = await parser.parse(b"<html><body><p>27 days</p></body></html>", "leave.html")
    assert html.usage is not None


async def test_a_parse_over_its_cpu_budget_is_stopped_and_the_next_document_parses() -> None:
    async with budgeted(ParseLimits(cpu_seconds=1)) as parser:
        started = time.monotonic()
        code, reason, _ = await parse_failure(parser, _slow_html(), "article.html")
        elapsed = time.monotonic() - started
        await plain_text_parses(parser)

    assert code == "parse_budget_exceeded"
    assert reason == (
        "article.html needs more CPU time to parse than its budget of 1 seconds "
        "(KS_INGESTION_PARSE_CPU_SECONDS); the parse was stopped"
    )
    assert elapsed < 4  # stopped at one CPU second, not after the six the whole page takes


async def test_a_parse_over_its_wall_clock_budget_is_killed_and_the_next_document_parses() -> None:
    async with budgeted(ParseLimits(wall_seconds=0.5)) as parser:
        started = time.monotonic()
        code, reason, outcome = await parse_failure(parser, _slow_html(), "article.html")
        elapsed = time.monotonic() - started
        await plain_text_parses(parser)

    assert code == "parse_budget_exceeded"
    assert reason == (
        "article.html took longer to parse than its budget of 0.5 seconds "
        "(KS_INGESTION_PARSE_WALL_SECONDS); the parse was stopped"
    )
    assert elapsed < 3
    # What the child had used when it was killed, read from /proc.
    assert outcome.usage is not None and outcome.usage.cpu_seconds > 0


async def test_a_cancelled_parse_is_killed_and_frees_its_place_at_once() -> None:
    """One document at a time: were the cancelled parse left running, the next document would wait the
    six CPU seconds of the whole page for its place."""
    async with budgeted(ParseLimits()) as parser:
        slow = asyncio.create_task(parser.parse(_slow_html(), "article.html"))
        await asyncio.sleep(0.5)
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        started = time.monotonic()
        await plain_text_parses(parser)
        assert time.monotonic() - started < 2


_WORKER = """
import asyncio, io, json, sys, zipfile
from knowsphere_ingestion.parsing.budget import BudgetedParser
from knowsphere_ingestion.parsing.limits import ParseLimits

def peak_rss() -> int:
    # VmHWM, not ru_maxrss: a process started by fork and exec inherits its parent's ru_maxrss.
    status = open("/proc/self/status").read()
    return next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:"))

async def main() -> None:
    limits = ParseLimits(memory_bytes=int(sys.argv[2]), max_xml_bytes=int(sys.argv[3]))
    parser = BudgetedParser(limits, processes=1)
    await parser.start()
    await parser.parse(b"warm up", "warm.txt")
    with open(sys.argv[1], "rb") as file:
        data = file.read()
    before = peak_rss()
    outcome = await parser.parse(data, "contract.docx")
    after = peak_rss()
    after_text = await parser.parse(b"Opening hours: nine to five.", "hours.txt")
    await parser.stop()
    # What the same measure shows for the part inflated here, in the worker, as a parse thread did.
    zipfile.ZipFile(io.BytesIO(data)).read("word/document.xml")
    print(json.dumps({
        "code": outcome.error.code.value if outcome.error else "",
        "reason": str(outcome.error or ""),
        "peak_growth_bytes": after - before,
        "peak_growth_inflating_here_bytes": peak_rss() - after,
        "next_document": after_text.result().text,
    }))

asyncio.run(main())
"""


def test_a_parse_over_its_memory_budget_fails_and_the_worker_keeps_its_memory(
    xml_bomb: bytes, tmp_path: Path
) -> None:
    """A worker of its own (a fresh process, whose peak memory is not that of earlier tests) parses the
    190 MB-XML DOCX with the XML limit raised above it and a 384 MiB memory budget."""
    path = tmp_path / "contract.docx"
    path.write_bytes(xml_bomb)
    memory = 384 * MIB
    run = subprocess.run(
        [sys.executable, "-c", _WORKER, str(path), str(memory), str(256 * MIB)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])

    assert result["code"] == "parse_budget_exceeded"
    assert result["reason"] == (
        f"contract.docx needs more memory to parse than its budget of {memory} bytes "
        "(KS_INGESTION_PARSE_MEMORY_BYTES)"
    )
    assert result["peak_growth_bytes"] < XML_BOMB_BYTES // 8
    assert result["peak_growth_inflating_here_bytes"] >= XML_BOMB_BYTES  # the measure does see it
    assert result["next_document"] == "Opening hours: nine to five."


def test_every_limit_named_in_a_reason_is_the_setting_that_changes_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    values: dict[str, Any] = {
        "cpu_seconds": 7.0,
        "memory_bytes": 3 * 1024 * MIB,
        "wall_seconds": 9.0,
        "max_ocr_pages": 3,
        "max_output_chars": 1234,
        "max_xml_bytes": 4321,
        "max_image_pixels": 5678,
    }
    assert set(values) == {field.name for field in dataclasses.fields(ParseLimits)}
    for field, value in values.items():
        monkeypatch.setenv(setting(field), str(value))
    settings = Settings(
        data_dir=str(tmp_path),
        temporal_address="t:1",
        nats_url="nats://n:1",
        retrieval_addr="r:1",
        modelhub_addr="m:1",
    )
    assert settings.parse_limits() == ParseLimits(**values)


# --- the parse stage: the document a user sees --------------------------------------------------------

TENANT, KB = "tenant-a", "kb-1"


class _ModelHub:
    async def has_default(self, model_type: ModelType) -> bool:
        return False

    async def embed(self, model_id: str, texts: Any, *, query: bool = False) -> list[list[float]]:
        raise AssertionError("the parse stage embeds nothing")


class _Retrieval:
    async def delete_document(self, knowledge_base_id: str, document_id: str) -> None:
        pass

    async def index_chunks(self, chunks: Any) -> int:
        return 0

    async def put_document_infos(self, documents: Any) -> None:
        pass


async def test_a_document_over_a_budget_fails_at_once_and_the_batch_goes_on(
    tmp_path: Path, xml_bomb: bytes, spans: InMemorySpanExporter
) -> None:
    now = datetime.now(UTC)
    store = IngestionStore(f"sqlite+aiosqlite:///{tmp_path}/ingestion.db")
    await store.open()
    await store.create_kb(
        KnowledgeBase(
            KB, TENANT, "kb", "", "embed-a", 4, ChunkingSettings(chunk_size_tokens=64), False, "", now, now
        )
    )
    blobs = build_blob_store(str(tmp_path / "blobs"))
    await blobs.start()

    async def add(name: str, data: bytes) -> DocumentRun:
        document_id = "doc-" + name.replace(".", "-")
        key = artifacts.file_key(TENANT, KB, document_id)

        async def body() -> AsyncIterator[bytes]:
            yield data

        stored = await blobs.put(key, body(), max_bytes=len(data) + 1)
        await store.create_document(
            Document(
                id=document_id,
                tenant_id=TENANT,
                knowledge_base_id=KB,
                file_name=name,
                content_type="",
                size_bytes=stored.size_bytes,
                content_sha256=stored.sha256,
                blob_key=key,
                status=DocumentStatus.QUEUED,
                create_time=now,
                update_time=now,
                ingest_run_id="run-1",
            )
        )
        return DocumentRun(document_id, "run-1")

    async def publish(event: object) -> None:
        pass

    try:
        async with budgeted(ParseLimits()) as parser:
            activities = IngestionActivities(
                store=store,
                blobs=blobs,
                modelhub=_ModelHub(),  # type: ignore[arg-type]
                retrieval=_Retrieval(),  # type: ignore[arg-type]
                batcher=EmbedBatcher(_ModelHub(), batch_size=8, max_wait=0.0),  # type: ignore[arg-type]
                publish=publish,
                parser=parser,
            )
            bomb, notes = await add("contract.docx", xml_bomb), await add("notes.txt", b"Notes of the week.")
            batch = IngestBatch(
                TENANT, "user-1", KB, [bomb, notes], identity_token=workflow_token(Identity(TENANT, "user-1"))
            )
            result = await asyncio.wait_for(activities.parse_documents(batch), timeout=60)

        assert result.remaining == [notes]
        failed = await store.get_document(TENANT, bomb.document_id)
        assert failed is not None and failed.status == DocumentStatus.FAILED
        assert failed.failure is not None
        assert (failed.failure.stage, failed.failure.code) == (IngestionStage.PARSE, "archive_too_large")
        assert failed.failure.reason == (
            "contract.docx: its XML part word/document.xml decompresses to more than 67108864 bytes, the "
            "limit per XML part (KS_INGESTION_PARSE_MAX_XML_BYTES)"
        )
        parsed = {
            span.attributes[attr.DOCUMENT_ID]: span.attributes
            for span in spans.get_finished_spans()
            if span.name == "ingestion.parse_file" and span.attributes
        }
        for run in (bomb, notes):
            assert parsed[run.document_id][attr.PARSE_PEAK_RSS_BYTES] > 0  # type: ignore[operator]
            assert parsed[run.document_id][attr.PARSE_CPU_SECONDS] >= 0  # type: ignore[operator]
    finally:
        await blobs.close()
        await store.close()
