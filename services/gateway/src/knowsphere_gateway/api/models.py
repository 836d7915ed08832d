"""Model registry endpoints (``/api/v1/models``, ``/api/v1/providers``), backed by modelhub over gRPC.

API keys are write-only: they can be given on create and update and are never returned; records
carry ``api_key_hint`` (e.g. ``sk-…a1b2``).
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar

import grpc
from fastapi import APIRouter, Depends, Header, Query, Response
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct
from pydantic import BaseModel, Field

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere_gateway.api.errors import service_error
from knowsphere_runtime.identity import Identity, bound_identity

T = TypeVar("T")
TypeName = Literal["embedding", "rerank", "knowledge_qa", "vlm", "asr"]


def _type_value(name: str) -> int:
    return int(pb.ModelType.Value(f"MODEL_TYPE_{name.upper()}"))


def _type_name(value: int) -> str:
    return pb.ModelType.Name(value).removeprefix("MODEL_TYPE_").lower()  # type: ignore[arg-type]


class ModelParameters(BaseModel):
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)
    context_window: int | None = Field(default=None, ge=1)
    embedding_dimension: int | None = Field(default=None, ge=1, le=8192)
    extra: dict[str, Any] = Field(default_factory=dict, description="provider-specific request parameters")

    def to_proto(self) -> pb.ModelParameters:
        message = pb.ModelParameters()
        for name in ("temperature", "max_tokens", "context_window", "embedding_dimension"):
            value = getattr(self, name)
            if value is not None:
                setattr(message, name, value)
        if self.extra:
            extra = Struct()
            extra.update(self.extra)
            message.extra.CopyFrom(extra)
        return message


class ModelCreate(BaseModel):
    display_name: str = Field(min_length=1, max_length=200)
    provider_id: str = Field(min_length=1, description="an id from GET /api/v1/providers")
    model_name: str = Field(min_length=1, max_length=300)
    types: list[TypeName] = Field(min_length=1)
    base_url: str = ""
    parameters: ModelParameters = Field(default_factory=ModelParameters)
    api_key: str | None = Field(default=None, description="stored encrypted; never returned")
    description: str = ""


class ModelUpdate(BaseModel):
    display_name: str | None = Field(default=None, min_length=1, max_length=200)
    model_name: str | None = None
    types: list[TypeName] | None = None
    base_url: str | None = None
    parameters: ModelParameters | None = None
    api_key: str | None = None
    description: str | None = None


class ModelView(BaseModel):
    id: str
    display_name: str
    provider_id: str
    model_name: str
    types: list[str]
    base_url: str
    parameters: dict[str, Any]
    api_key_hint: str
    builtin: bool
    default_for: list[str]
    description: str
    create_time: str | None = None
    update_time: str | None = None


class DefaultView(BaseModel):
    type: str
    source: str = Field(description="tenant, environment, builtin or none")
    model: ModelView | None


class DefaultUpdate(BaseModel):
    model_id: str = Field(min_length=1)


def _model_view(model: pb.Model) -> ModelView:
    return ModelView(
        id=model.id,
        display_name=model.display_name,
        provider_id=model.provider_id,
        model_name=model.model_name,
        types=[_type_name(t) for t in model.types],
        base_url=model.base_url,
        parameters=MessageToDict(model.parameters, preserving_proto_field_name=True),
        api_key_hint=model.api_key_hint,
        builtin=model.builtin,
        default_for=[_type_name(t) for t in model.default_for],
        description=model.description,
        create_time=model.create_time.ToJsonString() if model.HasField("create_time") else None,
        update_time=model.update_time.ToJsonString() if model.HasField("update_time") else None,
    )


def _default_view(resolved: pb.ResolvedDefault) -> DefaultView:
    return DefaultView(
        type=_type_name(resolved.type),
        source=pb.DefaultModelSource.Name(resolved.source).removeprefix("DEFAULT_MODEL_SOURCE_").lower(),
        model=_model_view(resolved.model) if resolved.HasField("model") else None,
    )


def build_models_router(modelhub: Callable[[], Any], caller: Callable[..., Identity]) -> APIRouter:
    """``modelhub()`` returns the ModelHubService stub; ``caller`` is the identity dependency."""
    router = APIRouter(prefix="/api/v1", tags=["models"])

    async def call(identity: Identity, language: str | None, rpc: Callable[[Any], Awaitable[T]]) -> T:
        metadata = (("accept-language", language),) if language else ()
        with bound_identity(identity):
            try:
                return await rpc(metadata)
            except grpc.aio.AioRpcError as error:
                raise service_error(error) from error

    Caller = Annotated[Identity, Depends(caller)]
    Language = Annotated[str | None, Header(alias="accept-language")]

    @router.get("/providers")
    async def list_providers(identity: Caller, language: Language = None) -> dict[str, Any]:
        """The providers modelhub can talk to, with their default base URLs and capabilities."""
        response = await call(
            identity, language, lambda md: modelhub().ListProviders(pb.ListProvidersRequest(), metadata=md)
        )
        return MessageToDict(response, preserving_proto_field_name=True)

    @router.get("/models")
    async def list_models(
        identity: Caller,
        language: Language = None,
        type: TypeName | None = None,
        provider_id: str | None = None,
        page_size: Annotated[int, Query(ge=0, le=200)] = 50,
        page_token: str = "",
    ) -> dict[str, Any]:
        request = pb.ListModelsRequest(
            type=_type_value(type) if type else 0,  # type: ignore[arg-type]
            provider_id=provider_id or "",
            page_size=page_size,
            page_token=page_token,
        )
        response = await call(identity, language, lambda md: modelhub().ListModels(request, metadata=md))
        return {
            "models": [_model_view(m).model_dump() for m in response.models],
            "next_page_token": response.next_page_token,
        }

    @router.post("/models", status_code=201)
    async def create_model(body: ModelCreate, identity: Caller, language: Language = None) -> ModelView:
        request = pb.CreateModelRequest(
            display_name=body.display_name,
            provider_id=body.provider_id,
            model_name=body.model_name,
            types=[_type_value(t) for t in body.types],  # type: ignore[misc]
            base_url=body.base_url,
            parameters=body.parameters.to_proto(),
            api_key=body.api_key or "",
            description=body.description,
        )
        response = await call(identity, language, lambda md: modelhub().CreateModel(request, metadata=md))
        return _model_view(response.model)

    @router.get("/models/defaults/{type}")
    async def get_default(type: TypeName, identity: Caller, language: Language = None) -> DefaultView:
        request = pb.GetDefaultModelRequest(type=_type_value(type))  # type: ignore[arg-type]
        response = await call(identity, language, lambda md: modelhub().GetDefaultModel(request, metadata=md))
        return _default_view(response.default_model)

    @router.put("/models/defaults/{type}")
    async def set_default(
        type: TypeName, body: DefaultUpdate, identity: Caller, language: Language = None
    ) -> DefaultView:
        request = pb.SetDefaultModelRequest(type=_type_value(type), model_id=body.model_id)  # type: ignore[arg-type]
        response = await call(identity, language, lambda md: modelhub().SetDefaultModel(request, metadata=md))
        return _default_view(response.default_model)

    @router.get("/models/{model_id}")
    async def get_model(model_id: str, identity: Caller, language: Language = None) -> ModelView:
        request = pb.GetModelRequest(model_id=model_id)
        response = await call(identity, language, lambda md: modelhub().GetModel(request, metadata=md))
        return _model_view(response.model)

    @router.patch("/models/{model_id}")
    async def update_model(
        model_id: str, body: ModelUpdate, identity: Caller, language: Language = None
    ) -> ModelView:
        request = pb.UpdateModelRequest(model_id=model_id)
        for name in ("display_name", "model_name", "base_url", "api_key", "description"):
            value = getattr(body, name)
            if value is not None:
                setattr(request, name, value)
        if body.types is not None:
            request.types.types.extend([_type_value(t) for t in body.types])  # type: ignore[misc]
        if body.parameters is not None:
            request.parameters.CopyFrom(body.parameters.to_proto())
        response = await call(identity, language, lambda md: modelhub().UpdateModel(request, metadata=md))
        return _model_view(response.model)

    @router.delete("/models/{model_id}", status_code=204)
    async def delete_model(model_id: str, identity: Caller, language: Language = None) -> Response:
        request = pb.DeleteModelRequest(model_id=model_id)
        await call(identity, language, lambda md: modelhub().DeleteModel(request, metadata=md))
        return Response(status_code=204)

    @router.get("/models/{model_id}/usages")
    async def list_usages(model_id: str, identity: Caller, language: Language = None) -> dict[str, Any]:
        request = pb.ListModelUsagesRequest(model_id=model_id)
        response = await call(identity, language, lambda md: modelhub().ListModelUsages(request, metadata=md))
        return MessageToDict(response, preserving_proto_field_name=True)

    return router


__all__ = ["build_models_router"]
