"""Why a model cannot be changed or deleted: :class:`ModelInUse` and the messages that name the reason.

A built-in or environment model is fixed; a tenant's model stays while it is a default of the tenant
or still used (a knowledge base whose vectors it made, an agent). Each refusal names what holds the
model and what to do first.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import grpc

from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode, ModelType
from knowsphere_modelhub.domain.errors import ModelError
from knowsphere_modelhub.domain.ports import Usage
from knowsphere_modelhub.domain.records import ModelRecord, in_proto_order
from knowsphere_modelhub.domain.validation import type_list


class ModelInUse(ModelError):
    """A model cannot be changed or deleted because of what depends on it.

    The code is INVALID_INPUT (the user message reads "Invalid request: <why>"), but the gRPC status is
    FAILED_PRECONDITION: the request is well-formed and would succeed once the dependency is gone.
    ``defaults`` lists the types it is the tenant's default for, ``usages`` what uses it.
    """

    def __init__(
        self,
        detail: str,
        *,
        model_id: str,
        defaults: Iterable[ModelType] = (),
        usages: Iterable[Usage] = (),
        builtin: bool = False,
    ) -> None:
        super().__init__(ModelErrorCode.INVALID_INPUT, detail, field="model_id", model_id=model_id)
        self.defaults = list(defaults)
        self.usages = list(usages)
        self.builtin = builtin

    @property
    def grpc_status(self) -> grpc.StatusCode:
        return grpc.StatusCode.FAILED_PRECONDITION


def label(record: ModelRecord) -> str:
    """``'GPT-4o' (model-1)``."""
    return f"'{record.display_name}' ({record.id})"


def describe_usage(usage: Usage) -> str:
    """``knowledge base 'HR handbook' (kb-1)``."""
    kind = usage.consumer_kind.value.replace("_", " ") if usage.consumer_kind else "consumer"
    return (
        f"{kind} '{usage.consumer_name}' ({usage.consumer_id})"
        if usage.consumer_name
        else f"{kind} {usage.consumer_id}"
    )


def configured_by_environment(record: ModelRecord, variables: str, verb: str) -> ModelInUse:
    return ModelInUse(
        f"Model {label(record)} is configured by the environment variables {variables} and "
        f"cannot be {verb} here; change those variables instead.",
        model_id=record.id,
        builtin=True,
    )


def built_in(record: ModelRecord, verb: str) -> ModelInUse:
    return ModelInUse(
        f"Model {label(record)} is built in and cannot be {verb}.", model_id=record.id, builtin=True
    )


def still_referenced(
    record: ModelRecord, defaults: Sequence[ModelType], usages: Sequence[Usage]
) -> ModelInUse:
    """The refusal to delete a model that is a default or still used (at least one of them)."""
    reasons: list[str] = []
    advice: list[str] = []
    if defaults:
        reasons.append(f"it is this tenant's default {type_list(defaults).replace(', ', ' and ')} model")
        advice.append("set another default model")
    if usages:
        reasons.append("it is still used by " + ", ".join(describe_usage(u) for u in usages))
        advice.append("move those to another model")
    return ModelInUse(
        f"Model {label(record)} cannot be deleted: {'; '.join(reasons)}. First {' and '.join(advice)}.",
        model_id=record.id,
        defaults=defaults,
        usages=usages,
    )


def referenced_meanwhile(record: ModelRecord) -> ModelInUse:
    return ModelInUse(
        f"Model {label(record)} cannot be deleted: it was just made a default or put in use.",
        model_id=record.id,
    )


def default_type_dropped(record: ModelRecord, dropped: Collection[ModelType]) -> ModelInUse:
    types = type_list(dropped)
    return ModelInUse(
        f"Model {label(record)} is this tenant's default {types} model, so it must "
        f"keep that type. Set another default model for {types} first.",
        model_id=record.id,
        defaults=in_proto_order(dropped),
    )


def vectors_in_use(record: ModelRecord, users: Sequence[Usage]) -> ModelInUse:
    return ModelInUse(
        f"Model {label(record)} embeds the vectors of "
        f"{', '.join(describe_usage(u) for u in users)}; changing its model name, embedding "
        "dimension or embedding type would make them unusable. Register a new model instead.",
        model_id=record.id,
        usages=users,
    )
