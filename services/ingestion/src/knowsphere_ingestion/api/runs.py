"""Ingest runs and embedding migrations on Temporal: starting and cancelling their workflows.

Uploads, re-ingests, knowledge-base updates and deletions, and the reconciler all go through
:class:`Runs`. One workflow ingests one run: the documents of one knowledge base uploaded together
(they share embedding and indexing calls), or one re-ingested document. Starting is idempotent (a
retried start finds the run's workflow there), so the reconciler may start a run again safely.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from knowsphere_contracts.vocabulary import TERMINAL_STATUSES
from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.domain.records import Document, KnowledgeBase
from knowsphere_ingestion.settings import Settings
from knowsphere_ingestion.stages.identity import workflow_token
from knowsphere_ingestion.workflows import (
    MIGRATION_WORKFLOW_NAME,
    WORKFLOW_NAME,
    DocumentRun,
    IngestBatch,
    MigrateInput,
    migration_workflow_id,
    workflow_id,
)
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc.errors import RequestError

CANCEL_WAIT_SECONDS = 30.0
"""How long a deletion waits for a cancelled workflow to stop touching the indexes."""


def new_run_id() -> str:
    return uuid.uuid4().hex[:16]


def _unreachable(error: Exception) -> RequestError:
    return RequestError(
        grpc.StatusCode.UNAVAILABLE, f"the workflow service (Temporal) cannot be reached: {error}"
    )


class Runs:
    """Starts and cancels the workflows of ingest runs and migrations, for the calling identity."""

    def __init__(self, *, settings: Settings, store: IngestionStore, temporal: Callable[[], Client]) -> None:
        self._settings = settings
        self._store = store
        self._temporal = temporal  # a getter: the connection is made after the servicers are built

    def _batch(self, documents: Sequence[Document]) -> IngestBatch:
        first = documents[0]
        return IngestBatch(
            tenant_id=first.tenant_id,
            user_id=require_identity().user_id,
            knowledge_base_id=first.knowledge_base_id,
            documents=[DocumentRun(d.id, d.ingest_run_id) for d in documents],
            identity_token=workflow_token(require_identity()),
            max_attempts=self._settings.activity_max_attempts,
            heartbeat_seconds=self._settings.activity_heartbeat_seconds,
            local_activities=self._settings.local_activities,
        )

    async def start(self, documents: Sequence[Document]) -> None:
        """Starts the workflow of documents of one run (one knowledge base, one run id).

        Raises UNAVAILABLE (a RequestError) when Temporal cannot be reached; a run already started
        is left as it is.
        """
        try:
            await self._temporal().start_workflow(
                WORKFLOW_NAME,
                self._batch(documents),
                id=workflow_id(documents[0].ingest_run_id),
                task_queue=self._settings.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )
        except WorkflowAlreadyStartedError:
            pass  # a retried start: the run is there
        except Exception as error:  # the SDK raises RPCError / RuntimeError when the server is away
            raise _unreachable(error) from error

    async def cancel(self, document: Document) -> None:
        """Cancels the workflow of a document ingested alone and waits (bounded) until it stopped
        touching the indexes.

        A workflow ingesting other documents too goes on: it drops this one at its next step, and
        takes back anything it indexed for it after the deletion.
        """
        if document.status in TERMINAL_STATUSES:
            return
        if await self._store.run_size(document.tenant_id, document.ingest_run_id) > 1:
            return
        await self.cancel_run(document.ingest_run_id)

    async def cancel_run(self, run_id: str) -> None:
        """Cancels a run's workflow and waits (bounded) for it to end."""
        handle: WorkflowHandle[Any, Any] = self._temporal().get_workflow_handle(workflow_id(run_id))
        try:
            await handle.cancel()
            await asyncio.wait_for(handle.result(), timeout=CANCEL_WAIT_SECONDS)
        except Exception:  # cancelled, already finished, or never started: all fine here
            pass

    async def start_migration(self, kb: KnowledgeBase, to_model_id: str) -> None:
        """Starts re-embedding a knowledge base with ``to_model_id`` (again, after a failed attempt).

        Raises UNAVAILABLE (a RequestError) when Temporal cannot be reached.
        """
        job = MigrateInput(
            tenant_id=kb.tenant_id,
            user_id=require_identity().user_id,
            knowledge_base_id=kb.id,
            to_model_id=to_model_id,
            identity_token=workflow_token(require_identity()),
            heartbeat_seconds=self._settings.activity_heartbeat_seconds,
        )
        try:
            await self._temporal().start_workflow(
                MIGRATION_WORKFLOW_NAME,
                job,
                id=migration_workflow_id(kb.id, to_model_id),
                task_queue=self._settings.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
            )
        except WorkflowAlreadyStartedError:
            pass
        except Exception as error:
            raise _unreachable(error) from error
