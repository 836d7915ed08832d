"""OpenTelemetry tracing configured only from the standard ``OTEL_*`` environment variables.

- ``OTEL_SDK_DISABLED=true`` turns the SDK off: the API stays a no-op and nothing is exported.
- ``OTEL_TRACES_EXPORTER``: a comma list of ``none``, ``console``, ``otlp``. When it is unset, traces
  go to OTLP if ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set,
  and nowhere otherwise (spans are still created, so trace ids reach logs and peers).
- ``OTEL_EXPORTER_OTLP_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``: ``grpc`` or
  ``http/protobuf`` (the specification's default).
- ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` name the resource; the service's own
  short name is used when ``OTEL_SERVICE_NAME`` is unset.
- Batch processor and exporter tuning (``OTEL_BSP_*``, ``OTEL_EXPORTER_OTLP_HEADERS``, timeouts)
  are read by the SDK itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

_KNOWN_EXPORTERS = ("none", "console", "otlp")


class TelemetryConfigError(ValueError):
    """An ``OTEL_*`` variable holds a value this service cannot use."""


@dataclass
class TracingHandle:
    """What :func:`configure_tracing` set up; ``shutdown`` flushes pending spans."""

    provider: TracerProvider | None
    exporters: tuple[str, ...]

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()

    def force_flush(self, timeout_millis: int = 5000) -> bool:
        return self.provider.force_flush(timeout_millis) if self.provider is not None else True


def _is_true(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def selected_exporters(env: Mapping[str, str]) -> tuple[str, ...]:
    """The trace exporters the environment asks for, validated."""
    raw = env.get("OTEL_TRACES_EXPORTER")
    if raw is None or not raw.strip():
        endpoint_set = bool(
            env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        )
        return ("otlp",) if endpoint_set else ()
    names = tuple(n.strip().lower() for n in raw.split(",") if n.strip())
    unknown = [n for n in names if n not in _KNOWN_EXPORTERS]
    if unknown:
        raise TelemetryConfigError(
            f"OTEL_TRACES_EXPORTER={raw!r}: unknown exporter(s) {unknown}; "
            f"use a comma list of {', '.join(_KNOWN_EXPORTERS)}"
        )
    return tuple(n for n in names if n != "none")


def _otlp_exporter(env: Mapping[str, str]) -> SpanExporter:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpOTLPSpanExporter,
        )

        return HttpOTLPSpanExporter()
    raise TelemetryConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: use 'grpc' or 'http/protobuf'")


def configure_tracing(
    service_name: str,
    env: Mapping[str, str] | None = None,
    *,
    extra_processors: tuple[SpanProcessor, ...] = (),
) -> TracingHandle:
    """Install the global tracer provider for this process from the environment.

    ``extra_processors`` lets a test attach an in-memory exporter without touching the environment.
    """
    env = os.environ if env is None else env
    if _is_true(env.get("OTEL_SDK_DISABLED")):
        return TracingHandle(provider=None, exporters=())
    exporters = selected_exporters(env)
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service_name}
    provider = TracerProvider(resource=Resource.create(attributes))
    for name in exporters:
        if name == "console":
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(env)))
    for processor in extra_processors:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    return TracingHandle(provider=provider, exporters=exporters)
