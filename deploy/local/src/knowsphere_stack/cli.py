"""``ks-stack``: up, down, status and logs of the local KnowSphere stack.

``make up`` runs ``ks-stack up`` and ``make down`` runs ``ks-stack down``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pydantic import ValidationError

from knowsphere_stack import process_identity
from knowsphere_stack.components import TEMPORAL
from knowsphere_stack.config import StackConfig
from knowsphere_stack.health import probe_all
from knowsphere_stack.processes import LOG_TAIL_LINES, log_tail
from knowsphere_stack.run_dir import RunDir, StackState
from knowsphere_stack.stack import (
    Stack,
    StackStartError,
    running_supervisor,
    stop_running_stack,
    wait_until_healthy,
)

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
FOLLOW_POLL = 0.5


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        config = StackConfig(data_dir=args.data_dir) if args.data_dir else StackConfig()
    except ValidationError as exc:
        print(f"ks-stack: invalid configuration:\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        code: int = args.command(config, args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ks-stack",
        description="Run the KnowSphere stack locally: NATS, Temporal dev server and the services, "
        "supervised. "
        "Configured by KS_STACK_* environment variables (or a .env file).",
    )
    parser.add_argument(
        "--data-dir", type=Path, help="data directory (default: $KS_STACK_DATA_DIR or ./.data)"
    )
    commands = parser.add_subparsers(dest="name", required=True)

    up = commands.add_parser("up", help="start the stack in the background and wait until it is healthy")
    up.add_argument(
        "--timeout", type=float, help="seconds to wait for health (default: $KS_STACK_HEALTH_TIMEOUT)"
    )
    up.set_defaults(command=cmd_up)

    down = commands.add_parser("down", help="stop what `up` started")
    down.add_argument("--grace", type=float, help="seconds before SIGKILL (default: $KS_STACK_STOP_GRACE)")
    down.set_defaults(command=cmd_down)

    status = commands.add_parser(
        "status", help="components, pids, ports and health (exit 1 unless all healthy)"
    )
    status.set_defaults(command=cmd_status)

    logs = commands.add_parser("logs", help="path and tail of a component's log")
    logs.add_argument("component", help="component name, e.g. nats, temporal, gateway, supervisor")
    logs.add_argument("-n", "--lines", type=int, default=LOG_TAIL_LINES, help="lines of tail (default 40)")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing what is appended")
    logs.add_argument("--path", action="store_true", help="print only the path")
    logs.set_defaults(command=cmd_logs)
    return parser


# up ------------------------------------------------------------------------------------------


def cmd_up(config: StackConfig, args: argparse.Namespace) -> int:
    timeout = args.timeout if args.timeout is not None else config.health_timeout
    run_dir = RunDir(config.run_dir)
    supervisor = running_supervisor(run_dir)
    if supervisor is not None:
        print(
            f"KnowSphere stack is already running from {config.data_dir} (supervisor pid {supervisor.pid})."
        )
        current = run_dir.read_state()
        expected = [c.name for c in current.components] if current else []
        try:
            state = wait_until_healthy(
                run_dir.read_state,
                expected,
                timeout,
                supervisor_exit=lambda: None if supervisor.is_running() else "the supervisor has exited",
            )
        except StackStartError as exc:
            print(f"ks-stack: the running stack is not healthy: {exc}", file=sys.stderr)
            print("Stop it with `ks-stack down` and run `ks-stack up` again.", file=sys.stderr)
            return EXIT_FAILED
        _print_summary(config, state)
        return 0

    print(f"Starting the KnowSphere stack from {config.data_dir} ...", flush=True)
    stack = Stack(config, detach=True)
    try:
        state = stack.start(timeout)
    except StackStartError as exc:
        print(f"ks-stack: {exc}", file=sys.stderr)
        if stack.components:  # set once the checks before launching have passed
            print("ks-stack: stopped everything that had been started.", file=sys.stderr)
        return EXIT_FAILED
    _print_summary(config, state)
    return 0


def _print_summary(config: StackConfig, state: StackState) -> None:
    rows: list[tuple[str, str]] = []
    names = {c.name: c for c in state.components}
    if "gateway" in names and "http" in names["gateway"].ports:
        rows.append(("gateway", f"http://127.0.0.1:{names['gateway'].ports['http']}"))
    if TEMPORAL in names and "ui" in names[TEMPORAL].ports:
        rows.append(("Temporal UI", f"http://127.0.0.1:{names[TEMPORAL].ports['ui']}"))
    rows += [("data dir", str(config.data_dir)), ("log dir", str(config.log_dir))]
    print(f"KnowSphere stack is up ({len(state.components)} components healthy).")
    for label, value in rows:
        print(f"  {label:<12} {value}")
    print("Stop it with `make down` (or `ks-stack down`).")


# down ----------------------------------------------------------------------------------------


def cmd_down(config: StackConfig, args: argparse.Namespace) -> int:
    grace = args.grace if args.grace is not None else config.stop_grace
    report = stop_running_stack(RunDir(config.run_dir), grace)
    if not report.was_running:
        print(f"KnowSphere stack is not running (nothing recorded in {config.run_dir}).")
        return 0
    for entry in report.killed:
        print(f"killed leftover {entry}")
    for entry in report.foreign:
        print(f"left alone: {entry}")
    if report.survivors:
        for entry in report.survivors:
            print(f"ks-stack: still running after SIGKILL: {entry}", file=sys.stderr)
        return EXIT_FAILED
    if report.stopped_supervisor or report.killed:
        print("KnowSphere stack stopped.")
    else:
        print("KnowSphere stack was not running; removed its stale pid files.")
    return 0


# status --------------------------------------------------------------------------------------


def cmd_status(config: StackConfig, args: argparse.Namespace) -> int:
    run_dir = RunDir(config.run_dir)
    state = run_dir.read_state()
    supervisor = running_supervisor(run_dir)
    if state is None:
        print(f"KnowSphere stack is not running (no state in {config.run_dir}).")
        return EXIT_FAILED
    if supervisor is not None:
        print(f"supervisor pid {supervisor.pid}, data dir {config.data_dir}")
    elif state.supervisor_pid is not None:
        print(f"supervisor is not running (was pid {state.supervisor_pid}); run `ks-stack down` to clean up")
    print(f"{'COMPONENT':<18} {'STATE':<11} {'PID':>7}  {'RESTARTS':>8}  {'PORTS':<40} HEALTH")
    all_healthy = True
    for component in state.components:
        recorded = run_dir.read_pid(component.name)
        healthy = False
        if recorded is not None and recorded.is_running():
            uptime = process_identity.uptime_seconds(recorded.start_time)
            health = probe_all(component.health, uptime=uptime)
            healthy = health.ok
            health_text = "healthy" if health.ok else f"unhealthy: {health.detail}"
            pid = str(recorded.pid)
        else:
            health_text = "not running"
            pid = "-"
        all_healthy = all_healthy and healthy
        ports = " ".join(f"{label}={port}" for label, port in component.ports.items()) or "-"
        print(
            f"{component.name:<18} {component.status:<11} {pid:>7}  {component.restarts:>8}  "
            f"{ports:<40} {health_text}"
        )
    supervised = supervisor is not None or state.supervisor_pid is None  # None: an in-process Stack
    return 0 if all_healthy and supervised else EXIT_FAILED


# logs ----------------------------------------------------------------------------------------


def cmd_logs(config: StackConfig, args: argparse.Namespace) -> int:
    path = config.log_path(args.component)
    if not path.is_file():
        available = sorted(p.stem for p in config.log_dir.glob("*.log")) if config.log_dir.is_dir() else []
        print(
            f"ks-stack: no log for {args.component!r} at {path}; available: {', '.join(available) or 'none'}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if args.path:
        print(path)
        return 0
    print(f"==> {path} <==")
    sys.stdout.write(log_tail(path, args.lines))
    sys.stdout.flush()
    if args.follow:
        with open(path, encoding="utf-8", errors="replace") as handle:
            handle.seek(0, 2)
            while True:
                chunk = handle.read()
                if chunk:
                    sys.stdout.write(chunk)
                    sys.stdout.flush()
                else:
                    time.sleep(FOLLOW_POLL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
