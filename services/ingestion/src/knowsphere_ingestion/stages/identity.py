"""The identity a workflow input proves: its signed token, checked against the tenant and user it names."""

from __future__ import annotations

from knowsphere_ingestion.stages.errors import FailureCode, permanent
from knowsphere_ingestion.workflows import IngestBatch, MigrateInput
from knowsphere_runtime.identity import Identity, IdentityError
from knowsphere_runtime.identity_token import authority


def job_identity(job: IngestBatch | MigrateInput) -> Identity:
    """Who ``job`` acts for; a permanent failure when its token does not verify or names someone else.

    A workflow started by anyone but a service holding a trusted key (a forged input, another
    tenant's id beside a valid token) touches nothing.
    """
    try:
        proven = authority().verify(job.identity_token).identity
    except IdentityError as error:
        raise permanent(FailureCode.UNAUTHENTICATED, f"the workflow's identity is refused: {error}") from None
    if proven != Identity(job.tenant_id, job.user_id):
        raise permanent(
            FailureCode.UNAUTHENTICATED,
            "the workflow's identity is refused: its token was issued for another tenant or user",
        )
    return proven


def renew_token(token: str) -> str:
    """A fresh workflow token for the identity ``token`` still proves (the ``renew_identity`` activity)."""
    try:
        proven = authority().verify(token).identity
    except IdentityError as error:
        raise permanent(
            FailureCode.UNAUTHENTICATED, f"the workflow's identity cannot be renewed: {error}"
        ) from None
    return authority().issue(proven, ttl=authority().workflow_token_ttl)


def workflow_token(identity: Identity) -> str:
    """The token a workflow started for ``identity`` carries in its input."""
    return authority().issue(identity, ttl=authority().workflow_token_ttl)
