"""The fault suite's report: each scenario hands its JSON record to ``scenario_report``, which prints it
as one line at once; when the session ends, a last line of JSON sums them up — documents or turns lost
and duplicated, anything leaked (text that should never have become readable, processes left behind),
in total and per scenario, with each scenario's test outcome. Nothing is printed when no chaos
scenario ran (``make test`` with chaos deselected).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Generator
from typing import Any

import pytest

_RECORDS = pytest.StashKey[list[dict[str, Any]]]()
_OUTCOMES = pytest.StashKey[dict[str, str]]()
# The counts a record may carry; a record without one counts it as 0.
TOTALLED = ("lost", "duplicated", "leaked")

ScenarioReport = Callable[[dict[str, Any]], None]


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RECORDS] = []
    config.stash[_OUTCOMES] = {}


@pytest.fixture
def scenario_report(request: pytest.FixtureRequest) -> ScenarioReport:
    """``scenario_report(record)``: print ``record`` as one JSON line and keep it for the summary."""

    def report(record: dict[str, Any]) -> None:
        record = {"test": request.node.nodeid, **record}
        request.config.stash[_RECORDS].append(record)
        print("\n" + json.dumps(record, default=str), flush=True)

    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    outcomes = item.config.stash[_OUTCOMES]
    # The first phase that did not pass decides (a failed teardown after a passed call too).
    if (report.when == "call" or report.outcome != "passed") and outcomes.get(
        item.nodeid, "passed"
    ) == "passed":
        outcomes[item.nodeid] = (
            report.outcome if report.when == "call" else f"{report.outcome} in {report.when}"
        )
    return report


def summary(records: list[dict[str, Any]], outcomes: dict[str, str]) -> dict[str, Any]:
    scenarios = [
        {
            "scenario": record.get("scenario", record["test"]),
            "outcome": outcomes.get(record["test"], "unknown"),
            **{key: _count(record.get(key, 0)) for key in TOTALLED},
        }
        for record in records
    ]
    return {
        "summary": "chaos",
        "scenarios": len(scenarios),
        "failed": sum(s["outcome"] != "passed" for s in scenarios),
        **{key: sum(s[key] for s in scenarios) for key in TOTALLED},
        "per_scenario": scenarios,
    }


def _count(value: Any) -> int:
    """A count, or the length of a list of ids."""
    return len(value) if isinstance(value, list | tuple | set) else int(value)


def pytest_unconfigure(config: pytest.Config) -> None:
    records = config.stash.get(_RECORDS, [])
    if records:
        # After pytest's own summary, so that it is the run's last line.
        sys.stdout.write(json.dumps(summary(records, config.stash[_OUTCOMES]), default=str) + "\n")
        sys.stdout.flush()
