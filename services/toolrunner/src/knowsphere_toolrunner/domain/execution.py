"""Running one tool call: look-up, switch check, argument validation, attempts, numbering, storing.

Whatever goes wrong reaches the model as an in-band error with a text it can act on — an unknown
tool, a tool whose switch is off, arguments that do not match the schema (each problem with its path),
a failure or a time-out after the last attempt. A tool's :class:`ToolProblem` is final (retrying the
same call cannot help); any other exception or the time limit is retried, at most ``max_attempts``
times in all, each attempt its own span.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from jsonschema import Draft202012Validator
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from knowsphere.toolrunner.v1.toolrunner_enums import ToolErrorCode
from knowsphere_clients.errors import ServiceError
from knowsphere_telemetry import attributes
from knowsphere_toolrunner.domain.catalog import Catalogue, missing_switch
from knowsphere_toolrunner.domain.externalise import Externaliser, must_store
from knowsphere_toolrunner.domain.sources import Source, SourceBook
from knowsphere_toolrunner.domain.tools.base import (
    Artifact,
    Tool,
    ToolContext,
    ToolOutput,
    ToolProblem,
    ToolSpec,
    TransientProblem,
)

log = structlog.get_logger(__name__)
_tracer = trace.get_tracer("knowsphere.toolrunner")

# Argument problems listed to the model per call; more are summarised as a count.
MAX_ARGUMENT_PROBLEMS = 5


@dataclass(frozen=True)
class ExecutionLimits:
    max_attempts: int
    retry_backoff_seconds: float
    default_timeout_seconds: float


@dataclass
class Execution:
    """The outcome of one tool call; field names follow the contract's ``ExecuteToolResponse``."""

    content: str
    json_value: Any = None
    has_json: bool = False
    error_code: ToolErrorCode | None = None
    error_message: str = ""
    stored: bool = False
    ref_id: str = ""
    summary: str = ""
    hint: str = ""
    distilled: bool = False
    degraded: bool = False
    attempts: int = 0
    result_chars: int = 0
    sources: list[Source] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    duration_seconds: float = 0.0


def _failure(code: ToolErrorCode, message: str, attempts: int = 0) -> Execution:
    return Execution(content=message, error_code=code, error_message=message, attempts=attempts)


def _integers_where_declared(value: Any, schema: Mapping[str, Any]) -> Any:
    """Arguments arrive through a protobuf Struct, where every number is a float: numbers the schema
    declares integers become ints again (after validation has checked they are whole)."""
    kind = schema.get("type")
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        return {k: _integers_where_declared(v, properties.get(k, {})) for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_integers_where_declared(v, schema["items"]) for v in value]
    return value


def _path(parts: Any) -> str:
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
    return text.lstrip(".") or "(arguments)"


def reason_for_model(error: Exception) -> str:
    """What the model is told of a failure: which service answered what, never addresses or traces
    (those go to the span and the log)."""
    if isinstance(error, ServiceError):
        return f"{error.service or 'a service'} answered {error.status.name}"
    if isinstance(error, TransientProblem):
        return error.message
    return type(error).__name__


def result_text(value: Any) -> tuple[str, bool]:
    """(the exact text of a result, whether it is JSON)."""
    if isinstance(value, str):
        return value, False
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")), True


class ToolExecutor:
    def __init__(
        self, catalogue: Catalogue, externaliser: Externaliser, limits: ExecutionLimits, *, snippet_chars: int
    ) -> None:
        self._catalogue = catalogue
        self._externaliser = externaliser
        self._limits = limits
        self._snippet_chars = snippet_chars
        self._validators: dict[str, Draft202012Validator] = {}

    def _validator(self, spec: ToolSpec) -> Draft202012Validator:
        validator = self._validators.get(spec.name)
        if validator is None:
            validator = Draft202012Validator(dict(spec.parameters))
            self._validators[spec.name] = validator
        return validator

    def _argument_problems(self, spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
        errors = sorted(self._validator(spec).iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if not errors:
            return None
        lines = [f"- {_path(e.absolute_path)}: {e.message}" for e in errors[:MAX_ARGUMENT_PROBLEMS]]
        if len(errors) > MAX_ARGUMENT_PROBLEMS:
            lines.append(f"- … and {len(errors) - MAX_ARGUMENT_PROBLEMS} more")
        return (
            f"The arguments of {spec.name} do not match its schema:\n"
            + "\n".join(lines)
            + "\nFix them and call again."
        )

    async def execute(
        self, name: str, arguments: dict[str, Any], context: ToolContext, existing_sources: list[Source]
    ) -> Execution:
        started = time.perf_counter()
        with _tracer.start_as_current_span("toolrunner.execute_tool") as span:
            span.set_attribute(attributes.TOOL_NAME, name)
            if context.session_id:
                span.set_attribute(attributes.SESSION_ID, context.session_id)
            if context.turn_id:
                span.set_attribute(attributes.TURN_ID, context.turn_id)
            outcome = await self._execute(name, arguments, context, existing_sources)
            outcome.duration_seconds = time.perf_counter() - started
            span.set_attribute(attributes.TOOL_ATTEMPTS, outcome.attempts)
            span.set_attribute(attributes.TOOL_RESULT_CHARS, outcome.result_chars)
            span.set_attribute(attributes.TOOL_STORED, outcome.stored)
            span.set_attribute(attributes.TOOL_SOURCES, len(outcome.sources))
            if outcome.stored:
                span.set_attribute(attributes.TOOL_DISTILLED, outcome.distilled)
                span.set_attribute(attributes.TOOL_DEGRADED, outcome.degraded)
            if outcome.error_code is not None:
                span.set_attribute(attributes.ERROR_CODE, outcome.error_code.value)
            return outcome

    async def _execute(
        self, name: str, arguments: dict[str, Any], context: ToolContext, existing_sources: list[Source]
    ) -> Execution:
        tool = self._catalogue.get(name)
        if tool is None:
            return _failure(
                ToolErrorCode.UNKNOWN_TOOL, f"There is no tool named {name!r}. Use one of the tools offered."
            )
        spec = tool.spec
        # Whether the named skill has that script is execute_skill_script's own check, with a clearer
        # answer than "unavailable this turn".
        reason = missing_switch(
            spec, context.switches, context.skill_names, skill_scripts=True, workspace=context.workspace
        )
        if reason is not None:
            return _failure(
                ToolErrorCode.UNAVAILABLE_THIS_TURN, f"{name} cannot be used this turn: {reason}."
            )
        problems = self._argument_problems(spec, arguments)
        if problems is not None:
            return _failure(ToolErrorCode.INVALID_ARGUMENTS, problems)
        arguments = _integers_where_declared(arguments, spec.parameters)

        attempted = await self._attempts(tool, spec, arguments, context, existing_sources)
        if isinstance(attempted, Execution):
            return attempted  # the failure the model reads
        output, book, attempts = attempted
        text, is_json = result_text(output.value)
        outcome = Execution(
            content=text,
            json_value=output.value if is_json else None,
            has_json=is_json,
            attempts=attempts,
            result_chars=len(text),
            sources=book.new,
            artifacts=list(output.artifacts),
        )
        whole = output.whole_result or spec.whole_result
        if spec.externalise and must_store(
            text, output.value, whole_result=whole, limits=self._externaliser.limits
        ):
            stored = await self._externaliser.externalise(name, text, output.value, context, is_json=is_json)
            outcome.content = stored.content
            outcome.json_value = stored.placeholder
            outcome.has_json = True
            outcome.stored = True
            outcome.ref_id = stored.ref_id
            outcome.summary = stored.summary
            outcome.hint = stored.hint
            outcome.distilled = stored.distilled
            outcome.degraded = stored.degraded
        return outcome

    async def _attempts(
        self,
        tool: Tool,
        spec: ToolSpec,
        arguments: dict[str, Any],
        context: ToolContext,
        existing_sources: list[Source],
    ) -> tuple[ToolOutput, SourceBook, int] | Execution:
        """(the output, its sources, the attempts used), or the failure after the last attempt."""
        limits = self._limits
        timeout = spec.timeout_seconds or limits.default_timeout_seconds
        last_code = ToolErrorCode.FAILED
        last_reason = ""
        for attempt in range(1, limits.max_attempts + 1):
            # A fresh book per attempt: a failed attempt's sources are not numbered.
            book = SourceBook(existing_sources, snippet_chars=self._snippet_chars)
            context.sources = book
            with _tracer.start_as_current_span("toolrunner.tool_attempt") as span:
                span.set_attribute(attributes.TOOL_NAME, spec.name)
                span.set_attribute(attributes.TOOL_ATTEMPT, attempt)
                try:
                    async with asyncio.timeout(timeout):
                        output = await tool.run(arguments, context)
                    return output, book, attempt
                except ToolProblem as problem:
                    span.set_status(Status(StatusCode.ERROR, problem.message))
                    span.set_attribute(attributes.ERROR_CODE, problem.code.value)
                    return _failure(problem.code, problem.message, attempt)
                except TimeoutError:
                    last_code = ToolErrorCode.TIMED_OUT
                    last_reason = f"no answer within {timeout:g} s"
                    span.set_status(Status(StatusCode.ERROR, last_reason))
                    span.set_attribute(attributes.ERROR_CODE, last_code.value)
                except Exception as error:  # any other failure is taken as transient and retried
                    last_code = ToolErrorCode.FAILED
                    last_reason = reason_for_model(error)
                    span.record_exception(error)
                    span.set_status(Status(StatusCode.ERROR, str(error)))
                    span.set_attribute(attributes.ERROR_CODE, last_code.value)
                    log.warning("tool attempt failed", tool=spec.name, attempt=attempt, error=str(error))
            if attempt < limits.max_attempts and limits.retry_backoff_seconds:
                await asyncio.sleep(limits.retry_backoff_seconds * attempt)
        verb = "timed out" if last_code == ToolErrorCode.TIMED_OUT else "failed"
        message = (
            f"{spec.name} {verb} after {limits.max_attempts} attempts ({last_reason}). "
            "Try different arguments or another tool, or answer with what you have."
        )
        return _failure(last_code, message, limits.max_attempts)
