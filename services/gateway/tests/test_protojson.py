"""The one proto ↔ JSON mapping of the gateway (``knowsphere_gateway.api.protojson``).

What a caller notices: every field of every message the gateway answers with is in the JSON and in the
OpenAPI document, so a field added to a proto reaches the HTTP API with no edit in the gateway; enums
read as their lower-case names; times, durations, big integers and absent values look the same
everywhere; a request body keeps which fields were given.
"""

from __future__ import annotations

import typing
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from pydantic import BaseModel

from knowsphere.ingestion.v1 import ingestion_pb2 as ipb
from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_contracts.protoenum import enum_class
from knowsphere_gateway.api.protojson import ProtoJson, from_json, json_model, json_name, to_json

# Messages the gateway must be found answering with (a guard: the route walk below must see them).
ANSWERED = {
    "knowsphere.ingestion.v1.KnowledgeBase",
    "knowsphere.ingestion.v1.ListKnowledgeBasesResponse",
    "knowsphere.ingestion.v1.Document",
    "knowsphere.ingestion.v1.ListDocumentsResponse",
    "knowsphere.ingestion.v1.DocumentProgress",
    "knowsphere.ingestion.v1.GetUploadPolicyResponse",
    "knowsphere.ingestion.v1.UploadDocumentResponse",
    "knowsphere.ingestion.v1.UploadDocumentsResponse",
    "knowsphere.retrieval.v1.SearchResponse",
    "knowsphere.modelhub.v1.Model",
    "knowsphere.modelhub.v1.ListModelsResponse",
    "knowsphere.modelhub.v1.ResolvedDefault",
    "knowsphere.modelhub.v1.ListProvidersResponse",
    "knowsphere.modelhub.v1.ListModelUsagesResponse",
}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


def _api_routes(routes: list[Any]) -> list[APIRoute]:
    found: list[APIRoute] = []
    for route in routes:
        if isinstance(route, APIRoute):
            found.append(route)
        elif hasattr(route, "original_router"):  # an included router
            found += _api_routes(route.original_router.routes)
    return found


def served_models(app: FastAPI) -> dict[str, list[type[ProtoJson]]]:
    """Every generated model the app answers with, nested ones included, by message full name."""
    found: dict[str, list[type[ProtoJson]]] = {}
    pending: list[type[BaseModel]] = []
    for route in _api_routes(app.routes):
        pending += _models_in(route.response_model)
        pending += [m for r in route.responses.values() for m in _models_in(r.get("model"))]
    seen: set[type[BaseModel]] = set()
    while pending:
        model = pending.pop()
        if model in seen:
            continue
        seen.add(model)
        if issubclass(model, ProtoJson):
            found.setdefault(model.proto_message, []).append(model)
        for field in model.model_fields.values():
            pending += _models_in(field.annotation)
    return found


def filled(descriptor: Descriptor) -> Message:
    """A message with every field set (one item per list and map), so nothing is left at its default."""
    message = GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if field.containing_oneof is not None and message.WhichOneof(field.containing_oneof.name):
            continue
        value_field = field.message_type.fields_by_name["value"] if _is_map(field) else field
        if _is_map(field):
            target = getattr(message, field.name)
            if value_field.message_type is not None:
                target[sample(field.message_type.fields_by_name["key"])].CopyFrom(
                    _message_sample(value_field)
                )
            else:
                target[sample(field.message_type.fields_by_name["key"])] = sample(value_field)
        elif field.is_repeated:
            if field.message_type is not None:
                getattr(message, field.name).add().CopyFrom(_message_sample(field))
            else:
                getattr(message, field.name).append(sample(field))
        elif field.message_type is not None:
            getattr(message, field.name).CopyFrom(_message_sample(field))
        else:
            setattr(message, field.name, sample(field))
    return message


def _is_map(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated and field.message_type and field.message_type.GetOptions().map_entry)


def _message_sample(field: FieldDescriptor) -> Message:
    name = field.message_type.full_name
    message = GetMessageClass(field.message_type)()
    if name == "google.protobuf.Timestamp":
        message.FromSeconds(1_700_000_000)  # type: ignore[attr-defined]
    elif name == "google.protobuf.Duration":
        message.FromMilliseconds(1500)  # type: ignore[attr-defined]
    elif name == "google.protobuf.Struct":
        message.update({"temperature": 0.5, "tags": ["a"]})  # type: ignore[attr-defined]
    else:
        message = filled(field.message_type)
    return message


def sample(field: FieldDescriptor) -> Any:
    if field.enum_type is not None:
        return next(v.number for v in field.enum_type.values if v.number != 0)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return b"\x00\x01"
    if field.cpp_type == FieldDescriptor.CPPTYPE_BOOL:
        return True
    if field.cpp_type in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
        return 0.5
    if field.cpp_type in (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64):
        return 2**40
    if field.cpp_type in (FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_UINT32):
        return 7
    return f"{field.name}-value"


@pytest.fixture
async def app(gateway: Any) -> FastAPI:
    built: FastAPI = await gateway()
    return built


async def test_every_field_of_every_answered_message_is_in_the_json_and_the_schema(app: FastAPI) -> None:
    served = served_models(app)
    assert set(served) >= ANSWERED
    schemas = app.openapi()["components"]["schemas"]
    for full_name, models in served.items():
        descriptor = descriptor_pool.Default().FindMessageTypeByName(full_name)
        keys = {json_name(field) for field in descriptor.fields}
        full, empty = to_json(filled(descriptor)), to_json(GetMessageClass(descriptor)())
        assert set(full) == keys == set(empty), full_name
        for model in models:
            schema = schemas[model.__name__]
            assert set(schema["properties"]) == keys, full_name
            assert set(schema["required"]) == keys, full_name
            model.model_validate(full)
            model.model_validate(empty)  # every absent value is allowed to be null
            for field in descriptor.fields:
                if field.enum_type is not None and not field.is_repeated:
                    listed = schema["properties"][field.name]["anyOf"][0]["enum"]
                    assert listed == [m.value for m in enum_class(field.enum_type.full_name)], field.full_name
        # The answered JSON is exactly what the mapping gives (nothing dropped or added by the model).
        plain = json_model(descriptor)
        assert plain.model_validate(full).model_dump(mode="json", by_alias=True) == full


def test_the_rules_for_times_durations_enums_big_numbers_bytes_and_absent_values() -> None:
    progress = ipb.DocumentProgress(document_id="d1", status=ipb.DOCUMENT_STATUS_READY, percent=100)
    progress.eta.FromMilliseconds(2500)
    progress.update_time.FromSeconds(1_700_000_000)
    document = ipb.Document(id="d1", size_bytes=2**40, progress=progress, metadata={"source": "wiki"})
    rendered = to_json(document)
    assert rendered["size_bytes"] == 2**40  # a number, not a string
    assert rendered["status"] is None  # the zero value
    assert rendered["failure"] is None and rendered["warnings"] == []
    assert rendered["create_time"] is None
    assert rendered["metadata"] == {"source": "wiki"}
    assert rendered["progress"]["status"] == "ready"
    assert rendered["progress"]["eta_seconds"] == 2.5 and "eta" not in rendered["progress"]
    assert rendered["progress"]["update_time"] == "2023-11-14T22:13:20Z"

    scores = to_json(rpb.ScoreParts(bm25=1.5, rrf=0.25))
    assert scores == {
        "vector": None,  # an unset optional scalar
        "bm25": 1.5,
        "rrf": 0.25,
        "rerank": None,
        "vector_rank": None,
        "bm25_rank": None,
    }
    model = mpb.Model(id="m1", types=[mpb.MODEL_TYPE_EMBEDDING, 0, mpb.MODEL_TYPE_RERANK])
    model.parameters.extra.update({"enable_thinking": False})
    rendered = to_json(model)
    assert rendered["types"] == ["embedding", "rerank"]  # the zero value is left out of a list
    assert rendered["parameters"]["extra"] == {"enable_thinking": False}
    assert rendered["parameters"]["temperature"] is None
    assert to_json(ipb.UploadDocumentRequest(chunk=b"\x00\xff")) == {"header": None, "chunk": "AP8="}


def test_a_request_body_keeps_which_fields_were_given() -> None:
    request = from_json(
        ipb.UpdateKnowledgeBaseRequest,
        {"name": "Travel", "description": None, "chunking": {"strategy": "parent_child"}},
    )
    assert request.HasField("name") and request.name == "Travel"
    assert not request.HasField("description") and not request.HasField("graph_enabled")
    assert request.chunking.strategy == ipb.CHUNKING_STRATEGY_PARENT_CHILD
    empty_chunking = from_json(ipb.UpdateKnowledgeBaseRequest, {"chunking": {}})
    assert empty_chunking.HasField("chunking")  # given, even with every value at its default
    assert not from_json(ipb.UpdateKnowledgeBaseRequest, {}).HasField("chunking")
    options = from_json(rpb.SearchOptions, {"mode": "bm25", "rerank_enabled": False, "rrf_k": None})
    assert options.mode == rpb.SEARCH_MODE_BM25
    assert options.HasField("rerank_enabled") and not options.rerank_enabled
    assert not options.HasField("rrf_k")
    stats = from_json(rpb.SearchStats, {"embed_duration_seconds": 0.25})
    assert stats.embed_duration.ToMilliseconds() == 250
    assert to_json(stats)["embed_duration_seconds"] == 0.25


def test_a_wrong_enum_name_or_key_in_a_body_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"strategy: 'zigzag' is not one of: heading, parent_child"):
        from_json(ipb.ChunkingConfig, {"strategy": "zigzag"})
    with pytest.raises(ValueError, match="has no field 'colour'"):
        from_json(ipb.ChunkingConfig, {"colour": "red"})
