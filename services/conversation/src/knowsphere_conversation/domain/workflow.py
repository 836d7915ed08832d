"""The Workflow orchestration mode: a predefined graph of steps, its configuration checked when saved,
and the choices a turn makes while walking it.

A workflow's ``config`` is a JSON object::

    {"start": "classify", "max_iterations": 2,
     "steps": [{"id": "classify", "kind": "agent", "agent_id": "a1",
                "inputs": {"question": {"from": "turn.question"}},
                "outputs": {"answer": "text"},
                "next": [{"to": "lookup", "when": {"output": "answer", "contains": "order"}},
                         {"to": "reply"}]}, ...]}

A step runs an agent or a tool. Its inputs are bound to the user's message (``turn.question``), to an
output of a step that ran before it (``<step id>.<output name>``) or to a literal (``{"value": …}``);
its outputs are declared with a type (text, json, number, boolean). After a step runs, every edge whose
condition holds names a next step; a step without edges ends the workflow. Cycles are allowed when
``max_iterations`` (how often any step may run in one turn) is set above 1 and each cycle can be left
by a condition.

:func:`parse_workflow` returns a :class:`Workflow` or raises :class:`WorkflowError` naming the field
(``config.steps[2].next[0]``) and what is wrong with it. The checks that need the whole graph
(reachability, an end, cycles, whether a bound step can have run) come after each step's own shape.
"""

from __future__ import annotations

import copy
import json
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Literal

from knowsphere_contracts.agents import MAX_ID_CHARS

MAX_STEPS = 32
MAX_EDGES_PER_STEP = 8
MAX_INPUTS_PER_STEP = 16
MAX_OUTPUTS_PER_STEP = 16
MAX_LITERAL_BYTES = 4096
"""A literal (an input's ``value``, a condition's ``equals``/``contains``) serialized as compact JSON."""
DEFAULT_MAX_ITERATIONS = 1
MAX_ITERATIONS = 20

STEP_ID = re.compile(r"[a-z][a-z0-9_-]{0,63}")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
"""Input and output names: no dot, since a binding reads ``<step id>.<output name>``."""
TURN = "turn"
"""Bindings read the turn through ``turn.…``, so no step may have this id."""
TURN_QUESTION = "turn.question"


class StepKind(StrEnum):
    AGENT = "agent"
    TOOL = "tool"


class OutputType(StrEnum):
    TEXT = "text"
    JSON = "json"
    NUMBER = "number"
    BOOLEAN = "boolean"


class WorkflowError(ValueError):
    """A workflow configuration that cannot be saved: ``field`` is its path (``config.steps[1].next[0]``)
    and ``reason`` what is wrong with it."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class InputUnavailable(LookupError):
    """A required input's source has not produced its output (the executor ran steps out of order, or a
    step did not return an output it declares)."""

    def __init__(self, step_id: str, input_name: str, source: str) -> None:
        super().__init__(f"step {step_id!r} input {input_name!r}: {source!r} has not been produced")
        self.step_id = step_id
        self.input_name = input_name
        self.source = source


@dataclass(frozen=True)
class Binding:
    """Where an input's value comes from: ``source`` (``turn.question`` or ``<step id>.<output>``), or,
    when ``source`` is None, the literal ``value``."""

    source: str | None = None
    value: Any = None
    optional: bool = False

    @property
    def upstream(self) -> tuple[str, str] | None:
        """(step id, output name) when bound to another step's output."""
        if self.source is None or self.source == TURN_QUESTION:
            return None
        step_id, output = self.source.split(".")
        return step_id, output


@dataclass(frozen=True)
class Condition:
    """Holds when the step's ``output`` equals ``value`` (same type), or, for ``contains``, when the
    text output contains ``value`` ignoring case (as the conditional mode's keywords do)."""

    output: str
    op: Literal["equals", "contains"]
    value: Any

    def holds(self, outputs: Mapping[str, Any]) -> bool:
        if self.output not in outputs:
            return False
        got = outputs[self.output]
        if self.op == "contains":
            return isinstance(got, str) and self.value.casefold() in got.casefold()
        # bool is an int in Python: True must not equal 1 here.
        if isinstance(got, bool) != isinstance(self.value, bool):
            return False
        return bool(got == self.value)


@dataclass(frozen=True)
class Edge:
    to: str
    when: Condition | None = None
    """None: unconditional."""


@dataclass(frozen=True)
class Step:
    id: str
    kind: StepKind
    agent_id: str = ""
    tool_name: str = ""
    inputs: Mapping[str, Binding] = field(default_factory=lambda: MappingProxyType({}))
    outputs: Mapping[str, OutputType] = field(default_factory=lambda: MappingProxyType({}))
    next: tuple[Edge, ...] = ()


@dataclass(frozen=True)
class Workflow:
    steps: tuple[Step, ...]
    start: str
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    """How many times any step may run within one turn."""

    def step(self, step_id: str) -> Step:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(f"the workflow has no step {step_id!r}")


# --- reading JSON -----------------------------------------------------------------------------------


def _keys(value: Any, path: str, allowed: Sequence[str], required: Sequence[str] = ()) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise WorkflowError(path, "must be an object")
    for key in value:
        if key not in allowed:
            raise WorkflowError(f"{path}.{key}", f"unknown key; expected one of {', '.join(allowed)}")
    for key in required:
        if key not in value:
            raise WorkflowError(f"{path}.{key}", "required")
    return value


def _text(value: Any, path: str, most: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise WorkflowError(path, "must be a non-empty string")
    if len(value) > most:
        raise WorkflowError(path, f"{len(value)} characters; the limit is {most}")
    return value


def _names(value: Any, path: str, what: str, most: int) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise WorkflowError(path, f"must be an object of {what} by name")
    if len(value) > most:
        raise WorkflowError(path, f"{len(value)} {what}; the limit is {most}")
    for name in value:
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise WorkflowError(path, f"{what[:-1]} name {name!r} must match {NAME.pattern}")
    return value


def _literal(value: Any, path: str) -> Any:
    """A copy of a JSON value within the size limit."""
    try:
        serialized = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise WorkflowError(path, f"must be a JSON value: {error}") from error
    size = len(serialized.encode())
    if size > MAX_LITERAL_BYTES:
        raise WorkflowError(path, f"{size} bytes serialized; the limit is {MAX_LITERAL_BYTES}")
    return json.loads(serialized)


def _max_iterations(value: Any, path: str) -> int:
    # JSON numbers arrive as floats through a protobuf Struct.
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise WorkflowError(path, "must be a whole number")
    if not 1 <= value <= MAX_ITERATIONS:
        raise WorkflowError(path, f"{int(value)} is out of range; between 1 and {MAX_ITERATIONS}")
    return int(value)


def _binding(value: Any, path: str) -> Binding:
    given = _keys(value, path, ("from", "value", "optional"))
    if ("from" in given) == ("value" in given):
        raise WorkflowError(path, "needs exactly one of from or value")
    if "value" in given:
        if "optional" in given:
            raise WorkflowError(f"{path}.optional", "only a from binding can be optional")
        return Binding(value=_literal(given["value"], f"{path}.value"))
    optional = given.get("optional", False)
    if not isinstance(optional, bool):
        raise WorkflowError(f"{path}.optional", "must be true or false")
    source = given["from"]
    if source == TURN_QUESTION:
        return Binding(source=source, optional=optional)
    shape = f"must be {TURN_QUESTION!r} or '<step id>.<output name>'"
    if not isinstance(source, str):
        raise WorkflowError(f"{path}.from", shape)
    step_id, dot, output = source.partition(".")
    if step_id == TURN:
        raise WorkflowError(f"{path}.from", f"unknown turn value {source!r}; only {TURN_QUESTION!r}")
    if not dot or not STEP_ID.fullmatch(step_id) or not NAME.fullmatch(output):
        raise WorkflowError(f"{path}.from", f"{source!r}: {shape}")
    return Binding(source=source, optional=optional)


def _condition(value: Any, path: str, outputs: Mapping[str, OutputType]) -> Condition:
    given = _keys(value, path, ("output", "equals", "contains"), ("output",))
    output = given["output"]
    if not isinstance(output, str) or output not in outputs:
        declared = ", ".join(outputs) or "none"
        raise WorkflowError(
            f"{path}.output", f"the step declares no output {output!r} (it declares: {declared})"
        )
    ops = [op for op in ("equals", "contains") if op in given]
    if len(ops) != 1:
        raise WorkflowError(path, "needs exactly one of equals or contains")
    kind = outputs[output]
    if "contains" in given:
        text = given["contains"]
        if kind is not OutputType.TEXT:
            raise WorkflowError(f"{path}.contains", f"needs a text output; {output!r} is {kind.value}")
        if not isinstance(text, str) or not text:
            raise WorkflowError(f"{path}.contains", "must be a non-empty string")
        return Condition(output, "contains", _literal(text, f"{path}.contains"))
    expected = given["equals"]
    fits = {
        OutputType.TEXT: isinstance(expected, str),
        OutputType.NUMBER: isinstance(expected, int | float) and not isinstance(expected, bool),
        OutputType.BOOLEAN: isinstance(expected, bool),
        OutputType.JSON: True,
    }[kind]
    if not fits:
        raise WorkflowError(f"{path}.equals", f"{output!r} is {kind.value}; {expected!r} can never equal it")
    return Condition(output, "equals", _literal(expected, f"{path}.equals"))


def _step(value: Any, path: str) -> Step:
    given = _keys(
        value, path, ("id", "kind", "agent_id", "tool_name", "inputs", "outputs", "next"), ("id", "kind")
    )
    step_id = given["id"]
    if not isinstance(step_id, str) or not STEP_ID.fullmatch(step_id):
        raise WorkflowError(f"{path}.id", f"{step_id!r} must match {STEP_ID.pattern}")
    if step_id == TURN:
        raise WorkflowError(f"{path}.id", f"{TURN!r} is reserved (bindings read {TURN_QUESTION})")
    if given["kind"] not in tuple(StepKind):
        raise WorkflowError(f"{path}.kind", f"must be one of {', '.join(StepKind)}")
    kind = StepKind(given["kind"])
    agent_id = tool_name = ""
    if kind is StepKind.AGENT:
        if "tool_name" in given:
            raise WorkflowError(f"{path}.tool_name", "an agent step has no tool_name")
        if "agent_id" not in given:
            raise WorkflowError(f"{path}.agent_id", "required for an agent step")
        agent_id = _text(given["agent_id"], f"{path}.agent_id", MAX_ID_CHARS)
    else:
        if "agent_id" in given:
            raise WorkflowError(f"{path}.agent_id", "a tool step has no agent_id")
        if "tool_name" not in given:
            raise WorkflowError(f"{path}.tool_name", "required for a tool step")
        tool_name = _text(given["tool_name"], f"{path}.tool_name", MAX_ID_CHARS)

    outputs: dict[str, OutputType] = {}
    for name, type_name in _names(
        given.get("outputs", {}), f"{path}.outputs", "outputs", MAX_OUTPUTS_PER_STEP
    ).items():
        if type_name not in tuple(OutputType):
            raise WorkflowError(
                f"{path}.outputs.{name}", f"unknown type {type_name!r}; one of {', '.join(OutputType)}"
            )
        outputs[name] = OutputType(type_name)
    inputs = {
        name: _binding(binding, f"{path}.inputs.{name}")
        for name, binding in _names(
            given.get("inputs", {}), f"{path}.inputs", "inputs", MAX_INPUTS_PER_STEP
        ).items()
    }
    edges_given = given.get("next", [])
    if not isinstance(edges_given, list):
        raise WorkflowError(f"{path}.next", "must be a list of edges")
    if len(edges_given) > MAX_EDGES_PER_STEP:
        raise WorkflowError(f"{path}.next", f"{len(edges_given)} edges; the limit is {MAX_EDGES_PER_STEP}")
    edges = []
    for n, edge_value in enumerate(edges_given):
        where = f"{path}.next[{n}]"
        edge = _keys(edge_value, where, ("to", "when"), ("to",))
        if not isinstance(edge["to"], str) or not edge["to"]:
            raise WorkflowError(f"{where}.to", "must be a step id")
        when = _condition(edge["when"], f"{where}.when", outputs) if "when" in edge else None
        edges.append(Edge(edge["to"], when))
    return Step(
        step_id,
        kind,
        agent_id,
        tool_name,
        MappingProxyType(inputs),
        MappingProxyType(outputs),
        tuple(edges),
    )


# --- the graph --------------------------------------------------------------------------------------


def _successors(workflow: Workflow) -> dict[str, list[str]]:
    return {step.id: list(dict.fromkeys(edge.to for edge in step.next)) for step in workflow.steps}


def _breadth_first(successors: Mapping[str, Sequence[str]], first: Iterable[str]) -> list[str]:
    """Steps reachable from ``first`` (included), nearest first, edges in their listed order."""
    seen = list(dict.fromkeys(first))
    queue = deque(seen)
    while queue:
        for target in successors[queue.popleft()]:
            if target not in seen:
                seen.append(target)
                queue.append(target)
    return seen


def _find_cycle(successors: Mapping[str, Sequence[str]], among: Sequence[str]) -> list[str] | None:
    """One cycle using only the steps ``among`` (in their order), as ``[a, b, …, a]``; None when acyclic."""
    allowed = set(among)
    done: set[str] = set()
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        stack.append(node)
        for target in successors[node]:
            if target not in allowed or target in done:
                continue
            if target in stack:
                return [*stack[stack.index(target) :], target]
            found = visit(target)
            if found:
                return found
        stack.pop()
        done.add(node)
        return None

    for node in among:
        if node not in done:
            found = visit(node)
            if found:
                return found
    return None


def _dominators(workflow: Workflow, successors: Mapping[str, Sequence[str]]) -> dict[str, set[str]]:
    """For each step, the steps on every path from start to it (itself included)."""
    ids = [step.id for step in workflow.steps]
    predecessors: dict[str, list[str]] = {node: [] for node in ids}
    for node, targets in successors.items():
        for target in targets:
            predecessors[target].append(node)
    dominators = {node: set(ids) for node in ids}
    dominators[workflow.start] = {workflow.start}
    changed = True
    while changed:
        changed = False
        for node in ids:
            if node == workflow.start:
                continue
            common = set.intersection(*(dominators[p] for p in predecessors[node])) | {node}
            if common != dominators[node]:
                dominators[node], changed = common, True
    return dominators


def _arrows(cycle: Sequence[str]) -> str:
    return " → ".join(repr(node) for node in cycle)


def _check_graph(workflow: Workflow, explicit_iterations: bool) -> None:
    where = {step.id: f"config.steps[{n}]" for n, step in enumerate(workflow.steps)}
    for step in workflow.steps:
        for n, edge in enumerate(step.next):
            if edge.to not in where:
                raise WorkflowError(f"{where[step.id]}.next[{n}]", f"names no step: {edge.to!r}")
    successors = _successors(workflow)
    reachable = set(_breadth_first(successors, [workflow.start]))
    for step in workflow.steps:
        if step.id not in reachable:
            raise WorkflowError(
                where[step.id], f"step {step.id!r} is unreachable from start {workflow.start!r}"
            )
    if all(step.next for step in workflow.steps):
        raise WorkflowError("config.steps", "no step ends the workflow: every step has a next")

    cycle = _find_cycle(successors, list(where))
    if cycle and (not explicit_iterations or workflow.max_iterations < 2):
        raise WorkflowError(
            "config.max_iterations",
            f"steps {_arrows(cycle)} form a cycle; a workflow with a cycle needs max_iterations "
            f"between 2 and {MAX_ITERATIONS} (how often a step may run in one turn)",
        )
    # Every cycle passes a step with a conditional edge ⇔ the steps without one form no cycle.
    unconditional = [step.id for step in workflow.steps if all(edge.when is None for edge in step.next)]
    spinning = _find_cycle(successors, unconditional)
    if spinning:
        raise WorkflowError(
            f"{where[spinning[0]]}.next",
            f"steps {_arrows(spinning)} form a cycle with no conditional edge on or out of it; "
            "it would run until max_iterations",
        )

    after = {node: set(_breadth_first(successors, successors[node])) for node in where}
    dominators = _dominators(workflow, successors)
    for step in workflow.steps:
        for name, binding in step.inputs.items():
            upstream = binding.upstream
            if upstream is None:
                continue
            path = f"{where[step.id]}.inputs.{name}"
            source, output = upstream
            if source not in where:
                raise WorkflowError(path, f"{binding.source!r}: names no step {source!r}")
            declared = workflow.step(source).outputs
            if output not in declared:
                raise WorkflowError(
                    path,
                    f"{binding.source!r}: step {source!r} declares no output {output!r} "
                    f"(it declares: {', '.join(declared) or 'none'})",
                )
            if step.id not in after[source]:
                raise WorkflowError(
                    path, f"{binding.source!r}: step {source!r} never runs before {step.id!r}"
                )
            if not binding.optional and (source == step.id or source not in dominators[step.id]):
                raise WorkflowError(
                    path,
                    f"{binding.source!r}: step {source!r} is not on every path from start to {step.id!r}, "
                    'so it may not have run; mark the input "optional": true',
                )


# --- the public functions ---------------------------------------------------------------------------


def parse_workflow(config: Mapping[str, Any]) -> Workflow:
    """The workflow ``config`` describes; :class:`WorkflowError` names the first thing wrong."""
    given = _keys(config, "config", ("start", "max_iterations", "steps"), ("steps",))
    raw_steps = given["steps"]
    if not isinstance(raw_steps, list) or not raw_steps:
        raise WorkflowError("config.steps", "must be a non-empty list of steps")
    if len(raw_steps) > MAX_STEPS:
        raise WorkflowError("config.steps", f"{len(raw_steps)} steps; the limit is {MAX_STEPS}")
    steps: list[Step] = []
    for n, raw in enumerate(raw_steps):
        step = _step(raw, f"config.steps[{n}]")
        for m, earlier in enumerate(steps):
            if earlier.id == step.id:
                raise WorkflowError(
                    f"config.steps[{n}].id", f"{step.id!r} is already the id of config.steps[{m}]"
                )
        steps.append(step)
    explicit_iterations = "max_iterations" in given
    max_iterations = (
        _max_iterations(given["max_iterations"], "config.max_iterations")
        if explicit_iterations
        else DEFAULT_MAX_ITERATIONS
    )
    start = given.get("start", steps[0].id)
    if not isinstance(start, str) or start not in {step.id for step in steps}:
        raise WorkflowError("config.start", f"names no step: {start!r}")
    workflow = Workflow(tuple(steps), start, max_iterations)
    _check_graph(workflow, explicit_iterations)
    _check_runs(workflow)
    return workflow


def _check_runs(workflow: Workflow) -> None:
    """How a turn runs a workflow: from each step it takes the first edge whose condition holds, and
    the step where it ends writes the answer. So a step whose edges have conditions ends them with one
    without (when none holds, the workflow must still go somewhere), and a step without edges is an
    agent step."""
    for n, step in enumerate(workflow.steps):
        if not step.next and step.kind is not StepKind.AGENT:
            raise WorkflowError(
                f"config.steps[{n}].kind",
                "the workflow ends at this step, so it must be an agent step (an agent writes the answer)",
            )
        if step.next and step.next[-1].when is not None:
            raise WorkflowError(
                f"config.steps[{n}].next",
                "the last edge must have no `when`: it is taken when no condition before it holds",
            )


def _in_run_order(workflow: Workflow) -> list[Step]:
    """Steps in the order they can first run: nearest to start first, edges in their listed order."""
    return [workflow.step(node) for node in _breadth_first(_successors(workflow), [workflow.start])]


def agent_ids(workflow: Workflow) -> list[str]:
    """The agents the workflow runs, in the order they can first run, once each."""
    return list(dict.fromkeys(s.agent_id for s in _in_run_order(workflow) if s.kind is StepKind.AGENT))


def tool_names(workflow: Workflow) -> list[str]:
    """The tools the workflow calls, in the order they can first run, once each."""
    return list(dict.fromkeys(s.tool_name for s in _in_run_order(workflow) if s.kind is StepKind.TOOL))


def next_steps(workflow: Workflow, step_id: str, outputs: Mapping[str, Any]) -> list[str]:
    """After ``step_id`` produced ``outputs``: the targets of its edges whose condition holds, in the
    edges' order, once each. Empty: the workflow ends here. A turn takes the first
    (:mod:`~knowsphere_conversation.domain.workflow_run`)."""
    step = workflow.step(step_id)
    chosen = (edge.to for edge in step.next if edge.when is None or edge.when.holds(outputs))
    return list(dict.fromkeys(chosen))


def resolve_inputs(
    workflow: Workflow, step_id: str, question: str, produced: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The values of ``step_id``'s inputs: ``question`` for ``turn.question``, the latest outputs in
    ``produced`` (step id → its outputs) for step bindings, a copy of each literal. An optional input
    whose source has not produced is left out; a required one raises :class:`InputUnavailable`."""
    step = workflow.step(step_id)
    values: dict[str, Any] = {}
    for name, binding in step.inputs.items():
        upstream = binding.upstream
        if binding.source is None:
            values[name] = copy.deepcopy(binding.value)
        elif upstream is None:
            values[name] = question
        elif upstream[1] in produced.get(upstream[0], {}):
            values[name] = produced[upstream[0]][upstream[1]]
        elif not binding.optional:
            raise InputUnavailable(step_id, name, binding.source)
    return values


__all__ = [
    "MAX_EDGES_PER_STEP",
    "MAX_INPUTS_PER_STEP",
    "MAX_ITERATIONS",
    "MAX_LITERAL_BYTES",
    "MAX_OUTPUTS_PER_STEP",
    "MAX_STEPS",
    "Binding",
    "Condition",
    "Edge",
    "InputUnavailable",
    "OutputType",
    "Step",
    "StepKind",
    "Workflow",
    "WorkflowError",
    "agent_ids",
    "next_steps",
    "parse_workflow",
    "resolve_inputs",
    "tool_names",
]
