"""The Workflow mode's configuration: what parses, what each rule refuses (with the field path a user
sees in the API's INVALID_ARGUMENT), and the routing and input choices a turn makes from it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowsphere_conversation.domain.workflow import (
    MAX_EDGES_PER_STEP,
    MAX_INPUTS_PER_STEP,
    MAX_LITERAL_BYTES,
    MAX_OUTPUTS_PER_STEP,
    MAX_STEPS,
    InputUnavailable,
    WorkflowError,
    agent_ids,
    next_steps,
    parse_workflow,
    resolve_inputs,
    tool_names,
)

EXAMPLE: dict[str, Any] = {
    "start": "classify",
    "max_iterations": 2,
    "steps": [
        {
            "id": "classify",
            "kind": "agent",
            "agent_id": "a1",
            "inputs": {"question": {"from": "turn.question"}},
            "outputs": {"answer": "text"},
            "next": [{"to": "lookup", "when": {"output": "answer", "contains": "order"}}, {"to": "reply"}],
        },
        {
            "id": "lookup",
            "kind": "tool",
            "tool_name": "doc_retrieval",
            "inputs": {"query": {"from": "classify.answer"}},
            "outputs": {"result": "text"},
            "next": [{"to": "reply"}],
        },
        {
            "id": "reply",
            "kind": "agent",
            "agent_id": "a2",
            "inputs": {
                "question": {"from": "turn.question"},
                "notes": {"from": "lookup.result", "optional": True},
            },
            "outputs": {"answer": "text"},
        },
    ],
}


def example() -> dict[str, Any]:
    return copy.deepcopy(EXAMPLE)


def agent(step_id: str, *, to: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    step: dict[str, Any] = {"id": step_id, "kind": "agent", "agent_id": f"agent-{step_id}"}
    step["outputs"] = extra.pop("outputs", {"answer": "text"})
    if to:
        step["next"] = to
    step.update(extra)
    return step


def refused(config: Any) -> WorkflowError:
    with pytest.raises(WorkflowError) as caught:
        parse_workflow(config)
    return caught.value


# --- the example ------------------------------------------------------------------------------------


def test_the_example_parses_and_lists_its_agents_and_tools() -> None:
    workflow = parse_workflow(example())

    assert workflow.start == "classify"
    assert workflow.max_iterations == 2
    assert [step.id for step in workflow.steps] == ["classify", "lookup", "reply"]
    assert agent_ids(workflow) == ["a1", "a2"]
    assert tool_names(workflow) == ["doc_retrieval"]


def test_next_steps_follow_the_edges_whose_condition_holds_in_order() -> None:
    workflow = parse_workflow(example())

    assert next_steps(workflow, "classify", {"answer": "Where is my ORDER 42?"}) == ["lookup", "reply"]
    assert next_steps(workflow, "classify", {"answer": "just saying hello"}) == ["reply"]
    assert next_steps(workflow, "classify", {}) == ["reply"]
    assert next_steps(workflow, "lookup", {"result": "found"}) == ["reply"]
    assert next_steps(workflow, "reply", {"answer": "done"}) == []


def test_resolve_inputs_fills_the_question_and_upstream_outputs() -> None:
    workflow = parse_workflow(example())
    question = "Where is my order?"

    assert resolve_inputs(workflow, "classify", question, {}) == {"question": question}
    produced = {"classify": {"answer": "order status"}, "lookup": {"result": "shipped on Monday"}}
    assert resolve_inputs(workflow, "lookup", question, produced) == {"query": "order status"}
    assert resolve_inputs(workflow, "reply", question, produced) == {
        "question": question,
        "notes": "shipped on Monday",
    }


def test_an_optional_input_whose_step_did_not_run_is_left_out() -> None:
    workflow = parse_workflow(example())

    inputs = resolve_inputs(workflow, "reply", "hello", {"classify": {"answer": "greeting"}})

    assert inputs == {"question": "hello"}


def test_a_required_input_not_produced_is_an_error_naming_it() -> None:
    workflow = parse_workflow(example())

    with pytest.raises(InputUnavailable) as caught:
        resolve_inputs(workflow, "lookup", "q", {"classify": {}})

    assert (caught.value.step_id, caught.value.input_name, caught.value.source) == (
        "lookup",
        "query",
        "classify.answer",
    )


def test_literal_inputs_are_passed_as_copies() -> None:
    config = {"steps": [agent("only", inputs={"filters": {"value": {"lang": ["en"]}}})]}
    workflow = parse_workflow(config)

    first = resolve_inputs(workflow, "only", "q", {})
    first["filters"]["lang"].append("de")

    assert resolve_inputs(workflow, "only", "q", {}) == {"filters": {"lang": ["en"]}}


def test_defaults_start_at_the_first_step_and_run_each_step_once() -> None:
    workflow = parse_workflow({"steps": [agent("first", to=[{"to": "second"}]), agent("second")]})

    assert workflow.start == "first"
    assert workflow.max_iterations == 1


def test_agents_are_listed_in_the_order_they_can_first_run() -> None:
    config: dict[str, Any] = {
        "start": "b",
        "steps": [
            agent("a", agent_id="x"),
            agent("b", agent_id="y", to=[{"to": "c"}]),
            agent("c", to=[{"to": "a"}]),
        ],
    }
    config["steps"][2]["agent_id"] = "y"

    assert agent_ids(parse_workflow(config)) == ["y", "x"]


def test_equals_conditions_compare_typed_values() -> None:
    config = {
        "steps": [
            agent(
                "check",
                outputs={"ok": "boolean", "score": "number"},
                to=[
                    {"to": "pass", "when": {"output": "ok", "equals": True}},
                    {"to": "high", "when": {"output": "score", "equals": 1}},
                    {"to": "other"},
                ],
            ),
            agent("pass"),
            agent("high"),
            agent("other"),
        ]
    }
    workflow = parse_workflow(config)

    assert next_steps(workflow, "check", {"ok": True, "score": 1.0}) == ["pass", "high", "other"]
    # 1 is not True, and True is not 1, although Python says they are equal.
    assert next_steps(workflow, "check", {"ok": 1, "score": True}) == ["other"]


def test_a_cycle_with_max_iterations_and_a_conditional_exit_is_accepted() -> None:
    config: dict[str, Any] = {
        "max_iterations": 3,
        "steps": [
            agent("draft", to=[{"to": "review"}]),
            agent(
                "review",
                outputs={"verdict": "text"},
                inputs={"draft": {"from": "draft.answer"}},
                to=[
                    {"to": "draft", "when": {"output": "verdict", "equals": "revise"}},
                    {"to": "publish"},
                ],
            ),
            agent("publish", inputs={"text": {"from": "draft.answer"}}),
        ],
    }
    config["steps"][0]["inputs"] = {"feedback": {"from": "review.verdict", "optional": True}}

    workflow = parse_workflow(config)

    assert workflow.max_iterations == 3
    # A turn takes the first edge that holds: back to the draft while the review asks for it.
    assert next_steps(workflow, "review", {"verdict": "revise"}) == ["draft", "publish"]
    assert next_steps(workflow, "review", {"verdict": "ok"}) == ["publish"]


def test_max_iterations_from_a_protobuf_struct_arrives_as_a_float() -> None:
    config = example()
    config["max_iterations"] = 2.0

    assert parse_workflow(config).max_iterations == 2


# --- one test per rule ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "reason"),
    [
        (None, "must be a non-empty list of steps"),
        ([], "must be a non-empty list of steps"),
        ({"id": "a"}, "must be a non-empty list of steps"),
    ],
)
def test_steps_must_be_a_non_empty_list(steps: Any, reason: str) -> None:
    error = refused({"steps": steps})

    assert (error.field, error.reason) == ("config.steps", reason)


def test_steps_are_required() -> None:
    assert refused({"start": "a"}).field == "config.steps"


def test_at_most_32_steps() -> None:
    chain = [agent(f"s{n}", to=[{"to": f"s{n + 1}"}]) for n in range(MAX_STEPS)] + [agent(f"s{MAX_STEPS}")]

    error = refused({"steps": chain})

    assert (error.field, error.reason) == ("config.steps", f"{MAX_STEPS + 1} steps; the limit is {MAX_STEPS}")
    assert parse_workflow({"steps": chain[1:]}).start == "s1"


def test_step_ids_are_unique() -> None:
    error = refused({"steps": [agent("a", to=[{"to": "b"}]), agent("b"), agent("a")]})

    assert error.field == "config.steps[2].id"
    assert "config.steps[0]" in error.reason


@pytest.mark.parametrize("step_id", ["Classify", "1st", "has space", "a.b", "", "x" * 65, 7])
def test_step_ids_follow_the_pattern(step_id: Any) -> None:
    assert (
        refused({"steps": [agent("ok", to=[{"to": "b"}]), agent("b", id=step_id)]}).field
        == "config.steps[1].id"
    )


def test_turn_is_not_a_step_id() -> None:
    assert refused({"steps": [agent("turn")]}).field == "config.steps[0].id"


def test_start_names_a_step() -> None:
    error = refused({"start": "nowhere", "steps": [agent("a")]})

    assert (error.field, error.reason) == ("config.start", "names no step: 'nowhere'")


def test_kind_is_agent_or_tool() -> None:
    assert refused({"steps": [agent("a", kind="human")]}).field == "config.steps[0].kind"
    assert refused({"steps": [{"id": "a"}]}).field == "config.steps[0].kind"


def test_an_agent_step_needs_an_agent_id_of_1_to_128_characters() -> None:
    missing = agent("a")
    del missing["agent_id"]

    assert refused({"steps": [missing]}).field == "config.steps[0].agent_id"
    assert refused({"steps": [agent("a", agent_id="")]}).field == "config.steps[0].agent_id"
    error = refused({"steps": [agent("a", agent_id="x" * 129)]})
    assert (error.field, error.reason) == ("config.steps[0].agent_id", "129 characters; the limit is 128")
    assert parse_workflow({"steps": [agent("a", agent_id="x" * 128)]}).steps[0].agent_id == "x" * 128


def test_an_agent_step_has_no_tool_name() -> None:
    assert refused({"steps": [agent("a", tool_name="search")]}).field == "config.steps[0].tool_name"


def test_a_tool_step_needs_a_tool_name_and_no_agent_id() -> None:
    tool = {"id": "t", "kind": "tool"}

    assert refused({"steps": [tool]}).field == "config.steps[0].tool_name"
    assert (
        refused({"steps": [{**tool, "tool_name": "x", "agent_id": "a1"}]}).field == "config.steps[0].agent_id"
    )


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda c: c.update(mode="fast"), "config.mode"),
        (lambda c: c["steps"][1].update(retries=3), "config.steps[1].retries"),
        (
            lambda c: c["steps"][0]["inputs"]["question"].update(default="hi"),
            "config.steps[0].inputs.question.default",
        ),
        (lambda c: c["steps"][0]["next"][1].update(weight=1), "config.steps[0].next[1].weight"),
        (lambda c: c["steps"][0]["next"][0]["when"].update(regex="x"), "config.steps[0].next[0].when.regex"),
    ],
)
def test_unknown_keys_are_refused_by_name(mutate: Any, field: str) -> None:
    config = example()
    mutate(config)

    error = refused(config)

    assert error.field == field
    assert error.reason.startswith("unknown key")


def test_an_edge_to_no_step_is_refused() -> None:
    config = example()
    config["steps"][1]["next"] = [{"to": "summarise"}]

    error = refused(config)

    assert (error.field, error.reason) == ("config.steps[1].next[0]", "names no step: 'summarise'")


def test_every_step_is_reachable_from_start() -> None:
    config = example()
    config["steps"].append(agent("orphan"))

    error = refused(config)

    assert (error.field, error.reason) == (
        "config.steps[3]",
        "step 'orphan' is unreachable from start 'classify'",
    )


def test_some_step_ends_the_workflow() -> None:
    config = {
        "max_iterations": 2,
        "steps": [
            agent("a", to=[{"to": "b"}]),
            agent("b", to=[{"to": "a", "when": {"output": "answer", "equals": "again"}}]),
        ],
    }

    error = refused(config)

    assert (error.field, error.reason) == ("config.steps", "no step ends the workflow: every step has a next")


def test_an_unknown_output_type_is_refused() -> None:
    config = example()
    config["steps"][1]["outputs"]["result"] = "string"

    error = refused(config)

    assert error.field == "config.steps[1].outputs.result"
    assert error.reason.startswith("unknown type 'string'")


def test_an_input_from_no_step_is_refused() -> None:
    config = example()
    config["steps"][2]["inputs"]["notes"] = {"from": "search.result", "optional": True}

    assert refused(config).field == "config.steps[2].inputs.notes"


def test_an_input_from_an_undeclared_output_is_refused() -> None:
    config = example()
    config["steps"][1]["inputs"]["query"] = {"from": "classify.summary"}

    error = refused(config)

    assert error.field == "config.steps[1].inputs.query"
    assert "declares no output 'summary'" in error.reason


def test_an_input_from_a_step_that_never_runs_before_is_refused_even_if_optional() -> None:
    config = example()
    config["steps"][0]["inputs"]["previous"] = {"from": "reply.answer", "optional": True}

    error = refused(config)

    assert (error.field, error.reason) == (
        "config.steps[0].inputs.previous",
        "'reply.answer': step 'reply' never runs before 'classify'",
    )


def test_a_required_input_from_a_step_not_on_every_path_is_refused() -> None:
    config = example()
    config["steps"][2]["inputs"]["notes"] = {"from": "lookup.result"}

    error = refused(config)

    assert error.field == "config.steps[2].inputs.notes"
    assert "not on every path from start to 'reply'" in error.reason


def test_a_step_reading_its_own_previous_output_in_a_cycle_must_mark_it_optional() -> None:
    config: dict[str, Any] = {
        "max_iterations": 3,
        "steps": [
            agent(
                "loop",
                inputs={"last": {"from": "loop.answer"}},
                to=[{"to": "loop", "when": {"output": "answer", "contains": "more"}}, {"to": "end"}],
            ),
            agent("end"),
        ],
    }
    assert refused(config).field == "config.steps[0].inputs.last"

    config["steps"][0]["inputs"]["last"]["optional"] = True
    assert parse_workflow(config).max_iterations == 3


def test_a_cycle_needs_max_iterations_given_above_1() -> None:
    config = example()
    config["steps"][2]["next"] = [
        {"to": "classify", "when": {"output": "answer", "contains": "again"}},
        {"to": "end"},
    ]
    config["steps"].append(agent("end"))
    del config["max_iterations"]

    error = refused(config)

    assert error.field == "config.max_iterations"
    assert "'classify' → 'lookup' → 'reply' → 'classify'" in error.reason
    config["max_iterations"] = 1
    assert refused(config).field == "config.max_iterations"
    config["max_iterations"] = 2
    assert parse_workflow(config).max_iterations == 2


def test_a_cycle_with_no_conditional_edge_on_or_out_of_it_is_refused() -> None:
    config: dict[str, Any] = {
        "max_iterations": 5,
        "steps": [
            agent("a", to=[{"to": "b"}]),
            agent("b", to=[{"to": "c"}]),
            agent("c", to=[{"to": "b"}, {"to": "d"}]),
            agent("d"),
        ],
    }

    error = refused(config)

    assert error.field == "config.steps[1].next"
    assert error.reason.startswith("steps 'b' → 'c' → 'b' form a cycle with no conditional edge")
    # A conditional edge on the cycle, with the way out as its default, is enough.
    config["steps"][2]["next"][0]["when"] = {"output": "answer", "contains": "again"}
    assert parse_workflow(config).max_iterations == 5


@pytest.mark.parametrize("value", [0, 21, 2.5, "2", True])
def test_max_iterations_is_a_whole_number_from_1_to_20(value: Any) -> None:
    config = example()
    config["max_iterations"] = value

    assert refused(config).field == "config.max_iterations"


def test_a_condition_reads_an_output_the_step_declares() -> None:
    config = example()
    config["steps"][0]["next"][0]["when"] = {"output": "intent", "contains": "order"}

    error = refused(config)

    assert (error.field, error.reason) == (
        "config.steps[0].next[0].when.output",
        "the step declares no output 'intent' (it declares: answer)",
    )


@pytest.mark.parametrize("when", [{"output": "answer"}, {"output": "answer", "equals": "x", "contains": "x"}])
def test_a_condition_has_exactly_one_of_equals_or_contains(when: dict[str, Any]) -> None:
    config = example()
    config["steps"][0]["next"][0]["when"] = when

    error = refused(config)

    assert (error.field, error.reason) == (
        "config.steps[0].next[0].when",
        "needs exactly one of equals or contains",
    )


def test_a_condition_that_can_never_hold_is_refused() -> None:
    config = {
        "steps": [
            agent("a", outputs={"n": "number"}, to=[{"to": "b", "when": {"output": "n", "equals": "1"}}]),
            agent("b"),
        ]
    }
    assert refused(config).field == "config.steps[0].next[0].when.equals"

    config["steps"][0]["next"][0]["when"] = {"output": "n", "contains": "1"}
    assert refused(config).field == "config.steps[0].next[0].when.contains"


def test_at_most_8_edges_per_step() -> None:
    targets = [agent(f"t{n}") for n in range(MAX_EDGES_PER_STEP + 1)]
    edges = [{"to": step["id"]} for step in targets]

    error = refused({"steps": [agent("fan", to=edges), *targets]})

    assert (error.field, error.reason) == ("config.steps[0].next", "9 edges; the limit is 8")
    assert parse_workflow({"steps": [agent("fan", to=edges[:-1]), *targets[:-1]]}).start == "fan"


def test_at_most_16_inputs_per_step() -> None:
    inputs = {f"in{n}": {"value": n} for n in range(MAX_INPUTS_PER_STEP + 1)}

    error = refused({"steps": [agent("a", inputs=inputs)]})

    assert (error.field, error.reason) == ("config.steps[0].inputs", "17 inputs; the limit is 16")


def test_at_most_16_outputs_per_step() -> None:
    outputs = {f"out{n}": "text" for n in range(MAX_OUTPUTS_PER_STEP + 1)}

    error = refused({"steps": [agent("a", outputs=outputs)]})

    assert (error.field, error.reason) == ("config.steps[0].outputs", "17 outputs; the limit is 16")


def test_literal_values_are_at_most_4_kib_serialized() -> None:
    # Serialized with its quotes: 4,096 bytes exactly.
    fits = "x" * (MAX_LITERAL_BYTES - 2)
    assert parse_workflow({"steps": [agent("a", inputs={"big": {"value": fits}})]}).start == "a"

    error = refused({"steps": [agent("a", inputs={"big": {"value": "é" * 2048}})]})

    assert (error.field, error.reason) == (
        "config.steps[0].inputs.big.value",
        "4098 bytes serialized; the limit is 4096",
    )


@pytest.mark.parametrize(
    ("binding", "field"),
    [
        ({"from": "turn.user"}, "config.steps[0].inputs.x.from"),
        ({"from": "classify"}, "config.steps[0].inputs.x.from"),
        ({"from": "classify.answer.text"}, "config.steps[0].inputs.x.from"),
        ({"value": 1, "optional": True}, "config.steps[0].inputs.x.optional"),
        ({"from": "turn.question", "value": 1}, "config.steps[0].inputs.x"),
        ({}, "config.steps[0].inputs.x"),
        ({"from": "turn.question", "optional": "yes"}, "config.steps[0].inputs.x.optional"),
    ],
)
def test_bindings_have_one_of_the_three_shapes(binding: dict[str, Any], field: str) -> None:
    config = example()
    config["steps"][0]["inputs"]["x"] = binding

    assert refused(config).field == field


def test_input_and_output_names_cannot_contain_a_dot() -> None:
    config = example()
    config["steps"][1]["outputs"] = {"doc.result": "text"}

    error = refused(config)

    assert error.field == "config.steps[1].outputs"
    assert "'doc.result'" in error.reason


def test_the_config_must_be_an_object() -> None:
    assert refused(["steps"]).field == "config"


# --- property: any DAG built from valid pieces parses -----------------------------------------------


@st.composite
def dags(draw: st.DrawFn) -> dict[str, Any]:
    """Edges only from a step to a later one, each step after the first given a parent (so every step is
    reachable from the first and the last ends) and maybe more edges, some conditional; each step reads
    the question, the start step's output and its parent's (optional unless the parent is the start)."""
    count = draw(st.integers(1, 12))
    ids = [f"s{n}" for n in range(count)]
    steps: list[dict[str, Any]] = []
    for n, step_id in enumerate(ids):
        step: dict[str, Any]
        if draw(st.booleans()):
            step = {"id": step_id, "kind": "agent", "agent_id": draw(st.sampled_from(["a1", "a2", "a3"]))}
        else:
            step = {"id": step_id, "kind": "tool", "tool_name": draw(st.sampled_from(["search", "calc"]))}
        step["outputs"] = {"out": "text"}
        step["inputs"] = {"question": {"from": "turn.question"}}
        if n > 0:
            step["inputs"]["first"] = {"from": "s0.out"}
        steps.append(step)

    def add_edge(source: int, target: int) -> None:
        edge: dict[str, Any] = {"to": ids[target]}
        if draw(st.booleans()):
            edge["when"] = {"output": "out", "contains": draw(st.sampled_from(["yes", "no"]))}
        steps[source].setdefault("next", []).append(edge)

    for n in range(1, count):
        open_ = [m for m in range(n) if len(steps[m].get("next", [])) < MAX_EDGES_PER_STEP]
        parent = draw(st.sampled_from(open_))
        add_edge(parent, n)
        steps[n]["inputs"]["parent"] = {
            "from": f"{ids[parent]}.out",
            "optional": parent != 0 or draw(st.booleans()),
        }
    for m in range(count):
        for target in draw(st.lists(st.integers(m + 1, count), max_size=3, unique=True)):
            if target < count and len(steps[m].get("next", [])) < MAX_EDGES_PER_STEP:
                add_edge(m, target)
    for step in steps:
        # How a turn runs them: a step's last edge is its default, and where the workflow ends an agent
        # writes the answer.
        if step.get("next"):
            step["next"][-1].pop("when", None)
        elif step["kind"] == "tool":
            del step["tool_name"]
            step.update(kind="agent", agent_id="a1")
    return {"steps": steps}


@settings(max_examples=200, deadline=None)
@given(dags())
def test_any_dag_from_valid_pieces_parses(config: dict[str, Any]) -> None:
    workflow = parse_workflow(config)

    assert [step.id for step in workflow.steps] == [step["id"] for step in config["steps"]]
    assert set(agent_ids(workflow)) == {s["agent_id"] for s in config["steps"] if s["kind"] == "agent"}
    assert set(tool_names(workflow)) == {s["tool_name"] for s in config["steps"] if s["kind"] == "tool"}
    for step in config["steps"]:
        edges = step.get("next", [])
        unconditional = [edge["to"] for edge in edges if "when" not in edge]
        assert next_steps(workflow, step["id"], {}) == list(dict.fromkeys(unconditional))
        assert next_steps(workflow, step["id"], {"out": "YES"}) == list(
            dict.fromkeys(
                edge["to"] for edge in edges if edge.get("when", {}).get("contains", "yes") == "yes"
            )
        )


@settings(max_examples=100, deadline=None)
@given(dags(), st.data())
def test_a_dangling_edge_anywhere_is_named(config: dict[str, Any], data: st.DataObject) -> None:
    with_edges = [n for n, step in enumerate(config["steps"]) if step.get("next")]
    if not with_edges:
        config["steps"][0]["next"] = [{"to": "missing"}]
        where = "config.steps[0].next[0]"
    else:
        n = data.draw(st.sampled_from(with_edges))
        k = data.draw(st.integers(0, len(config["steps"][n]["next"]) - 1))
        config["steps"][n]["next"][k]["to"] = "missing"
        where = f"config.steps[{n}].next[{k}]"

    error = refused(config)

    assert (error.field, error.reason) == (where, "names no step: 'missing'")


def test_a_step_with_conditional_edges_ends_with_a_default_and_the_workflow_ends_at_an_agent() -> None:
    config = example()
    config["steps"][0]["next"] = [{"to": "lookup", "when": {"output": "answer", "contains": "order"}}]
    assert (refused(config).field, refused(config).reason.startswith("the last edge must have no")) == (
        "config.steps[0].next",
        True,
    )
    config = example()
    del config["steps"][1]["next"]
    config["steps"][0]["next"] = [{"to": "lookup"}]
    config["steps"][2]["inputs"] = {"question": {"from": "turn.question"}}
    config["steps"] = config["steps"][:2]
    assert refused(config).field == "config.steps[1].kind"
