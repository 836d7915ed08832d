"""The one small interface every tool implements, and the shapes a tool call passes around.

A tool is an object with a :class:`ToolSpec` (what the model sees: name, description, JSON Schema of its
arguments, category, and which of the turn's switches it needs) and ``async run(arguments, context)``
returning a :class:`ToolOutput`. The executor validates the arguments against the schema before
``run`` sees them, applies the time limit and the retries, numbers sources and externalises large
results; a tool only does its own work. Tools (``domain/tools/*``: knowledge, web, skills, MCP …)
plug in by implementing this protocol and being listed in
:func:`knowsphere_toolrunner.toolbox.build_tools`.

A tool reports a problem the model should read by raising :class:`ToolProblem` (or one of its
subclasses); any other exception counts as a transient failure and is retried.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any, Protocol

from knowsphere.toolrunner.v1.toolrunner_enums import ToolCategory, ToolErrorCode
from knowsphere_toolrunner.domain.sources import SourceBook


def canonical_json(value: Any) -> str:
    """The one deterministic JSON text of ``value``: sorted keys, no spaces, UTF-8 kept as is. Identical
    values give byte-identical text, which keeps the prompt prefix that holds tool schemas cacheable."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Needs(StrEnum):
    """Which switch of the turn a tool depends on (a tool whose switch is off is not offered)."""

    KNOWLEDGE_BASE = "knowledge_base"
    WEB = "web"
    KNOWLEDGE_GRAPH = "knowledge_graph"
    SKILLS = "skills"
    SKILL_SCRIPTS = "skill_scripts"
    """A bound skill has scripts (execute_skill_script)."""
    WORKSPACE = "workspace"
    """The agent works in the session's file workspace (a deep agent)."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model is offered it; field names follow the contract's ``ToolSpec``."""

    name: str
    display_name: str
    description: str
    parameters: Mapping[str, Any]
    category: ToolCategory | None
    """None: no category of the contract fits (MCP servers' tools); sent as UNSPECIFIED."""
    selectable: bool = True
    produces_sources: bool = False
    needs: frozenset[Needs] = frozenset()
    timeout_seconds: float | None = None
    """Time limit of one attempt; None = the executor's default."""
    whole_result: bool = False
    """Every result is stored whole and the model sees the placeholder (the spec's whole-result flag)."""
    externalise: bool = True
    """False for get_stored_data: what it returns is never externalised again."""
    group: str | None = None
    """A name that selects this tool together with others (an MCP server's name selects its tools)."""

    @cached_property
    def parameters_json_schema(self) -> str:
        return canonical_json(self.parameters)


@dataclass(frozen=True)
class TurnSwitches:
    knowledge_base_ids: tuple[str, ...] = ()
    web_search: bool = False
    knowledge_graph: bool = False


@dataclass
class ToolContext:
    """Who calls and in which turn. ``sources`` numbers this call's citable sources after the turn's."""

    tenant_id: str
    user_id: str
    session_id: str
    turn_id: str
    switches: TurnSwitches
    sources: SourceBook
    skill_names: tuple[str, ...] = ()
    language: str = ""
    agent_id: str = ""
    workspace: bool = False
    """The agent works in the session's file workspace (the workspace tools; skill scripts see it)."""


@dataclass(frozen=True)
class Artifact:
    """A file a tool produced; field names follow the contract's ``ToolArtifact``."""

    artifact_id: str
    file_name: str
    content_type: str
    size_bytes: int


@dataclass
class ToolOutput:
    """What a tool returns: a JSON value (dict, list …) or plain text, and the files it produced."""

    value: Any
    artifacts: Sequence[Artifact] = field(default_factory=tuple)
    whole_result: bool = False


class ToolProblem(Exception):
    """A failure the model should read as it is; not retried (the same call would fail the same way)."""

    code: ToolErrorCode = ToolErrorCode.FAILED

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TransientProblem(Exception):
    """A failure worth another attempt (a time-out, a server error of a remote service), with a text
    safe to show the model when the last attempt fails too (no addresses, no traces)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadArguments(ToolProblem):
    code = ToolErrorCode.INVALID_ARGUMENTS


class NothingFound(ToolProblem):
    """A referenced item (a cN label, a ref id, a document) does not exist for the caller."""

    code = ToolErrorCode.NOT_FOUND


class Tool(Protocol):
    """One tool: its spec and what it does."""

    @property
    def spec(self) -> ToolSpec: ...

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput: ...
