"""The model registry and retrieval testing through the gateway, against fake modelhub and retrieval
services on real gRPC servers reached through the clients.

What a caller notices: the search options reach retrieval as given (unset ones stay unset) and the
answer shows every score part and statistic; model types read as names both ways; an API key never
comes back; a model failure is an HTTP error with modelhub's code, its message for the user, the field
and the model.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import status_pb2
from grpc_status import rpc_status

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb


class FakeRetrieval:
    def __init__(self) -> None:
        self.requests: list[rpb.SearchRequest] = []
        self.languages: list[str | None] = []

    async def Search(self, request: rpb.SearchRequest, context: Any) -> Any:
        self.requests.append(request)
        self.languages.append(dict(context.invocation_metadata()).get("accept-language"))
        result = rpb.SearchResult(
            chunk_id="c1", text="Leave is 25 days.", scores=rpb.ScoreParts(bm25=2.5, rrf=0.5, bm25_rank=1)
        )
        stats = rpb.SearchStats(bm25_hit_count=1, rerank_skipped_reason="no rerank model configured")
        stats.embed_duration.FromMilliseconds(0)
        stats.total_duration.FromMilliseconds(125)
        return rpb.SearchResponse(results=[result], stats=stats)


class FakeModelHub:
    def __init__(self) -> None:
        self.requests: list[Any] = []

    async def CreateModel(self, request: mpb.CreateModelRequest, context: Any) -> Any:
        self.requests.append(request)
        if request.provider_id == "no-such-provider":
            detail = mpb.ModelErrorDetail(
                code=mpb.MODEL_ERROR_CODE_INVALID_INPUT,
                user_message="未知的服务商 no-such-provider",
                field="provider_id",
                model_id="m-new",
            )
            packed = any_pb2.Any()
            packed.Pack(detail)
            status = status_pb2.Status(
                code=grpc.StatusCode.INVALID_ARGUMENT.value[0], message="unknown provider", details=[packed]
            )
            await context.abort_with_status(rpc_status.to_status(status))
        model = mpb.Model(
            id="m1",
            display_name=request.display_name,
            types=request.types,
            api_key_hint=f"sk-…{request.api_key[-4:]}",
            parameters=request.parameters,
        )
        return mpb.CreateModelResponse(model=model)

    async def UpdateModel(self, request: mpb.UpdateModelRequest, context: Any) -> Any:
        self.requests.append(request)
        return mpb.UpdateModelResponse(model=mpb.Model(id=request.model_id, types=request.types.types))

    async def GetDefaultModel(self, request: mpb.GetDefaultModelRequest, context: Any) -> Any:
        self.requests.append(request)
        return mpb.GetDefaultModelResponse(
            default_model=mpb.ResolvedDefault(type=request.type, source=mpb.DEFAULT_MODEL_SOURCE_NONE)
        )


async def test_search_options_reach_retrieval_as_given_and_every_score_part_comes_back(
    gateway: Any, client: Any
) -> None:
    retrieval = FakeRetrieval()
    async with client(await gateway(retrieval=retrieval)) as http:
        response = await http.post(
            "/api/v1/knowledge-bases/kb-1/search",
            json={"query": "annual leave", "mode": "bm25", "rerank": False, "mmr_lambda": 0.7},
            headers={"accept-language": "de"},
        )
    assert response.status_code == 200, response.text
    request = retrieval.requests[0]
    assert request.query == "annual leave" and list(request.knowledge_base_ids) == ["kb-1"]
    assert request.options.mode == rpb.SEARCH_MODE_BM25
    assert request.options.HasField("rerank_enabled") and not request.options.rerank_enabled
    assert request.options.mmr_lambda == 0.7
    assert not request.options.HasField("rrf_k") and not request.options.HasField("expansion_enabled")
    assert retrieval.languages == ["de"]
    found = response.json()
    assert found["results"][0]["scores"] == {
        "vector": None,
        "bm25": 2.5,
        "rrf": 0.5,
        "rerank": None,
        "vector_rank": None,
        "bm25_rank": 1,
    }
    stats = found["stats"]
    assert stats["bm25_hit_count"] == 1 and stats["vector_hit_count"] == 0
    assert stats["embed_duration_seconds"] == 0.0 and stats["total_duration_seconds"] == 0.125
    assert stats["rerank_skipped_reason"] == "no rerank model configured"


async def test_model_types_read_as_names_and_the_api_key_never_comes_back(gateway: Any, client: Any) -> None:
    modelhub = FakeModelHub()
    async with client(await gateway(modelhub=modelhub)) as http:
        created = await http.post(
            "/api/v1/models",
            json={
                "display_name": "Chat",
                "provider_id": "deepseek",
                "model_name": "deepseek-chat",
                "types": ["knowledge_qa"],
                "api_key": "sk-secret-1234",
                "parameters": {"temperature": 0.2, "extra": {"enable_thinking": False}},
            },
        )
        changed = await http.patch("/api/v1/models/m1", json={"types": ["embedding"], "api_key": ""})
        default = await http.get("/api/v1/models/defaults/rerank")
        unknown_type = await http.get("/api/v1/models/defaults/teleport")
    assert created.status_code == 201, created.text
    model = created.json()
    assert model["types"] == ["knowledge_qa"] and model["api_key_hint"] == "sk-…1234"
    assert "sk-secret-1234" not in created.text
    assert model["parameters"]["temperature"] == 0.2 and model["parameters"]["max_tokens"] is None
    assert model["parameters"]["extra"] == {"enable_thinking": False}
    create, update, get_default = modelhub.requests
    assert list(create.types) == [mpb.MODEL_TYPE_KNOWLEDGE_QA] and create.api_key == "sk-secret-1234"
    assert not create.parameters.HasField("max_tokens")
    assert list(update.types.types) == [mpb.MODEL_TYPE_EMBEDDING]
    assert update.HasField("api_key") and update.api_key == ""  # "" removes the key: given, not absent
    assert not update.HasField("display_name") and not update.HasField("parameters")
    assert changed.json()["types"] == ["embedding"]
    assert get_default.type == mpb.MODEL_TYPE_RERANK
    assert default.json() == {"type": "rerank", "model": None, "source": "none"}
    assert unknown_type.status_code == 422


async def test_a_model_failure_is_an_http_error_with_modelhubs_code_message_field_and_model(
    gateway: Any, client: Any
) -> None:
    async with client(await gateway(modelhub=FakeModelHub())) as http:
        response = await http.post(
            "/api/v1/models",
            json={
                "display_name": "x",
                "provider_id": "no-such-provider",
                "model_name": "m",
                "types": ["vlm"],
            },
        )
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "code": "invalid_input",
            "message": "未知的服务商 no-such-provider",
            "field": "provider_id",
            "model_id": "m-new",
        }
    }


async def test_a_service_that_lacks_a_method_is_a_501(gateway: Any, client: Any) -> None:
    async with client(await gateway()) as http:
        response = await http.get("/api/v1/providers")
    assert response.status_code == 501
    assert response.json()["error"]["code"] == "unimplemented"


async def test_a_misspelt_key_or_an_unknown_mode_is_a_422_naming_it_and_nothing_is_called(
    gateway: Any, client: Any
) -> None:
    retrieval, modelhub = FakeRetrieval(), FakeModelHub()
    async with client(await gateway(retrieval=retrieval, modelhub=modelhub)) as http:
        search = await http.post("/api/v1/knowledge-bases/kb-1/search", json={"query": "leave", "topk": 5})
        mode = await http.post(
            "/api/v1/knowledge-bases/kb-1/search", json={"query": "leave", "mode": "fuzzy"}
        )
        model = await http.patch("/api/v1/models/m1", json={"parameters": {"temprature": 0.2}})
    assert [r.status_code for r in (search, mode, model)] == [422, 422, 422]
    assert search.json()["detail"][0]["loc"] == ["body", "topk"]
    assert mode.json()["detail"][0]["loc"] == ["body", "mode"] and "'hybrid'" in mode.text
    assert model.json()["detail"][0]["loc"] == ["body", "parameters", "temprature"]
    assert retrieval.requests == [] and modelhub.requests == []
