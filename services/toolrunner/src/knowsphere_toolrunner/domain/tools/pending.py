"""Tools that are in the catalogue before their implementation: the web tools (web_search, web_fetch,
built with the egress guard) and the skill tools (read_file, execute_skill_script, built with the
sandbox). They are offered with their real schemas, so the catalogue and the prompt prefix do not change
when they arrive; calling one answers the model that it is not implemented yet.

When an implementation arrives, :func:`knowsphere_toolrunner.toolbox.build_tools` lists it instead of
the placeholder of the same name (the catalogue refuses two tools of one name).
"""

from __future__ import annotations

from typing import Any

from knowsphere.toolrunner.v1.toolrunner_enums import ToolCategory
from knowsphere_toolrunner.domain.tools.base import (
    Needs,
    NotImplementedYet,
    ToolContext,
    ToolOutput,
    ToolSpec,
)

WEB_CAPABILITY = "the web tools behind the egress guard"
SKILLS_CAPABILITY = "skills and the sandbox"

WEB_SEARCH = ToolSpec(
    name="web_search",
    display_name="Web search",
    description=(
        "Search the web for current or public information the knowledge bases do not hold (news, prices, "
        "public facts). Returns results with title, URL and snippet, each with a source label to cite as "
        "[[cN]]. Open a promising result with web_fetch before relying on it."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 500, "description": "Search terms."},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 10, "description": "Default 5."},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    category=ToolCategory.WEB,
    produces_sources=True,
    needs=frozenset({Needs.WEB}),
)

WEB_FETCH = ToolSpec(
    name="web_fetch",
    display_name="Open web page",
    description=(
        "Open a web page or PDF by URL (usually one from web_search) and return its main text, without "
        "menus and ads, with a source label to cite as [[cN]]."
    ),
    parameters={
        "type": "object",
        "properties": {
            "url": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "http(s) URL."},
        },
        "required": ["url"],
        "additionalProperties": False,
    },
    category=ToolCategory.WEB,
    produces_sources=True,
    needs=frozenset({Needs.WEB}),
)

READ_FILE = ToolSpec(
    name="read_file",
    display_name="Read skill file",
    description=(
        "Read a file of a skill bound to you, starting with its instructions at /skills/<name>/SKILL.md. "
        "Read a skill's SKILL.md before using the skill and follow it."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "minLength": 1,
                "maxLength": 500,
                "description": "Path as listed, e.g. /skills/report-writer/SKILL.md.",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    category=ToolCategory.RUNTIME,
    selectable=False,
    needs=frozenset({Needs.SKILLS}),
)

EXECUTE_SKILL_SCRIPT = ToolSpec(
    name="execute_skill_script",
    display_name="Run skill script",
    description=(
        "Run a script of a bound skill in an isolated sandbox without network, as its SKILL.md says. "
        "Input files are placed in /workspace/input; files the script writes to /workspace/output are "
        "returned for download. Returns the exit code, standard output and standard error."
    ),
    parameters={
        "type": "object",
        "properties": {
            "skill": {"type": "string", "minLength": 1, "maxLength": 100, "description": "Skill name."},
            "script": {
                "type": "string",
                "minLength": 1,
                "maxLength": 500,
                "description": "Script path relative to the skill, e.g. scripts/build.py.",
            },
            "args": {"type": "array", "items": {"type": "string", "maxLength": 1000}, "maxItems": 50},
            "stdin": {"type": "string", "maxLength": 100000},
        },
        "required": ["skill", "script"],
        "additionalProperties": False,
    },
    category=ToolCategory.RUNTIME,
    selectable=False,
    needs=frozenset({Needs.SKILLS}),
)


class PendingTool:
    """A catalogue entry whose implementation has not arrived."""

    def __init__(self, spec: ToolSpec, capability: str) -> None:
        self.spec = spec
        self._capability = capability

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        raise NotImplementedYet(self.spec.name, self._capability)


def pending_tools() -> list[PendingTool]:
    return [
        PendingTool(WEB_SEARCH, WEB_CAPABILITY),
        PendingTool(WEB_FETCH, WEB_CAPABILITY),
        PendingTool(READ_FILE, SKILLS_CAPABILITY),
        PendingTool(EXECUTE_SKILL_SCRIPT, SKILLS_CAPABILITY),
    ]
