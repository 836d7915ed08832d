"""One span per model call with the OpenTelemetry GenAI attributes, and a Langfuse generation.

Attribute names follow the GenAI semantic conventions (``gen_ai.*``), ours come from
:mod:`knowsphere_telemetry.attributes`; retries are recorded as span events by the HTTP layer while
this span is current.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from knowsphere_modelhub.domain.errors import ModelError
from knowsphere_modelhub.domain.records import CallTarget
from knowsphere_telemetry import LlmObserver, attributes

_tracer = trace.get_tracer("knowsphere.modelhub")


@dataclass
class CallRecord:
    """Filled in by the caller while the call runs; written to the span and generation at the end."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    finish_reason: str | None = None
    output: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


@contextmanager
def model_call(
    observer: LlmObserver,
    operation: str,
    target: CallTarget,
    *,
    purpose: str = "",
    request_input: Any = None,
    parameters: dict[str, Any] | None = None,
) -> Iterator[tuple[Span, CallRecord]]:
    """Wrap one model call: ``operation`` is chat, embeddings, rerank, decide, describe_image, transcribe."""
    name = f"{operation} {target.model_name}" + (f" ({purpose})" if purpose else "")
    record = CallRecord()
    started = time.perf_counter()
    with (
        _tracer.start_as_current_span(name, kind=SpanKind.CLIENT) as span,
        observer.generation(
            name=purpose or operation, model=target.model_name, input=request_input, parameters=parameters
        ) as generation,
    ):
        span.set_attribute("gen_ai.operation.name", operation)
        span.set_attribute("gen_ai.system", target.provider_id)
        span.set_attribute("gen_ai.provider.name", target.provider_id)
        span.set_attribute("gen_ai.request.model", target.model_name)
        span.set_attribute(attributes.MODEL_ID, target.model_id)
        if purpose:
            span.set_attribute(attributes.MODEL_PURPOSE, purpose)
        for key, value in (parameters or {}).items():
            if value is not None and isinstance(value, int | float | str | bool):
                span.set_attribute(f"gen_ai.request.{key}", value)
        try:
            yield span, record
        except ModelError as error:
            span.set_attribute("error.type", error.code_name)
            span.set_status(Status(StatusCode.ERROR, error.code_name))
            span.add_event("model_error", {"code": error.code_name, "detail": error.detail[:2000]})
            raise
        finally:
            span.set_attribute(attributes.LATENCY_MS, round((time.perf_counter() - started) * 1000, 1))
            if record.input_tokens is not None:
                span.set_attribute("gen_ai.usage.input_tokens", record.input_tokens)
            if record.output_tokens is not None:
                span.set_attribute("gen_ai.usage.output_tokens", record.output_tokens)
            if record.cached_input_tokens is not None:
                span.set_attribute("gen_ai.usage.cache_read.input_tokens", record.cached_input_tokens)
            if record.finish_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [record.finish_reason])
            for key, value in record.extra.items():
                span.set_attribute(key, value)
            usage = {
                k: v
                for k, v in (
                    ("input", record.input_tokens),
                    ("output", record.output_tokens),
                    ("cache_read_input_tokens", record.cached_input_tokens),
                )
                if v is not None
            }
            generation.update(output=record.output, usage=usage or None)
