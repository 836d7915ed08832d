"""Ingestion's records as the protos of its contract, each written once.

Same-named fields cross through :func:`knowsphere_contracts.convert.message_from` (statuses, stages and
strategies are the contract's own enums, times become Timestamps), so a field added to a record and to
its message reaches callers with no edit here. Only what really differs is said here: a document's
progress gathers fields of the document and of its progress, shows an ETA only while the document is
worked on, and a failure only when the document failed. A refused file of a many-file upload carries
its status code by name.
"""

from __future__ import annotations

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_contracts.convert import message_from
from knowsphere_contracts.vocabulary import TERMINAL_STATUSES, DocumentStatus
from knowsphere_ingestion.domain.records import Document, Failure, KnowledgeBase
from knowsphere_runtime.rpc.errors import RequestError


def _failure(document: Document) -> Failure | None:
    """The failure worth showing: a document that was retried and is no longer failed has none."""
    return document.failure if document.status == DocumentStatus.FAILED else None


def progress_pb(document: Document) -> pb.DocumentProgress:
    progress = document.progress
    return message_from(
        pb.DocumentProgress,
        progress,  # percent rounds to the message's whole number
        document_id=document.id,
        knowledge_base_id=document.knowledge_base_id,
        status=document.status,
        eta=progress.eta_seconds if document.status not in TERMINAL_STATUSES else None,
        failure=_failure(document),
        update_time=document.update_time,
    )


def document_pb(document: Document) -> pb.Document:
    return message_from(pb.Document, document, failure=_failure(document), progress=progress_pb(document))


def knowledge_base_pb(kb: KnowledgeBase) -> pb.KnowledgeBase:
    return message_from(pb.KnowledgeBase, kb)


def upload_error(error: RequestError) -> pb.UploadError:
    """A refused file of a many-file upload: the status name the same file would get from UploadDocument,
    and the words (with whatever else the message shares with the error, such as the field)."""
    return message_from(pb.UploadError, error, code=error.code.name)
