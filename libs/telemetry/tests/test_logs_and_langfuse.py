"""Logs are JSON lines with trace ids and caller fields; Langfuse is off without keys."""

import io
import json
import logging

import structlog

from knowsphere_telemetry import build_llm_observer, configure_logging
from knowsphere_telemetry.langfuse import LangfuseLlmObserver, NoopLlmObserver


def test_log_lines_are_json_with_service_identity_and_trace(spans):
    from opentelemetry import trace

    stream = io.StringIO()
    configure_logging("retrieval", "INFO", context_reader=lambda: {"tenant_id": "acme"}, stream=stream)
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("work") as span:
        structlog.get_logger("demo").info("indexed", chunks=3)
        logging.getLogger("grpc.something").warning("from the standard library")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["event"] == "indexed"
    assert lines[0]["chunks"] == 3
    assert lines[0]["service"] == "retrieval"
    assert lines[0]["tenant_id"] == "acme"
    assert lines[0]["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert lines[1]["event"] == "from the standard library"
    assert lines[1]["level"] == "warning"
    assert lines[1]["service"] == "retrieval"


def test_a_line_below_the_level_is_dropped_before_any_work_is_spent_on_it():
    stream = io.StringIO()
    reads: list[int] = []

    def reader() -> dict[str, str]:
        reads.append(1)
        return {"tenant_id": "acme"}

    configure_logging("ingestion", "INFO", context_reader=reader, stream=stream)
    structlog.get_logger("quiet").debug("document uploaded", size=3)
    assert stream.getvalue() == ""
    assert reads == []  # the line's fields were never gathered
    structlog.get_logger("quiet").info("documents uploaded", count=3)
    assert [json.loads(line)["event"] for line in stream.getvalue().splitlines()] == ["documents uploaded"]
    assert reads == [1]


def test_langfuse_is_a_noop_without_both_keys():
    assert isinstance(build_llm_observer({}), NoopLlmObserver)
    assert isinstance(build_llm_observer({"LANGFUSE_PUBLIC_KEY": "pk"}), NoopLlmObserver)
    observer = build_llm_observer({})
    with observer.generation(name="chat", model="m", input="hi") as generation:
        generation.update(output="hello", usage={"input": 1, "output": 1})
    assert observer.enabled is False


def test_langfuse_is_active_when_both_keys_are_set():
    observer = build_llm_observer(
        {
            "LANGFUSE_PUBLIC_KEY": "pk-test",
            "LANGFUSE_SECRET_KEY": "sk-test",
            "LANGFUSE_HOST": "http://127.0.0.1:9",
        }
    )
    assert isinstance(observer, LangfuseLlmObserver)
    assert observer.enabled is True
