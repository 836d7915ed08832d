"""How a stage's failure reaches the workflow: permanent or retryable, with a code and a reason.

A permanent failure is a non-retryable ``ApplicationError`` of type ``PERMANENT``: the workflow's retry
policy leaves it alone and the stage engine marks its document failed with the code and reason. A
retryable one carries its code as its type, so the workflow's failure handling still finds the code
once the retries are used up. A failed call to another service is permanent when the client's
:class:`~knowsphere_clients.errors.ServiceError` says a retry of the same request cannot succeed.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeAlias, TypeGuard

from temporalio import activity
from temporalio.exceptions import ApplicationError

from knowsphere_clients.errors import ServiceError
from knowsphere_ingestion.parsing.errors import ParseErrorCode
from knowsphere_ingestion.workflows import PERMANENT


class FailureCode(StrEnum):
    """Why a stage failed or warned, besides a parser's :class:`ParseErrorCode` (whose codes, such as
    ``empty_document``, the stages raise as they are rather than repeating them here)."""

    SUPERSEDED = "superseded"
    """The document was deleted or re-ingested while this run worked on it (not shown to users)."""
    KNOWLEDGE_BASE_DELETED = "knowledge_base_deleted"
    FILE_MISSING = "file_missing"
    ARTIFACT_MISSING = "artifact_missing"
    NO_MODEL_CONFIGURED = "no_model_configured"
    OCR_UNAVAILABLE = "ocr_unavailable"
    VLM_FAILED = "vlm_failed"
    ASR_FAILED = "asr_failed"
    EMBEDDING_FAILED = "embedding_failed"
    INDEXING_FAILED = "indexing_failed"
    GRAPH_FAILED = "graph_failed"
    MIGRATION_INCOMPLETE = "migration_incomplete"
    MIGRATION_FAILED = "migration_failed"
    UNAUTHENTICATED = "unauthenticated"
    """The workflow's input carries no identity token that verifies for the tenant and user it names."""


Code: TypeAlias = FailureCode | ParseErrorCode


def _attempt() -> int:
    return activity.info().attempt if activity.in_activity() else 0


def permanent(code: Code, reason: str) -> ApplicationError:
    """A failure no retry can fix: the document fails with ``code`` and ``reason``."""
    return ApplicationError(
        reason,
        {"code": code.value, "reason": reason, "attempt": _attempt()},
        type=PERMANENT,
        non_retryable=True,
    )


def retryable(code: Code, reason: str) -> ApplicationError:
    """A failure a retry may fix; ``code`` and ``reason`` are what the document shows if none does."""
    return ApplicationError(
        reason, {"code": code.value, "reason": reason, "attempt": _attempt()}, type=code.value
    )


def from_service(error: ServiceError, what: str, code: FailureCode) -> ApplicationError:
    """The stage failure of a failed call to another service while doing ``what``."""
    reason = f"{what}: {error.message}"
    return permanent(code, reason) if error.permanent else retryable(code, reason)


def is_permanent(error: BaseException) -> TypeGuard[ApplicationError]:
    """Whether a stage's work failed for good (the document fails) rather than for a retry."""
    return isinstance(error, ApplicationError) and error.type == PERMANENT
