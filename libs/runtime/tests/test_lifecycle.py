"""Components start in order and stop in reverse, also when start-up fails half-way."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from knowsphere_runtime.lifecycle import serve


class Recorder:
    def __init__(self, name: str, log: list[str], *, fail: bool = False) -> None:
        self.name = name
        self._log = log
        self._fail = fail

    async def start(self) -> object:
        if self._fail:
            raise OSError(f"{self.name} cannot start")
        self._log.append(f"start {self.name}")
        return None

    async def stop(self, grace: float | None = None) -> None:
        self._log.append(f"stop {self.name} grace={grace}")


async def test_stop_runs_in_reverse_order_with_the_grace_period():
    log: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(serve([Recorder("a", log), Recorder("b", log)], grace=7.0, stop_event=stop))
    await asyncio.sleep(0.05)
    stop.set()
    await task
    assert log == ["start a", "start b", "stop b grace=7.0", "stop a grace=7.0"]


async def test_failed_start_stops_what_already_started():
    log: list[str] = []
    with pytest.raises(OSError, match="b cannot start"):
        await serve(
            [Recorder("a", log), Recorder("b", log, fail=True)], grace=1.0, stop_event=asyncio.Event()
        )
    assert log == ["start a", "stop a grace=1.0"]


def test_a_started_service_freezes_its_start_up_objects_and_collects_young_objects_less_often():
    # In a child process: freezing and thresholds are process-wide, and must not change this one's.
    probe = (
        "import asyncio, gc\n"
        "from knowsphere_runtime.lifecycle import YOUNG_COLLECTION_THRESHOLD, settle_memory\n"
        "before = gc.get_threshold()\n"
        "asyncio.run(settle_memory())\n"
        "print(gc.get_freeze_count() > 1000, gc.get_threshold()[0] == YOUNG_COLLECTION_THRESHOLD,"
        " gc.get_threshold()[1:] == before[1:])\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["True", "True", "True"]
