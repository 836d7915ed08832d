"""Start-to-exit time of the skill-script sandbox for an empty Python script.

Each run is the whole path execute_skill_script takes: the run folder is written, bwrap sets up the
namespaces, seccomp is installed, the launcher applies rlimits and Landlock and starts the script
(an empty ``*.py``), the output folder is collected and the run folder removed. Prints one line per
summary, then one JSON object as the last line. Goal: p50 under 150 ms on a 2-core machine.

    python services/toolrunner/bench/bench_sandbox.py [--runs 30] [--warmup 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time

from knowsphere_toolrunner.sandbox import SandboxRequest, ScriptSandbox

GOAL_MS = 150.0


async def measure(runs: int, warmup: int) -> dict[str, object]:
    sandbox = ScriptSandbox()
    request = SandboxRequest(script="empty.py", skill_files={"empty.py": b""})
    timings = []
    for index in range(warmup + runs):
        started = time.perf_counter()
        result = await sandbox.run_script(request)
        elapsed = (time.perf_counter() - started) * 1000
        if result.exit_code != 0:
            raise SystemExit(f"the empty script failed: {result.exit_code} {result.stderr[-500:]!r}")
        if index >= warmup:
            timings.append(elapsed)
    timings.sort()
    return {
        "bench": "sandbox_empty_python",
        "runs": runs,
        "p50_ms": round(statistics.median(timings), 1),
        "p95_ms": round(timings[max(0, int(len(timings) * 0.95) - 1)], 1),
        "min_ms": round(timings[0], 1),
        "max_ms": round(timings[-1], 1),
        "goal_ms": GOAL_MS,
        "meets_goal": statistics.median(timings) < GOAL_MS,
        "protections": list(sandbox.protections),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    options = parser.parse_args()
    summary = asyncio.run(measure(options.runs, options.warmup))
    protections = ", ".join(ScriptSandbox().protections)
    print(f"sandbox start-to-exit, empty Python script, {options.runs} runs ({protections})")
    print(
        f"  p50 {summary['p50_ms']} ms, p95 {summary['p95_ms']} ms, "
        f"min {summary['min_ms']} ms, max {summary['max_ms']} ms"
    )
    print(f"  goal p50 < {GOAL_MS:g} ms: {'met' if summary['meets_goal'] else 'NOT met'}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
