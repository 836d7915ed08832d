"""Telemetry for KnowSphere services: traces, structured logs and LLM observation, and the redaction
of credentials from what goes into logs and error messages (:mod:`knowsphere_telemetry.redaction`).

Everything here is configured from the environment only: the standard ``OTEL_*`` variables for
OpenTelemetry, ``LANGFUSE_*`` for Langfuse, and a log level passed by the service's settings.
"""

from knowsphere_telemetry.langfuse import LlmObserver, build_llm_observer
from knowsphere_telemetry.logs import configure_logging
from knowsphere_telemetry.redaction import REDACTED, redact_text, redact_url
from knowsphere_telemetry.tracing import TracingHandle, configure_tracing

__all__ = [
    "REDACTED",
    "LlmObserver",
    "TracingHandle",
    "build_llm_observer",
    "configure_logging",
    "configure_tracing",
    "redact_text",
    "redact_url",
]
