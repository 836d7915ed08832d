"""Knowledge bases over gRPC: create, read, list, update (a new embedding model starts a migration), delete.

Bad input answers INVALID_ARGUMENT naming the field and the limit, before anything is stored. A
knowledge base is configured in retrieval as it is created and whenever what retrieval needs of it
changes; a deletion takes its documents, index entries and files with it.
"""

from __future__ import annotations

import uuid
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

import grpc
import structlog

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere_clients import (
    EmbeddingModel,
    ModelHubClient,
    NoModelConfigured,
    RetrievalClient,
    WrongModelType,
)
from knowsphere_contracts.convert import record_from
from knowsphere_contracts.language import detect_language, model_reads
from knowsphere_contracts.vocabulary import (
    IN_PROGRESS_STATUSES,
    ChunkingStrategy,
    DocumentStatus,
    MigrationState,
)
from knowsphere_ingestion import artifacts
from knowsphere_ingestion.adapters.store import DuplicateName, IngestionStore
from knowsphere_ingestion.api import lookup
from knowsphere_ingestion.api.convert import knowledge_base_pb
from knowsphere_ingestion.api.documents import Announce
from knowsphere_ingestion.api.replies import reply
from knowsphere_ingestion.api.runs import Runs
from knowsphere_ingestion.domain.records import ChunkingSettings, KnowledgeBase, Migration
from knowsphere_ingestion.settings import Settings
from knowsphere_ingestion.stages.retrieval_messages import configure_knowledge_base
from knowsphere_ingestion.storage.blobs import BlobStore
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc.errors import RequestError, invalid, not_found, precondition
from knowsphere_sqlstore.pages import decode_page_token, encode_page_token

log = structlog.get_logger(__name__)

MAX_LANGUAGE_TAG_CHARS = 16


# --- what a request may say about a knowledge base -------------------------------------------------


def name_of(settings: Settings, name: str) -> str:
    """A knowledge base's name with runs of white space as one space."""
    name = " ".join(name.split())
    if not name:
        raise invalid("name", "required")
    if len(name) > settings.max_name_length:
        raise invalid("name", f"{len(name)} characters; the limit is {settings.max_name_length}")
    return name


def description_of(settings: Settings, description: str) -> str:
    if len(description) > settings.max_description_length:
        raise invalid(
            "description", f"{len(description)} characters; the limit is {settings.max_description_length}"
        )
    return description


def language_of(value: str) -> str:
    """A language hint: empty, or a BCP-47 tag."""
    value = value.strip()
    if value and (len(value) > MAX_LANGUAGE_TAG_CHARS or not all(c.isalnum() or c == "-" for c in value)):
        raise invalid("language_hint", f"{value!r} is not a BCP-47 tag such as 'zh' or 'en'")
    return value


def chunking_of(settings: Settings, config: pb.ChunkingConfig | None) -> ChunkingSettings:
    """The chunking a request asks for (the defaults when it asks for none); sizes of 0 mean the
    defaults, other sizes must lie within the settings' range."""
    if config is None:
        return ChunkingSettings()
    strategy = ChunkingStrategy.from_number(config.strategy)
    chosen = record_from(ChunkingSettings, config, strategy=strategy or ChunkingStrategy.HEADING)
    low, high = settings.min_chunk_size_tokens, settings.max_chunk_size_tokens
    for size in fields(chosen):
        if size.name == "strategy":
            continue
        field, value = f"chunking.{size.name}", getattr(chosen, size.name)
        if value < 0:
            raise invalid(field, f"{value} is negative")
        if field.endswith("overlap_tokens"):
            continue
        if value and not low <= value <= high:
            raise invalid(field, f"{value} tokens is outside the allowed range {low}–{high}")
    if strategy is None and config.strategy:  # unset means the default; a number we do not know is not
        accepted = ", ".join(s.value for s in ChunkingStrategy)
        raise invalid("chunking.strategy", f"{config.strategy} is not a chunking strategy ({accepted})")
    try:
        chosen.to_config()  # the chunker's own checks (overlap below size, parent above child)
    except ValueError as error:
        raise invalid("chunking", str(error)) from error
    return chosen


def _name_taken(name: str) -> RequestError:
    return RequestError(
        grpc.StatusCode.ALREADY_EXISTS, f"name: a knowledge base named {name!r} already exists", field="name"
    )


# --- the servicer --------------------------------------------------------------------------------


class KnowledgeBases:
    """CreateKnowledgeBase, GetKnowledgeBase, ListKnowledgeBases, UpdateKnowledgeBase, DeleteKnowledgeBase."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: IngestionStore,
        blobs: BlobStore,
        modelhub: ModelHubClient,
        retrieval: RetrievalClient,
        runs: Runs,
        announce: Announce | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._blobs = blobs
        self._modelhub = modelhub
        self._retrieval = retrieval
        self._runs = runs
        self._announce = announce

    async def _embedding_model(self, model_id: str, language: str = "") -> EmbeddingModel:
        """The named embedding model; when none is named, the tenant's default, unless the knowledge
        base's language is one the default cannot read and a built-in model can (an English-only
        default and a Chinese knowledge base get the multilingual built-in)."""
        try:
            if not model_id and language:
                model_id = await self._builtin_reading(language)
            return await self._modelhub.resolve_embedding_model(model_id)
        except NoModelConfigured as error:
            raise RequestError(
                grpc.StatusCode.FAILED_PRECONDITION, str(error), field="embedding_model_id"
            ) from error
        except WrongModelType as error:
            raise invalid("embedding_model_id", str(error)) from error

    async def _builtin_reading(self, language: str) -> str:
        """The id of a built-in embedding model that reads ``language`` when the tenant's default does
        not; empty to keep the default (it reads the language, says nothing of languages, or no
        built-in reads it either)."""
        default = await self._modelhub.default_model(ModelType.EMBEDDING)
        if default is None or model_reads(await self._modelhub.model_languages(default.id), language):
            return ""
        listed = await self._modelhub.list_models(mpb.ListModelsRequest(type=mpb.MODEL_TYPE_EMBEDDING))
        for model in listed.models:  # built-in models come first
            if not model.builtin:
                break
            if model_reads(await self._modelhub.model_languages(model.id), language):
                return model.id
        return ""

    async def CreateKnowledgeBase(self, request: pb.CreateKnowledgeBaseRequest, context: Any) -> Any:
        async def work() -> pb.CreateKnowledgeBaseResponse:
            tenant = require_identity().tenant_id
            name = name_of(self._settings, request.name)
            description = description_of(self._settings, request.description)
            chunking = chunking_of(self._settings, request.chunking if request.HasField("chunking") else None)
            language = language_of(request.language_hint)
            # With no hint, the language of the name and description stands in for the documents'.
            model = await self._embedding_model(
                request.embedding_model_id,
                language.split("-")[0].lower() or detect_language(f"{name}\n{description}"),
            )
            now = datetime.now(UTC)
            kb = KnowledgeBase(
                id=uuid.uuid4().hex,
                tenant_id=tenant,
                name=name,
                description=description,
                embedding_model_id=model.model_id,
                embedding_dimension=model.dimension,
                chunking=chunking,
                graph_enabled=request.graph_enabled,
                language_hint=language,
                create_time=now,
                update_time=now,
            )
            try:
                await self._store.create_kb(kb)
            except DuplicateName as error:
                raise _name_taken(name) from error
            try:
                await configure_knowledge_base(self._retrieval, kb)
            except BaseException:
                await self._store.delete_kb(tenant, kb.id)  # nothing half-made is left behind
                raise
            log.info("knowledge base created", knowledge_base_id=kb.id, model=kb.embedding_model_id)
            return pb.CreateKnowledgeBaseResponse(knowledge_base=knowledge_base_pb(kb))

        return await reply(context, work)

    async def GetKnowledgeBase(self, request: pb.GetKnowledgeBaseRequest, context: Any) -> Any:
        async def work() -> pb.GetKnowledgeBaseResponse:
            kb = await lookup.knowledge_base(self._store, request.knowledge_base_id)
            return pb.GetKnowledgeBaseResponse(knowledge_base=knowledge_base_pb(kb))

        return await reply(context, work)

    async def ListKnowledgeBases(self, request: pb.ListKnowledgeBasesRequest, context: Any) -> Any:
        async def work() -> pb.ListKnowledgeBasesResponse:
            tenant = require_identity().tenant_id
            size = lookup.page_size(self._settings, request.page_size)
            after = decode_page_token(request.page_token, 1)[0] if request.page_token else None
            kbs = await self._store.list_kbs(tenant, size + 1, after)
            token = encode_page_token([kbs[size - 1].name]) if len(kbs) > size else ""
            return pb.ListKnowledgeBasesResponse(
                knowledge_bases=[knowledge_base_pb(kb) for kb in kbs[:size]], next_page_token=token
            )

        return await reply(context, work)

    async def UpdateKnowledgeBase(self, request: pb.UpdateKnowledgeBaseRequest, context: Any) -> Any:
        async def work() -> pb.UpdateKnowledgeBaseResponse:
            tenant = require_identity().tenant_id
            kb = await lookup.knowledge_base(self._store, request.knowledge_base_id)
            values: dict[str, Any] = {}
            if request.HasField("name"):
                values["name"] = name_of(self._settings, request.name)
            if request.HasField("description"):
                values["description"] = description_of(self._settings, request.description)
            if request.HasField("chunking"):
                values["chunking"] = chunking_of(self._settings, request.chunking)
            if request.HasField("graph_enabled"):
                values["graph_enabled"] = request.graph_enabled
            if request.HasField("language_hint"):
                values["language_hint"] = language_of(request.language_hint)
            migrate_to = None
            if request.HasField("embedding_model_id"):
                migrate_to = await self._migration_target(kb, request.embedding_model_id)
            if migrate_to is not None:
                values["migration"] = Migration(
                    from_model_id=kb.embedding_model_id,
                    to_model_id=migrate_to.model_id,
                    to_dimension=migrate_to.dimension,
                    state=MigrationState.RUNNING,
                    documents_total=kb.document_count,
                    start_time=datetime.now(UTC),
                )
            if not values:
                return pb.UpdateKnowledgeBaseResponse(knowledge_base=knowledge_base_pb(kb))
            try:
                updated = await self._store.update_kb(tenant, kb.id, **values)
            except DuplicateName as error:
                raise _name_taken(values["name"]) from error
            if updated is None:
                raise not_found("knowledge base", kb.id)
            if migrate_to is not None:
                await self._runs.start_migration(updated, migrate_to.model_id)
            if "graph_enabled" in values or "language_hint" in values:
                await configure_knowledge_base(self._retrieval, updated)
            return pb.UpdateKnowledgeBaseResponse(knowledge_base=knowledge_base_pb(updated))

        return await reply(context, work)

    async def _migration_target(self, kb: KnowledgeBase, model_id: str) -> EmbeddingModel | None:
        """The model to migrate to, or None when the request changes nothing (a harmless retry)."""
        running = kb.migration if kb.migration and kb.migration.state == MigrationState.RUNNING else None
        if running is not None and model_id == running.to_model_id:
            # A retry of the request that started it: start it again in case Temporal was away then
            # (a start of a migration already under way changes nothing).
            await self._runs.start_migration(kb, running.to_model_id)
            return None
        if model_id == kb.embedding_model_id:
            return None
        if running is not None:
            raise precondition(
                "embedding_model_id",
                f"a migration to {running.to_model_id} is running "
                f"({running.documents_done}/{running.documents_total} documents); wait for it to end",
            )
        model = await self._embedding_model(model_id)
        return None if model.model_id == kb.embedding_model_id else model

    async def DeleteKnowledgeBase(self, request: pb.DeleteKnowledgeBaseRequest, context: Any) -> Any:
        async def work() -> pb.DeleteKnowledgeBaseResponse:
            tenant = require_identity().tenant_id
            kb = await lookup.knowledge_base(self._store, request.knowledge_base_id, with_counts=False)
            documents = await self._store.kb_documents(tenant, kb.id, IN_PROGRESS_STATUSES)
            every = await self._store.kb_documents(tenant, kb.id, list(DocumentStatus))
            if not await self._store.delete_kb(tenant, kb.id):
                raise not_found("knowledge base", kb.id)
            for run_id in sorted({d.ingest_run_id for d in documents}):
                await self._runs.cancel_run(run_id)  # every document of the run goes with the knowledge base
            await self._retrieval.delete_knowledge_base(kb.id)
            for prefix in artifacts.kb_prefixes(tenant, kb.id):
                await self._blobs.delete_prefix(prefix)
            if self._announce is not None and every:
                try:
                    await self._announce(kb.id, [d.id for d in every])
                except Exception:
                    # The knowledge base is gone already; only frequently-consulted lists keep its
                    # documents until their owners' next citations of other documents push them out.
                    log.exception("knowledge base deletion not announced", knowledge_base_id=kb.id)
            await self._store.purge_kb_documents(tenant, kb.id)
            log.info("knowledge base deleted", knowledge_base_id=kb.id, documents=len(every))
            return pb.DeleteKnowledgeBaseResponse()

        return await reply(context, work)
