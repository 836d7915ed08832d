"""The parse stage: the uploaded file becomes a structured document (text, headings, tables, pages).

Each file is parsed in a child process of its own, within the parse budget (``parsing/budget.py``); a
file over a budget, or whose parser process dies, fails at once, for good. Images get a VLM description
when the tenant has a vision model, audio is transcribed by its speech model. The parsed document is
the stage's artifact: a resumed stage reuses it instead of parsing again.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import PurePath

from opentelemetry import trace

from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere_clients.errors import ServiceError
from knowsphere_contracts.vocabulary import IngestionStage
from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_ingestion.domain.records import STAGE_SPAN, Document, Failure, KnowledgeBase
from knowsphere_ingestion.formats import AUDIO_EXTENSIONS, IMAGE_EXTENSIONS
from knowsphere_ingestion.parsing import ParseError, ParseErrorCode
from knowsphere_ingestion.parsing.language import guess_language
from knowsphere_ingestion.stages.context import StageContext
from knowsphere_ingestion.stages.engine import Done, Stage, run_stage
from knowsphere_ingestion.stages.errors import FailureCode, from_service, permanent
from knowsphere_ingestion.stages.liveness import heartbeating
from knowsphere_ingestion.storage.blobs import BlobNotFound
from knowsphere_ingestion.workflows import IngestBatch, StageResult
from knowsphere_telemetry import attributes as attr

tracer = trace.get_tracer("knowsphere.ingestion")

LANGUAGE_SAMPLE_CHARS = 20_000
"""Text read to guess a document's language when its parser could not say."""
IMAGE_DESCRIPTION_PURPOSE = "ingestion_image_description"


async def parse_documents(context: StageContext, batch: IngestBatch) -> StageResult:
    async def one(stage: Stage, kb: KnowledgeBase) -> Done:
        return await _parse_one(context, stage)

    return await run_stage(context, batch, IngestionStage.PARSE, one)


async def _parse_one(context: StageContext, stage: Stage) -> Done:
    job, document = stage.job, stage.document
    parsed = await context.artifacts.find_parsed(job) if stage.resumed else None
    if parsed is None:
        try:
            data = await context.blobs.read(document.blob_key)
        except BlobNotFound as error:
            raise permanent(
                FailureCode.FILE_MISSING, "the uploaded file is no longer in the object store"
            ) from error
        parsed = await _parse(context, document, data)
        await context.artifacts.put_parsed(job, parsed)
    progress = replace(
        document.progress,
        pages_parsed=parsed.page_count,
        pages_total=parsed.page_count,
        percent=STAGE_SPAN[IngestionStage.PARSE][1],
    )
    return Done(
        items=parsed.page_count,
        next_stage=IngestionStage.CHUNK,
        values={
            "title": parsed.title,
            "page_count": parsed.page_count,
            "language": parsed.language,
            "progress": progress,
            "warnings": list(document.warnings) + _warnings(parsed),
        },
    )


def _warnings(parsed: ParsedDocument) -> list[Failure]:
    missing = parsed.metadata.get("ocr_missing_pages", "")
    if not missing:
        return []
    return [
        Failure(
            stage=IngestionStage.PARSE,
            code=FailureCode.OCR_UNAVAILABLE,
            reason=f"pages {missing} have no text layer and OCR is not available; they were skipped",
            time=datetime.now(UTC),
        )
    ]


async def _parse(context: StageContext, document: Document, data: bytes) -> ParsedDocument:
    extension = PurePath(document.file_name).suffix.lower()
    if extension in AUDIO_EXTENSIONS:
        return await _transcribe(context, document, data)
    with tracer.start_as_current_span("ingestion.parse_file") as span:
        span.set_attribute(attr.DOCUMENT_ID, document.id)
        span.set_attribute(attr.FILE_EXTENSION, extension)
        span.set_attribute(attr.FILE_SIZE_BYTES, len(data))
        parsing = asyncio.ensure_future(context.parser.parse(data, document.file_name, document.content_type))
        try:
            outcome = await heartbeating(parsing)
        except asyncio.CancelledError:
            parsing.cancel()  # kills the parse's process (heartbeating leaves the work it awaits running)
            raise
        if outcome.usage is not None:
            span.set_attribute(attr.PARSE_PEAK_RSS_BYTES, outcome.usage.peak_rss_bytes)
            span.set_attribute(attr.PARSE_CPU_SECONDS, outcome.usage.cpu_seconds)
        try:
            parsed = outcome.result()
        except ParseError as error:
            raise permanent(error.code, str(error)) from error
        span.set_attribute(attr.DOCUMENT_PAGES, parsed.page_count)
        span.set_attribute(attr.DOCUMENT_BLOCKS, len(parsed.blocks))
    if extension in IMAGE_EXTENSIONS:
        parsed = await _describe_image(context, document, data, parsed)
    if not parsed.language:
        parsed = replace(parsed, language=guess_language(parsed.text[:LANGUAGE_SAMPLE_CHARS]))
    return parsed


async def _describe_image(
    context: StageContext, document: Document, data: bytes, parsed: ParsedDocument
) -> ParsedDocument:
    """The parsed image (its OCR text) with the tenant's vision model's description added, if it has one."""
    try:
        if not await context.modelhub.has_default(ModelType.VLM):
            return parsed
        description = await context.modelhub.describe_image(
            data,
            document.content_type or "image/png",
            language=parsed.language or "en",
            purpose=IMAGE_DESCRIPTION_PURPOSE,
        )
    except ServiceError as error:
        raise from_service(error, "describing the image", FailureCode.VLM_FAILED) from error
    if not description.strip():
        return parsed
    block = Block(kind="image", text=description.strip())
    return replace(parsed, blocks=[*parsed.blocks, block], metadata={**parsed.metadata, "vlm": "1"})


async def _transcribe(context: StageContext, document: Document, data: bytes) -> ParsedDocument:
    try:
        if not await context.modelhub.has_default(ModelType.ASR):
            raise permanent(
                FailureCode.NO_MODEL_CONFIGURED, "audio needs a speech-to-text (ASR) model; none is set"
            )
        transcript = await context.modelhub.transcribe(
            data, document.content_type, file_name=document.file_name
        )
    except ServiceError as error:
        raise from_service(error, "transcribing the audio", FailureCode.ASR_FAILED) from error
    paragraphs = [p.strip() for p in transcript.text.split("\n") if p.strip()]
    if not paragraphs:
        raise permanent(ParseErrorCode.EMPTY_DOCUMENT, "the transcript of the audio is empty")
    blocks = [Block(kind="paragraph", text=p) for p in paragraphs]
    # Providers answering OpenAI's plain "json" format name no language: guess it, as for files.
    language = transcript.language or guess_language(transcript.text[:LANGUAGE_SAMPLE_CHARS])
    return ParsedDocument(blocks=blocks, title=PurePath(document.file_name).stem, language=language)
