"""The tool catalogue and the trimming of it to one turn's switches.

Tools are kept in one fixed order — by category (planning, knowledge base, web, generation, run time),
then by name — whatever order they were registered or selected in, so the same switches and selection
always give the same list with the same schema texts: it is part of the cached prompt prefix.

Trimming: a knowledge-base tool needs a selected knowledge base, a web tool web search on, the graph
tool the graph on as well as a knowledge base; run-time tools are never selected by agents: read_file
comes with bound skills, execute_skill_script when one of them has scripts, the workspace tools when
the agent works in the session's workspace (a deep agent), get_stored_data always. write_plan and
generate_pptx depend on no switch.

An agent selects tools by name, or all tools of an MCP server by the server's name (``crm`` selects
``crm__lookup`` and ``crm__update``), so an agent's MCP servers are part of its configuration.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from knowsphere.toolrunner.v1.toolrunner_enums import ToolCategory
from knowsphere_toolrunner.domain.tools.base import Needs, Tool, ToolSpec, TurnSwitches

REASONS = {
    Needs.KNOWLEDGE_BASE: "no knowledge base selected this turn",
    Needs.WEB: "web search is off this turn",
    Needs.KNOWLEDGE_GRAPH: "the knowledge graph is off this turn",
    Needs.SKILLS: "no skill is bound to the agent",
    Needs.SKILL_SCRIPTS: "no skill bound to the agent has scripts",
    Needs.WORKSPACE: "the agent has no workspace (only deep agents work in one)",
}
UNKNOWN_TOOL = "unknown tool"
# Checked in this order, so a tool missing two switches names the first (the graph tool without a
# knowledge base says "no knowledge base").
_NEEDS_ORDER = (
    Needs.KNOWLEDGE_BASE,
    Needs.KNOWLEDGE_GRAPH,
    Needs.WEB,
    Needs.SKILLS,
    Needs.SKILL_SCRIPTS,
    Needs.WORKSPACE,
)


@dataclass(frozen=True)
class Omitted:
    name: str
    reason: str


@dataclass(frozen=True)
class Listing:
    tools: tuple[ToolSpec, ...]
    omitted: tuple[Omitted, ...]


# Tools without a contract category (MCP servers' tools) come after every category.
_UNCATEGORISED_LAST = 1_000


def _order(spec: ToolSpec) -> tuple[int, str]:
    return (spec.category.number if spec.category is not None else _UNCATEGORISED_LAST, spec.name)


def missing_switch(
    spec: ToolSpec,
    switches: TurnSwitches,
    skill_names: Sequence[str],
    *,
    skill_scripts: bool,
    workspace: bool = False,
) -> str | None:
    """Why ``spec`` cannot run this turn, or None when it can. ``skill_scripts``: a bound skill has
    scripts (the caller looked the skills up); ``workspace``: the agent works in a workspace."""
    present = {
        Needs.KNOWLEDGE_BASE: bool(switches.knowledge_base_ids),
        Needs.WEB: switches.web_search,
        Needs.KNOWLEDGE_GRAPH: switches.knowledge_graph,
        Needs.SKILLS: bool(skill_names),
        Needs.SKILL_SCRIPTS: bool(skill_names) and skill_scripts,
        Needs.WORKSPACE: workspace,
    }
    for need in _NEEDS_ORDER:
        if need in spec.needs and not present[need]:
            return REASONS[need]
    return None


class Catalogue:
    """Every tool the service can run, by name."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        self.add(tools)

    def add(self, tools: Iterable[Tool]) -> None:
        """Register more tools (those of MCP servers, discovered at start-up); the order stays fixed."""
        by_name = dict(self._tools)
        for tool in tools:
            name = tool.spec.name
            if name in by_name:
                raise ValueError(f"tool {name!r} is registered twice")
            by_name[name] = tool
        self._tools = dict(sorted(by_name.items(), key=lambda item: _order(item[1].spec)))

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def specs(self) -> list[ToolSpec]:
        return [tool.spec for tool in self._tools.values()]

    def list_tools(
        self,
        switches: TurnSwitches,
        tool_names: Sequence[str] = (),
        skill_names: Sequence[str] = (),
        *,
        skill_scripts: bool = False,
        catalog_view: bool = False,
        workspace: bool = False,
    ) -> Listing:
        """The tools of one turn in catalogue order, and the selected ones left out with the reason.
        ``skill_scripts``: one of the bound skills has scripts (execute_skill_script is offered);
        ``workspace``: the agent works in the session's workspace (the workspace tools are offered)."""
        if catalog_view:
            return Listing(tuple(s for s in self.specs if s.selectable), ())
        selected = set(tool_names)
        tools: list[ToolSpec] = []
        omitted: list[Omitted] = []
        for spec in self.specs:
            if spec.category == ToolCategory.RUNTIME:
                missing = missing_switch(
                    spec, switches, skill_names, skill_scripts=skill_scripts, workspace=workspace
                )
                if missing is None:
                    tools.append(spec)
                continue
            if selected and spec.name not in selected and spec.group not in selected:
                continue
            reason = missing_switch(spec, switches, skill_names, skill_scripts=skill_scripts)
            if reason is None:
                tools.append(spec)
            else:
                omitted.append(Omitted(spec.name, reason))
        groups = {spec.group for spec in self.specs if spec.group is not None}
        for name in sorted(selected - set(self._tools) - groups):
            omitted.append(Omitted(name, UNKNOWN_TOOL))
        return Listing(tuple(tools), tuple(omitted))
