"""Decide: classification over a fixed label set with one model call.

Logprobs path (the provider table says the provider returns logprobs, and the request does not ask
for JSON): the labels are shown as one-letter options A, B, C … with their descriptions, the model is
asked for one letter, and the top alternatives of the first generated token give a probability per
label (tokens stripped and upper-cased, probabilities normalised over the labels). When no
alternative is a label letter, or the adapter raises WRONG_MODEL_TYPE (no logprobs after all), the
JSON path runs.

JSON path: the model answers ``{"label": ...}`` — enforced by a JSON-schema response format with the
labels as an enum where the provider has one, by JSON mode where it has that, and by the instruction
alone otherwise. The label is validated against the set; the probability is 1.0.
"""

from __future__ import annotations

import json
import math
import re
import string
from collections.abc import Sequence
from typing import Any

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode
from knowsphere_modelhub.domain.errors import ModelError, invalid_input
from knowsphere_modelhub.domain.ports import ProviderAdapter, TokenLogprob
from knowsphere_modelhub.domain.providers import ProviderSpec
from knowsphere_modelhub.domain.records import CallTarget

LETTERS = string.ascii_uppercase
# Characters around a letter token that do not change which option it names ("A.", " (B", "**C").
_TOKEN_NOISE = " \t\n.:)(*[]\"'`"
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)

LOGPROBS_INSTRUCTION = (
    "Choose the option that fits best.\n\n{options}\n\n"
    "Answer with the letter of one option ({letters}) and nothing else."
)
JSON_INSTRUCTION = (
    "Choose the label that fits best.\n\n{options}\n\n"
    'Answer with only a JSON object of the form {{"label": "<label>"}}, where <label> is one of: {names}.'
)


def validate(request: pb.DecideRequest, *, max_labels: int) -> None:
    labels = request.labels
    if len(labels) < 2:
        raise invalid_input("labels", f"at least 2 labels are required, {len(labels)} given")
    if len(labels) > max_labels:
        raise invalid_input("labels", f"at most {max_labels} labels are allowed, {len(labels)} given")
    names = [label.name for label in labels]
    if any(not name.strip() for name in names):
        raise invalid_input("labels", "every label needs a name")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise invalid_input("labels", f"label names must be unique; repeated: {', '.join(duplicates)}")
    if not request.messages and not request.prompt.strip():
        raise invalid_input("messages", "give messages or a prompt")


def _describe(label: pb.DecisionLabel) -> str:
    return f"{label.name}: {label.description}" if label.description else label.name


def _with_instruction(request: pb.DecideRequest, instruction: str) -> list[pb.ChatMessage]:
    """The context unchanged, then one user message: the prompt (if any) and the instruction."""
    text = f"{request.prompt}\n\n{instruction}" if request.prompt.strip() else instruction
    final = pb.ChatMessage(role=pb.CHAT_ROLE_USER, content=[pb.ContentPart(text=text)])
    return [*request.messages, final]


def label_probabilities(labels: Sequence[str], alternatives: Sequence[TokenLogprob]) -> dict[str, float]:
    """Probability per label from first-token alternatives, normalised over the labels; {} if none."""
    by_letter = {LETTERS[i]: name for i, name in enumerate(labels)}
    mass: dict[str, float] = {}
    for alt in alternatives:
        letter = alt.token.strip(_TOKEN_NOISE).upper()
        name = by_letter.get(letter)
        if name is not None and math.isfinite(alt.logprob):
            mass[name] = mass.get(name, 0.0) + math.exp(alt.logprob)
    total = sum(mass.values())
    if total <= 0:
        return {}
    return {name: mass.get(name, 0.0) / total for name in labels}


def parse_label(text: str, labels: Sequence[str]) -> str | None:
    """The label a JSON answer names (also accepts a bare label or a fenced/embedded JSON object)."""
    cleaned = _FENCE.sub("", text.strip()).strip()
    sources = [cleaned]
    embedded = _OBJECT.search(cleaned)
    if embedded:
        sources.append(embedded.group(0))
    candidates: list[Any] = []
    for source in sources:
        try:
            candidates.append(json.loads(source))
        except ValueError:
            continue
    answer: str | None = None
    for value in candidates:
        if isinstance(value, dict) and isinstance(value.get("label"), str):
            answer = value["label"]
            break
        if isinstance(value, str):
            answer = value
            break
    if answer is None:
        answer = cleaned.strip("\"'` .")
    if answer in labels:
        return answer
    folded = {name.casefold(): name for name in labels}
    return folded.get(answer.strip().casefold())


async def _by_logprobs(
    adapter: ProviderAdapter, target: CallTarget, spec: ProviderSpec, request: pb.DecideRequest
) -> pb.DecideResponse | None:
    names = [label.name for label in request.labels]
    options = "\n".join(f"{LETTERS[i]}. {_describe(label)}" for i, label in enumerate(request.labels))
    instruction = LOGPROBS_INSTRUCTION.format(options=options, letters=", ".join(LETTERS[: len(names)]))
    try:
        alternatives = await adapter.next_token_logprobs(
            target, _with_instruction(request, instruction), spec.max_top_logprobs or len(names)
        )
    except ModelError as exc:
        if exc.code == ModelErrorCode.WRONG_MODEL_TYPE:
            return None
        raise
    probabilities = label_probabilities(names, alternatives)
    if not probabilities:
        return None
    ranked = sorted(names, key=lambda name: (-probabilities[name], names.index(name)))
    return pb.DecideResponse(
        label=ranked[0],
        probability=probabilities[ranked[0]],
        method=pb.DECISION_METHOD_LOGPROBS,
        scores=[pb.LabelProbability(label=name, probability=probabilities[name]) for name in ranked],
        model_id=target.model_id,
    )


async def _by_json(
    adapter: ProviderAdapter, target: CallTarget, spec: ProviderSpec, request: pb.DecideRequest
) -> pb.DecideResponse:
    names = [label.name for label in request.labels]
    options = "\n".join(f"- {_describe(label)}" for label in request.labels)
    instruction = JSON_INSTRUCTION.format(
        options=options, names=", ".join(json.dumps(n, ensure_ascii=False) for n in names)
    )
    schema = {
        "type": "object",
        "properties": {"label": {"type": "string", "enum": names}},
        "required": ["label"],
        "additionalProperties": False,
    }
    chat = pb.ChatStreamRequest(
        model_id=request.model_id,
        messages=_with_instruction(request, instruction),
        response_format=pb.ResponseFormat(
            type=pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA
            if spec.json_schema_output
            else pb.RESPONSE_FORMAT_TYPE_JSON_OBJECT,
            schema_name="decision",
            json_schema=json.dumps(schema, ensure_ascii=False),
            strict=spec.json_schema_output,
        ),
        purpose=request.purpose,
    )
    text: list[str] = []
    usage: pb.TokenUsage | None = None
    async for event in adapter.chat_stream(target, chat):
        kind = event.WhichOneof("event")
        if kind == "text_delta":
            text.append(event.text_delta.text)
        elif kind == "usage":
            usage = event.usage
    answer = "".join(text)
    label = parse_label(answer, names)
    if label is None:
        raise ModelError(
            ModelErrorCode.PROVIDER_ERROR,
            f"Decide: the model answered {answer[:500]!r}, which names none of the labels {names}",
            model_id=target.model_id,
            provider_id=target.provider_id,
        )
    response = pb.DecideResponse(
        label=label, probability=1.0, method=pb.DECISION_METHOD_JSON, model_id=target.model_id
    )
    if usage is not None:
        response.usage.CopyFrom(usage)
    return response


async def decide(
    adapter: ProviderAdapter,
    target: CallTarget,
    spec: ProviderSpec,
    request: pb.DecideRequest,
    *,
    max_labels: int,
) -> pb.DecideResponse:
    """Pick one label of ``request.labels`` for the conversation; see the module docstring."""
    validate(request, max_labels=max_labels)
    use_logprobs = (
        spec.logprobs and request.method != pb.DECISION_METHOD_JSON and len(request.labels) <= len(LETTERS)
    )
    if use_logprobs:
        result = await _by_logprobs(adapter, target, spec, request)
        if result is not None:
            return result
    return await _by_json(adapter, target, spec, request)
