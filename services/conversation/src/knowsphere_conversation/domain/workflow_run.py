"""Running a workflow orchestrator's steps within one turn.

From the start step, each step runs with its inputs resolved (the question, earlier steps' outputs,
literals): an agent step asks its agent (on a checkpoint thread of its own, through ``consult``), a
tool step calls the tool runner (``call_tool``). Its text becomes its outputs (one output takes the
text; several are read from a JSON object), and the first edge whose condition holds picks the next
step. The step where the workflow ends is an agent step (checked when saved): it is not run here but
returned, with everything the earlier steps produced, for the turn to answer through that agent — so
the answer streams and lands in the session's history like any other. The sources the steps found are
numbered for the whole turn, and the citations in their outputs follow.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from knowsphere_conversation.domain.citations import renumber_citations
from knowsphere_conversation.domain.workflow import (
    InputUnavailable,
    OutputType,
    Step,
    StepKind,
    Workflow,
    next_steps,
    resolve_inputs,
)

Consult = Callable[[str, str, str], Awaitable[tuple[str, list[dict[str, Any]]]]]
"""(label, agent id, question) → the agent's answer and sources."""
CallTool = Callable[[str, str, dict[str, Any]], Awaitable[tuple[str, list[dict[str, Any]]]]]
"""(label, tool name, arguments) → the tool's result and sources."""
Announce = Callable[[Step, str], Awaitable[None]]
"""Called before an agent step runs, with its label (the turn's handoff event)."""


LABEL = re.compile(r"(?<!\[)\[(c\d{1,4})\](?!\])")
"""How a tool's result labels its passages (``[c1] …``), renamed with the sources."""


def relabel(text: str, renamed: Mapping[str, str]) -> str:
    """A tool result's ``[cN]`` passage labels renamed with its sources."""
    return LABEL.sub(lambda m: f"[{renamed.get(m.group(1), m.group(1))}]", text)


class WorkflowStopped(Exception):
    """The workflow cannot go on: a step ran more often than ``max_iterations`` or lacks an input."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class Finale:
    """Where the workflow ends: the agent step that answers, its inputs as a question, and what the
    steps before it produced (in order) with the sources they cite."""

    step: Step
    question: str
    produced: list[tuple[str, str]] = field(default_factory=list)
    """(step id, its text) in the order the steps ran."""
    sources: list[dict[str, Any]] = field(default_factory=list)


def as_question(inputs: Mapping[str, Any]) -> str:
    """A step's inputs as the text its agent is asked (just the question when that is all it takes)."""
    if set(inputs) == {"question"} and isinstance(inputs["question"], str):
        return inputs["question"]
    return "\n\n".join(
        f"{name}:\n{value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
        for name, value in inputs.items()
    )


def _typed(kind: OutputType, text: str) -> Any:
    value = text.strip()
    if kind is OutputType.TEXT:
        return text
    if kind is OutputType.NUMBER:
        return float(value)
    if kind is OutputType.BOOLEAN:
        folded = value.casefold().rstrip(".。!")
        if folded in ("true", "yes", "是", "对"):
            return True
        if folded in ("false", "no", "否", "不是"):
            return False
        raise ValueError(f"not a yes or no: {value[:40]!r}")
    return json.loads(value)


def outputs_of(step: Step, text: str) -> dict[str, Any]:
    """What a step's text gives for its declared outputs: one output takes the whole text; several are
    read from a JSON object. An output that cannot be read as its type is left out (a condition on it
    does not hold; an input bound to it is missing)."""
    if len(step.outputs) == 1:
        [(name, kind)] = step.outputs.items()
        try:
            return {name: _typed(kind, text)}
        except ValueError:
            return {}
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    values = {}
    for name, kind in step.outputs.items():
        if name in found:
            raw = found[name]
            try:
                values[name] = _typed(kind, raw if isinstance(raw, str) else json.dumps(raw))
            except ValueError:
                continue
    return values


async def run_steps(
    workflow: Workflow,
    question: str,
    *,
    consult: Consult,
    call_tool: CallTool,
    announce: Announce,
) -> Finale:
    """Runs the workflow from its start up to the agent step that answers (see the module)."""
    produced: dict[str, dict[str, Any]] = {}
    finale = Finale(workflow.step(workflow.start), "")
    runs: Counter[str] = Counter()
    step = workflow.step(workflow.start)
    while True:
        runs[step.id] += 1
        if runs[step.id] > workflow.max_iterations:
            raise WorkflowStopped(
                f"the step {step.id!r} would run {runs[step.id]} times; "
                f"the workflow allows {workflow.max_iterations}"
            )
        try:
            inputs = resolve_inputs(workflow, step.id, question, produced)
        except InputUnavailable as error:
            raise WorkflowStopped(f"the step {step.id!r} lacks its input {error.input_name!r}") from error
        # A step that declares no inputs works on the user's question.
        asked = as_question(inputs) if step.inputs else question
        if not step.next:
            finale.step, finale.question = step, asked
            return finale
        label = f"w-{step.id}-{runs[step.id]}"
        if step.kind is StepKind.AGENT:
            await announce(step, label)
            text, found = await consult(label, step.agent_id, asked)
        else:
            text, found = await call_tool(label, step.tool_name, inputs)
        renamed = {}
        for source in found:
            handle = f"c{len(finale.sources) + 1}"
            renamed[source["handle"]] = handle
            finale.sources.append({**source, "handle": handle})
        text = renumber_citations(text, renamed)
        if step.kind is StepKind.TOOL:
            text = relabel(text, renamed)
        finale.produced.append((step.id, text))
        produced[step.id] = outputs_of(step, text)
        step = workflow.step(next_steps(workflow, step.id, produced[step.id])[0])


__all__ = ["Finale", "WorkflowStopped", "as_question", "outputs_of", "run_steps"]
