"""Model registry endpoints (``/api/v1/models``, ``/api/v1/providers``), backed by modelhub.

Responses are modelhub's messages as JSON (``protojson``). API keys are write-only: they can be given
on create and update and are never returned (the response messages have no key, only
``api_key_hint``, e.g. ``sk-…a1b2``).
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from pydantic import Field

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere_clients import ModelHubClient
from knowsphere_contracts.vocabulary import MAX_EMBEDDING_DIMENSION
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import SERVICE_RESPONSES
from knowsphere_gateway.api.knowledge import INT32_MAX, PageSize
from knowsphere_gateway.api.protojson import (
    JSON_INTEGER,
    JsonFloat,
    RequestBody,
    from_json,
    json_model,
    to_json,
)

ModelJson = json_model(pb.Model.DESCRIPTOR)
ModelListJson = json_model(pb.ListModelsResponse.DESCRIPTOR)
DefaultJson = json_model(pb.ResolvedDefault.DESCRIPTOR)
ProviderListJson = json_model(pb.ListProvidersResponse.DESCRIPTOR)
UsageListJson = json_model(pb.ListModelUsagesResponse.DESCRIPTOR)

# The request bodies below are hand-written: they check what modelhub does not (name lengths, at least
# one type, parameter ranges). Their keys are the request messages' field names, so ``from_json`` turns
# them into those messages. Numbers are strict (``true`` is no number, ``"0.5"`` no temperature) and
# within the range of their proto fields.


class ModelParametersBody(RequestBody):
    temperature: Annotated[JsonFloat, Field(ge=0, le=2)] | None = None
    max_tokens: Annotated[int, Field(ge=1, le=INT32_MAX), JSON_INTEGER] | None = None
    context_window: Annotated[int, Field(ge=1, le=INT32_MAX), JSON_INTEGER] | None = None
    embedding_dimension: Annotated[int, Field(ge=1, le=MAX_EMBEDDING_DIMENSION), JSON_INTEGER] | None = None
    extra: dict[str, Any] | None = Field(default=None, description="provider-specific request parameters")


class ModelCreate(RequestBody):
    display_name: str = Field(min_length=1, max_length=200)
    provider_id: str = Field(min_length=1, description="an id from GET /api/v1/providers")
    model_name: str = Field(min_length=1, max_length=300)
    types: list[ModelType] = Field(min_length=1)
    base_url: str = ""
    parameters: ModelParametersBody | None = None
    api_key: str | None = Field(default=None, description="stored encrypted; never returned")
    description: str = ""


class ModelUpdate(RequestBody):
    """Only the fields given change; ``parameters`` and ``types`` replace the whole set."""

    display_name: str | None = Field(default=None, min_length=1, max_length=200)
    model_name: str | None = None
    types: list[ModelType] | None = Field(default=None, min_length=1)
    base_url: str | None = None
    parameters: ModelParametersBody | None = None
    api_key: str | None = Field(default=None, description='"" removes the stored key')
    description: str | None = None


class DefaultUpdate(RequestBody):
    model_id: str = Field(min_length=1)


def build_models_router(modelhub: ModelHubClient, caller: Callable[..., Caller]) -> APIRouter:
    """``caller`` is the dependency giving each route its :class:`Caller`."""
    router = APIRouter(prefix="/api/v1", tags=["models"], responses=SERVICE_RESPONSES)
    Who = Annotated[Caller, Depends(caller)]

    @router.get("/providers", response_model=ProviderListJson)
    async def list_providers(who: Who) -> dict[str, Any]:
        """The providers modelhub can talk to, with their default base URLs and capabilities."""
        with who.bound():
            return to_json(await modelhub.list_providers())

    @router.get("/models", response_model=ModelListJson)
    async def list_models(
        who: Who,
        type: ModelType | None = None,
        provider_id: str | None = None,
        page_size: PageSize = 0,
        page_token: str = "",
    ) -> dict[str, Any]:
        request = from_json(
            pb.ListModelsRequest,
            {"type": type, "provider_id": provider_id, "page_size": page_size, "page_token": page_token},
        )
        with who.bound():
            return to_json(await modelhub.list_models(request))

    @router.post("/models", status_code=201, response_model=ModelJson)
    async def create_model(body: ModelCreate, who: Who) -> dict[str, Any]:
        request = from_json(pb.CreateModelRequest, body)
        with who.bound():
            return to_json(await modelhub.create_model(request))

    @router.get("/models/defaults/{type}", response_model=DefaultJson)
    async def get_default(type: ModelType, who: Who) -> dict[str, Any]:
        with who.bound():
            return to_json(await modelhub.get_default_model(type))

    @router.put("/models/defaults/{type}", response_model=DefaultJson)
    async def set_default(type: ModelType, body: DefaultUpdate, who: Who) -> dict[str, Any]:
        with who.bound():
            return to_json(await modelhub.set_default_model(type, body.model_id))

    @router.get("/models/{model_id}", response_model=ModelJson)
    async def get_model(model_id: str, who: Who) -> dict[str, Any]:
        with who.bound():
            return to_json(await modelhub.get_model(model_id))

    @router.patch("/models/{model_id}", response_model=ModelJson)
    async def update_model(model_id: str, body: ModelUpdate, who: Who) -> dict[str, Any]:
        changes = body.model_dump(exclude_unset=True)
        if changes.get("types") is not None:
            changes["types"] = {"types": changes["types"]}  # a message, so that "not given" and [] differ
        request = from_json(pb.UpdateModelRequest, {**changes, "model_id": model_id})
        with who.bound():
            return to_json(await modelhub.update_model(request))

    @router.delete("/models/{model_id}", status_code=204)
    async def delete_model(model_id: str, who: Who) -> Response:
        with who.bound():
            await modelhub.delete_model(model_id)
        return Response(status_code=204)

    @router.get("/models/{model_id}/usages", response_model=UsageListJson)
    async def list_usages(model_id: str, who: Who) -> dict[str, Any]:
        with who.bound():
            return to_json(await modelhub.list_model_usages(model_id))

    return router


__all__ = ["build_models_router"]
