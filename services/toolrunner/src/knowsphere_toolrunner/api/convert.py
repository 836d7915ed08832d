"""The one conversion between the toolrunner's contract messages and its domain shapes."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, struct_pb2

from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_contracts.convert import duration, message_from, record_from
from knowsphere_runtime.identity import Identity
from knowsphere_toolrunner.domain.execution import Execution
from knowsphere_toolrunner.domain.ports import StoredArtifact, StoredResult
from knowsphere_toolrunner.domain.sources import Source, SourceBook
from knowsphere_toolrunner.domain.tools.base import ToolContext, ToolSpec, TurnSwitches


def switches_of(message: pb.TurnSwitches) -> TurnSwitches:
    return TurnSwitches(
        knowledge_base_ids=tuple(dict.fromkeys(kb for kb in message.knowledge_base_ids if kb)),
        web_search=message.web_search,
        knowledge_graph=message.knowledge_graph,
    )


def sources_of(message: pb.ToolContext) -> list[Source]:
    return [record_from(Source, source) for source in message.sources]


def context_of(
    message: pb.ToolContext, identity: Identity, existing: list[Source], snippet_chars: int
) -> ToolContext:
    return ToolContext(
        tenant_id=identity.tenant_id,
        user_id=identity.user_id,
        session_id=message.session_id,
        turn_id=message.turn_id,
        switches=switches_of(message.switches),
        sources=SourceBook(existing, snippet_chars=snippet_chars),
        skill_names=tuple(message.skill_names),
        language=message.language,
        agent_id=message.agent_id,
        workspace=message.workspace,
    )


def arguments_of(message: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(message)


def spec_message(spec: ToolSpec) -> pb.ToolSpec:
    return message_from(pb.ToolSpec, spec)


def execution_message(outcome: Execution) -> pb.ExecuteToolResponse:
    response = message_from(
        pb.ExecuteToolResponse,
        outcome,
        json=None,
        error=None,
        sources=[message_from(pb.Source, s) for s in outcome.sources],
        artifacts=[message_from(pb.ToolArtifact, a) for a in outcome.artifacts],
        duration=duration(outcome.duration_seconds),
    )
    if outcome.has_json:
        json_format.ParseDict(outcome.json_value, response.json)
    if outcome.error_code is not None:
        response.error.code = outcome.error_code.to_proto()
        response.error.message = outcome.error_message
    return response


def stored_data_message(result: StoredResult) -> pb.StoredData:
    return message_from(pb.StoredData, result)


def artifact_message(artifact: StoredArtifact) -> pb.ToolArtifact:
    return message_from(pb.ToolArtifact, artifact)
