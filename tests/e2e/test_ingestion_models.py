"""Ingestion's model-dependent stages in the running stack: graph extraction, image description, speech.

No hosted model is reachable here, so the models are modelhub's "custom" OpenAI-compatible provider
pointed at the scripted peer from modelhub's tests (real HTTP on loopback). Each test registers its
models for a tenant of its own and makes them that tenant's defaults, so nothing leaks into the other
tests sharing the session's stack; each test also gives its models a base URL path of its own, so the
scripted replies (queued per path) of one test are never taken by another's requests.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
import uuid
import wave
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from PIL import Image, ImageDraw, ImageFont

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import open_channel

from .test_ingestion import Api, run

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "services" / "modelhub" / "tests"))
from scripted_provider import Recorded, Reply, ScriptedProvider, openai_text_stream

pytestmark = pytest.mark.e2e

COMPANY_PROFILE = (
    b"# Company profile\n\n"
    b"Acme Corp is a robotics company headquartered in Berlin. "
    b"Acme Corp builds warehouse robots and sells them across Europe.\n"
)
EXTRACTION = {
    "entities": [
        {
            "name": "Acme Corp",
            "type": "organization",
            "description": "A robotics company that builds warehouse robots.",
            "aliases": ["Acme"],
            "chunks": ["C1"],
        },
        {
            "name": "Berlin",
            "type": "location",
            "description": "The city where Acme Corp has its headquarters.",
            "chunks": ["C1"],
        },
    ],
    "relations": [
        {
            "source": "Acme Corp",
            "target": "Berlin",
            "type": "headquartered_in",
            "description": "Acme Corp is headquartered in Berlin.",
            "weight": 0.9,
            "chunks": ["C1"],
        }
    ],
}
IMAGE_DESCRIPTION = "A presentation slide with a bar chart of revenue rising over four quarters."
TRANSCRIPT = "Welcome to the onboarding call.\nThe cafeteria on the fifth floor opens at eight thirty."


@pytest.fixture
def provider(model_server: ScriptedProvider) -> ScriptedProvider:
    """The session's scripted provider (the stack's modelhub may call it), fresh for each test."""
    model_server.reset()
    return model_server


def _tenant() -> Identity:
    return Identity(f"t-{uuid.uuid4().hex[:12]}", "u")


def _modelhub(stack: Any, identity: Identity, work: Callable[[Any], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        contract = CONTRACTS["modelhub"]
        async with open_channel(stack.grpc_addr("modelhub"), services=[contract.descriptor]) as channel:
            with bound_identity(identity):
                return await work(contract.stub(channel))

    return asyncio.run(main())


def _default_model(
    stack: Any, identity: Identity, provider: ScriptedProvider, prefix: str, model_type: int, name: str
) -> mpb.Model:
    """A scripted "custom" model answering under ``/<prefix>/v1``, made the tenant's default for its type."""

    async def work(stub: Any) -> mpb.Model:
        created = await stub.CreateModel(
            mpb.CreateModelRequest(
                display_name=f"Scripted {name}",
                provider_id="custom",
                model_name=name,
                types=[model_type],
                base_url=f"{provider.url}/{prefix}/v1",
                api_key="sk-scripted-000000000",
            )
        )
        resolved = await stub.SetDefaultModel(
            mpb.SetDefaultModelRequest(type=model_type, model_id=created.model.id)  # type: ignore[arg-type]
        )
        assert resolved.default_model.source == mpb.DEFAULT_MODEL_SOURCE_TENANT
        assert resolved.default_model.model.id == created.model.id
        return created.model

    return _modelhub(stack, identity, work)


def _message_text(request: Recorded) -> str:
    """Every text part of a recorded chat request's messages, joined."""
    texts: list[str] = []
    for message in request.json["messages"]:
        content = message["content"]
        if isinstance(content, str):
            texts.append(content)
        else:
            texts.extend(part.get("text", "") for part in content if part.get("type") == "text")
    return "\n".join(texts)


async def _chunk_texts(api: Api, document_id: str) -> list[str]:
    selector = rpb.ChunkSelector(
        range=rpb.PositionRange(document_id=document_id, start_position=0, end_position=100_000)
    )
    response = await api.retrieval.ListChunks(rpb.ListChunksRequest(selectors=[selector], page_size=100))
    return [c.text for c in response.chunks]


async def _search(api: Api, kb_id: str, query: str) -> list[rpb.SearchResult]:
    found = await api.retrieval.Search(rpb.SearchRequest(query=query, knowledge_base_ids=[kb_id], top_k=5))
    return list(found.results)


def test_graph_extraction_stores_the_entities_the_llm_finds(stack: Any, provider: ScriptedProvider) -> None:
    tenant = _tenant()
    _default_model(stack, tenant, provider, "graph", mpb.MODEL_TYPE_KNOWLEDGE_QA, "scripted-qa")
    # One batch (a short document is one chunk), so one call; the JSON arrives in pieces, as streamed.
    answer = json.dumps(EXTRACTION)
    provider.script(
        "/graph/v1/chat/completions", openai_text_stream([answer[:40], answer[40:90], answer[90:]])
    )

    async def work(api: Api) -> None:
        kb = await api.kb(graph_enabled=True)
        assert kb.graph_enabled
        uploaded = await api.upload(kb.id, "profile.md", COMPANY_PROFILE)
        document, progress = await api.wait(uploaded.document.id)
        assert document.status == pb.DOCUMENT_STATUS_READY, document.failure
        assert not document.warnings, document.warnings
        statuses = [p.status for p in progress]
        assert pb.DOCUMENT_STATUS_GRAPH in statuses, statuses
        assert statuses[-1] == pb.DOCUMENT_STATUS_READY
        assert statuses.index(pb.DOCUMENT_STATUS_GRAPH) > statuses.index(pb.DOCUMENT_STATUS_INDEXING)
        assert document.progress.chunks_graphed == document.chunk_count >= 1
        chunk_ids = await api.chunk_ids(document.id)

        graph = await api.retrieval.QueryKnowledgeGraph(
            rpb.QueryKnowledgeGraphRequest(
                knowledge_base_ids=[kb.id],
                template=rpb.GRAPH_QUERY_TEMPLATE_NEIGHBOURHOOD,
                parameters=rpb.GraphQueryParameters(entity_name="Acme Corp", hops=1),
            )
        )
        entities = {e.name: e for e in graph.entities}
        assert {"Acme Corp", "Berlin"} <= set(entities), list(entities)
        assert entities["Acme Corp"].type == "organization"
        assert entities["Berlin"].type == "location"
        relations = [
            r
            for r in graph.relations
            if (r.source_name, r.type, r.target_name) == ("Acme Corp", "headquartered_in", "Berlin")
        ]
        assert len(relations) == 1, graph.relations
        supporting = relations[0].supporting_chunks
        assert supporting
        assert {s.chunk_id for s in supporting} <= set(chunk_ids)
        assert {s.document_id for s in supporting} == {document.id}

        # The alias the model gave finds the same entity.
        lookup = await api.retrieval.QueryKnowledgeGraph(
            rpb.QueryKnowledgeGraphRequest(
                knowledge_base_ids=[kb.id],
                template=rpb.GRAPH_QUERY_TEMPLATE_ENTITY_LOOKUP,
                parameters=rpb.GraphQueryParameters(entity_name="Acme"),
            )
        )
        assert "Acme Corp" in [e.name for e in lookup.entities]

        # Deleting the document takes its graph facts with it.
        await api.ingestion.DeleteDocument(pb.DeleteDocumentRequest(document_id=document.id))
        after = await api.retrieval.QueryKnowledgeGraph(
            rpb.QueryKnowledgeGraphRequest(
                knowledge_base_ids=[kb.id],
                template=rpb.GRAPH_QUERY_TEMPLATE_NEIGHBOURHOOD,
                parameters=rpb.GraphQueryParameters(entity_name="Acme Corp", hops=1),
            )
        )
        assert not after.relations and "Acme Corp" not in [e.name for e in after.entities]
        stats = await api.stats(kb.id)
        assert (stats.entity_count, stats.relation_count) == (0, 0)

    run(stack, tenant, work)

    # The model was asked once, with the extraction prompt and the document's text under label C1.
    sent = provider.requests_to("/graph/v1/chat/completions")
    assert len(sent) == 1
    assert sent[0].json["model"] == "scripted-qa"
    prompt = _message_text(sent[0])
    assert "knowledge graph" in prompt
    assert "[C1]" in prompt
    assert "Acme Corp is a robotics company headquartered in Berlin." in prompt
    assert "Acme Corp builds warehouse robots and sells them across Europe." in prompt
    assert not provider.pending().get("/graph/v1/chat/completions")


def test_a_failing_graph_llm_leaves_the_document_ready_with_a_warning(
    stack: Any, provider: ScriptedProvider
) -> None:
    tenant = _tenant()
    _default_model(stack, tenant, provider, "graph-down", mpb.MODEL_TYPE_KNOWLEDGE_QA, "scripted-down")
    # Every attempt (modelhub's retries within each of the workflow's attempts) gets an HTTP 500;
    # once the script runs out the peer answers 418, which fails the same way.
    failure = Reply(status=500, json={"error": {"message": "internal server error", "type": "server_error"}})
    provider.script("/graph-down/v1/chat/completions", *[failure] * 30)

    async def work(api: Api) -> None:
        kb = await api.kb(graph_enabled=True)
        uploaded = await api.upload(kb.id, "profile.md", COMPANY_PROFILE)
        document, progress = await api.wait(uploaded.document.id, timeout=240)
        assert document.status == pb.DOCUMENT_STATUS_READY, document.failure
        assert pb.DOCUMENT_STATUS_GRAPH in [p.status for p in progress]
        assert document.chunk_count >= 1
        assert len(document.warnings) == 1, document.warnings
        warning = document.warnings[0]
        assert warning.stage == pb.INGESTION_STAGE_GRAPH
        assert warning.code == "graph_failed"
        assert "entity extraction" in warning.reason
        assert "extracting entities with the LLM" in warning.reason
        # Searchable all the same, and no graph facts were stored.
        results = await _search(api, kb.id, "where is Acme Corp headquartered")
        assert results and "headquartered in Berlin" in results[0].text
        assert results[0].document_id == document.id
        graph = await api.retrieval.QueryKnowledgeGraph(
            rpb.QueryKnowledgeGraphRequest(
                knowledge_base_ids=[kb.id],
                template=rpb.GRAPH_QUERY_TEMPLATE_ENTITY_LOOKUP,
                parameters=rpb.GraphQueryParameters(entity_name="Acme Corp"),
            )
        )
        assert not graph.relations
        assert "Acme Corp" not in [e.name for e in graph.entities]

    run(stack, tenant, work)
    # The workflow retried the stage (each attempt after modelhub's own retries) before giving up.
    assert len(provider.requests_to("/graph-down/v1/chat/completions")) > 1


def test_a_graph_llm_answering_without_json_leaves_a_warning(stack: Any, provider: ScriptedProvider) -> None:
    tenant = _tenant()
    _default_model(stack, tenant, provider, "graph-prose", mpb.MODEL_TYPE_KNOWLEDGE_QA, "scripted-prose")
    prose = openai_text_stream(["I'm sorry, but I can't help with extracting entities from this text."])
    provider.script("/graph-prose/v1/chat/completions", *[prose] * 10)

    async def work(api: Api) -> None:
        kb = await api.kb(graph_enabled=True)
        uploaded = await api.upload(kb.id, "profile.md", COMPANY_PROFILE)
        document, _ = await api.wait(uploaded.document.id)
        assert document.status == pb.DOCUMENT_STATUS_READY, document.failure
        assert [w.stage for w in document.warnings] == [pb.INGESTION_STAGE_GRAPH], document.warnings
        assert "entity extraction" in document.warnings[0].reason
        assert (await _search(api, kb.id, "where is Acme Corp headquartered"))[0].document_id == document.id

    run(stack, tenant, work)


def _slide_png() -> bytes:
    image = Image.new("RGB", (900, 240), "white")
    draw = ImageDraw.Draw(image)
    draw.text((40, 80), "QUARTERLY ROADMAP", fill="black", font=ImageFont.load_default(size=64))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def test_an_image_gets_ocr_text_and_the_vlm_description(stack: Any, provider: ScriptedProvider) -> None:
    tenant = _tenant()
    _default_model(stack, tenant, provider, "vlm", mpb.MODEL_TYPE_VLM, "scripted-vlm")
    provider.script(
        "/vlm/v1/chat/completions", openai_text_stream([IMAGE_DESCRIPTION[:30], IMAGE_DESCRIPTION[30:]])
    )
    png = _slide_png()

    async def work(api: Api) -> None:
        kb = await api.kb()
        uploaded = await api.upload(kb.id, "slide.png", png)
        document, _ = await api.wait(uploaded.document.id)
        assert document.status == pb.DOCUMENT_STATUS_READY, document.failure
        assert not document.warnings, document.warnings
        text = "\n".join(await _chunk_texts(api, document.id))
        assert "quarterly roadmap" in text.lower()  # read by OCR
        assert IMAGE_DESCRIPTION in text  # written by the VLM
        results = await _search(api, kb.id, "bar chart of revenue by quarter")
        assert results and results[0].document_id == document.id
        assert IMAGE_DESCRIPTION in results[0].text

    run(stack, tenant, work)

    sent = provider.requests_to("/vlm/v1/chat/completions")
    assert len(sent) == 1
    parts = sent[0].json["messages"][0]["content"]
    images = [p for p in parts if p.get("type") == "image_url"]
    assert len(images) == 1
    assert images[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert [p for p in parts if p.get("type") == "text" and p["text"].strip()]


def _silent_wav(seconds: float = 1.0, rate: int = 16_000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(rate)
        audio.writeframes(b"\x00\x00" * int(rate * seconds))
    return buffer.getvalue()


def test_audio_is_refused_without_asr_and_transcribed_with_it(stack: Any, provider: ScriptedProvider) -> None:
    tenant = _tenant()
    wav = _silent_wav()

    async def refused(api: Api) -> None:
        kb = await api.kb()
        for name, data in (
            ("call.wav", wav),
            ("call.mp3", b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\x00" * 512),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await api.upload(kb.id, name, data)
            assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION, name
            assert "ASR" in (error.value.details() or ""), error.value.details()
        listed = await api.ingestion.ListDocuments(pb.ListDocumentsRequest(knowledge_base_id=kb.id))
        assert not listed.documents

    run(stack, tenant, refused)

    _default_model(stack, tenant, provider, "asr", mpb.MODEL_TYPE_ASR, "scripted-whisper")
    provider.script(
        "/asr/v1/audio/transcriptions", Reply(json={"text": TRANSCRIPT, "language": "en", "duration": 1.0})
    )

    async def transcribed(api: Api) -> None:
        policy = await api.ingestion.GetUploadPolicy(pb.GetUploadPolicyRequest())
        wav_type = next(t for t in policy.file_types if t.extension == "wav")
        assert not wav_type.missing_components
        kb = await api.kb()
        uploaded = await api.upload(kb.id, "onboarding-call.wav", wav)
        document, _ = await api.wait(uploaded.document.id)
        assert document.status == pb.DOCUMENT_STATUS_READY, document.failure
        assert document.title == "onboarding-call"
        assert document.language == "en"
        text = "\n".join(await _chunk_texts(api, document.id))
        assert "Welcome to the onboarding call." in text
        assert "The cafeteria on the fifth floor opens at eight thirty." in text
        results = await _search(api, kb.id, "when does the cafeteria open")
        assert results and results[0].document_id == document.id
        assert "eight thirty" in results[0].text

    run(stack, tenant, transcribed)

    sent = provider.requests_to("/asr/v1/audio/transcriptions")
    assert len(sent) == 1
    assert sent[0].headers["content-type"].startswith("multipart/form-data")
    assert b'name="model"' in sent[0].body and b"scripted-whisper" in sent[0].body
    assert b'filename="onboarding-call.wav"' in sent[0].body
    assert wav in sent[0].body  # the audio bytes, as uploaded


def test_a_transcript_without_a_language_gets_one_guessed(stack: Any, provider: ScriptedProvider) -> None:
    tenant = _tenant()
    _default_model(stack, tenant, provider, "asr-plain", mpb.MODEL_TYPE_ASR, "whisper-1")
    # What OpenAI's /audio/transcriptions answers for response_format=json: the text and nothing else.
    provider.script("/asr-plain/v1/audio/transcriptions", Reply(json={"text": TRANSCRIPT}))

    async def work(api: Api) -> None:
        kb = await api.kb()
        uploaded = await api.upload(kb.id, "call.wav", _silent_wav())
        document, _ = await api.wait(uploaded.document.id)
        assert document.status == pb.DOCUMENT_STATUS_READY, document.failure
        assert document.language == "en"

    run(stack, tenant, work)
