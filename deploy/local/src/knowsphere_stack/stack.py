"""The whole local stack as one object: start it, wait until healthy, stop exactly what it started.

``Stack(config).start()`` supervises in a thread of the caller (tests); ``Stack(config, detach=True)``
starts a detached supervisor process that outlives the caller (``ks-stack up``).
:func:`stop_running_stack` is ``ks-stack down``: it works from the pid files alone.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from knowsphere_stack import process_identity
from knowsphere_stack.components import (
    LOCAL_CLIENT_ISSUER,
    ComponentSpec,
    build_components,
    missing_service_modules,
)
from knowsphere_stack.config import LOOPBACK, StackConfig
from knowsphere_stack.layout import grpc_addresses, layout_problems, port_is_free, port_uses
from knowsphere_stack.processes import ComponentStartError
from knowsphere_stack.run_dir import SUPERVISOR, RecordedProcess, RunDir, StackState
from knowsphere_stack.supervisor import RestartPolicy, Supervisor, SupervisorPlan
from knowsphere_stack.tls import tls_files

if TYPE_CHECKING:
    from knowsphere_runtime.nats_auth import NatsAuthSettings
    from knowsphere_runtime.rpc.tls import MutualTls

WAIT_POLL = 0.1
SUPERVISOR_EXIT_MARGIN = 10.0
"""Seconds `down` waits for the supervisor beyond the children's grace periods."""
KILL_CONFIRM_TIMEOUT = 5.0


class StackStartError(ComponentStartError):
    """The stack did not come up: ``component`` names the culprit, ``log_tail`` holds its last lines."""


class StackAlreadyRunningError(StackStartError):
    """A supervisor recorded under the same data dir is still running."""


# Stopping from pid files (``ks-stack down``) ---------------------------------------------------


@dataclass
class StopReport:
    was_running: bool = False
    stopped_supervisor: bool = False
    killed: list[str] = field(default_factory=list)
    """Leftovers that had to be killed with SIGKILL after the supervisor was gone."""
    foreign: list[str] = field(default_factory=list)
    """Recorded pids that now belong to another process and were left alone."""
    survivors: list[str] = field(default_factory=list)
    """Processes still alive after SIGKILL (should never happen)."""


def running_supervisor(run_dir: RunDir) -> RecordedProcess | None:
    recorded = run_dir.read_pid(SUPERVISOR)
    return recorded if recorded is not None and recorded.is_running() else None


def stop_running_stack(run_dir: RunDir, grace: float) -> StopReport:
    """Stop what the pid files in ``run_dir`` record, then make sure every recorded pid is gone.

    SIGTERM goes to the supervisor, which stops its children in reverse start order. Whatever is still
    running afterwards is killed with SIGKILL, but only if its start time matches the recorded one. The
    pid files and the state file are removed at the end.
    """
    report = StopReport()
    names = run_dir.pid_names()
    state = run_dir.read_state()
    if not names and state is None:
        return report
    report.was_running = True
    supervisor = run_dir.read_pid(SUPERVISOR)
    if supervisor is not None and supervisor.is_running():
        children = len(names) - 1
        _terminate_supervisor(supervisor, timeout=grace * max(children, 1) + SUPERVISOR_EXIT_MARGIN)
        report.stopped_supervisor = True

    # A supervisor that ignored SIGTERM goes first, so it cannot restart what is killed after it; then
    # the children in reverse start order (as the state lists them), then anything else recorded.
    ordered = [SUPERVISOR]
    ordered += [c.name for c in reversed(state.components)] if state else []
    ordered += [name for name in names if name not in ordered]
    for name in ordered:
        recorded = run_dir.read_pid(name)
        if recorded is None:
            continue
        stat = process_identity.read_stat(recorded.pid)
        if stat is not None and stat.start_time != recorded.start_time and stat.state not in ("Z", "X"):
            report.foreign.append(f"{name} (pid {recorded.pid} now belongs to another process)")
            continue
        signalled = process_identity.kill_recorded_group(recorded.pid, recorded.start_time)
        if signalled:
            report.killed.append(f"{name} (pid {recorded.pid})")
        if not _wait_gone(recorded, KILL_CONFIRM_TIMEOUT):
            report.survivors.append(f"{name} (pid {recorded.pid})")
    if not report.survivors:
        for name in names:
            run_dir.remove_pid(name)
        run_dir.remove_state()
    return report


def _terminate_supervisor(supervisor: RecordedProcess, timeout: float) -> None:
    try:
        os.kill(supervisor.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    _wait_gone(supervisor, timeout)


def _wait_gone(recorded: RecordedProcess, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while recorded.is_running():
        if time.monotonic() >= deadline:
            return False
        time.sleep(WAIT_POLL)
    return True


# Starting --------------------------------------------------------------------------------------


def check_ports_free(config: StackConfig) -> None:
    """Fail with a message naming each busy or twice-used port and the settings that move it."""
    problems = layout_problems(config)
    first_component: str | None = None
    if problems:
        first_component = "ports"
    for use in port_uses(config):
        if port_is_free(use.port):
            continue
        problems.append(
            f"port {use.port} ({use.component}) is already in use on {LOOPBACK}; stop what listens there "
            f"or move it with {use.setting}"
        )
        first_component = first_component or use.component
    if problems:
        raise StackStartError(first_component or "ports", "cannot start:\n  " + "\n  ".join(problems))


def check_replicas_can_share(config: StackConfig) -> None:
    """Fail at once when replicas are asked for whose service keeps its state in its own process."""
    from knowsphere_stack.shared_state import unshared_state

    refused = unshared_state(config)
    if refused:
        raise StackStartError(next(iter(refused)), "cannot start:\n  " + "\n  ".join(refused.values()))


def check_services_installed(config: StackConfig) -> None:
    """Fail at once, instead of after five crashes, when a service's package is not installed."""
    missing = missing_service_modules(config)
    if missing:
        lines = [
            f"knowsphere_{name} is not importable by {sys.executable}; install it "
            f"(pip install -e services/{name})"
            for name in missing
        ]
        lines.append(f"or leave it out with {StackConfig.env_var('services')}")
        raise StackStartError(missing[0], "cannot start:\n  " + "\n  ".join(lines))


def wait_until_healthy(
    read_state: Callable[[], StackState | None],
    expected: list[str],
    timeout: float,
    *,
    supervisor_exit: Callable[[], str | None] = lambda: None,
    supervisor_log: Path | None = None,
) -> StackState:
    """Poll the supervisor's state until every expected component is healthy.

    Raises :class:`StackStartError` naming the first component that failed, or the first one not
    healthy when ``timeout`` runs out, or the supervisor if it died.
    """
    deadline = time.monotonic() + timeout
    while True:
        state = read_state()
        if state is not None:
            for component in state.components:
                if component.status == "failed":
                    raise StackStartError(component.name, component.detail or "failed", component.log_path)
            by_name = {c.name: c for c in state.components}
            if all(name in by_name and by_name[name].status == "healthy" for name in expected):
                return state
        died = supervisor_exit()
        if died is not None:
            raise StackStartError(SUPERVISOR, died, supervisor_log)
        if time.monotonic() >= deadline:
            pending = None
            if state is not None:
                pending = next((c for c in state.components if c.status != "healthy"), None)
            if pending is None:
                raise StackStartError(SUPERVISOR, f"no state written within {timeout:g}s", supervisor_log)
            reason = f"not healthy within {timeout:g}s ({pending.status}"
            reason += f": {pending.detail})" if pending.detail else ")"
            raise StackStartError(pending.name, reason, pending.log_path)
        time.sleep(WAIT_POLL)


class Stack:
    """NATS, Temporal and the selected services, supervised.

    >>> with Stack(StackConfig.with_free_ports(data_dir=tmp, services=["retrieval"])) as stack:
    ...     channel = grpc.insecure_channel(stack.grpc_addr("retrieval"))
    """

    def __init__(self, config: StackConfig | None = None, *, detach: bool = False) -> None:
        self.config = config if config is not None else StackConfig()
        self.detach = detach
        self.run_dir = RunDir(self.config.run_dir)
        self.components: list[ComponentSpec] = []
        self._supervisor: Supervisor | None = None
        self._supervisor_process: subprocess.Popen[bytes] | None = None
        self._started = False

    # Addresses -------------------------------------------------------------------------------

    @property
    def gateway_url(self) -> str:
        return self.config.gateway_url

    @property
    def temporal_ui_url(self) -> str:
        return self.config.temporal_ui_url

    @property
    def temporal_address(self) -> str:
        return self.config.temporal_address

    @property
    def nats_url(self) -> str:
        """One server's URL, or the cluster's comma-separated (``build_broker`` takes either)."""
        return self.config.nats_url

    @property
    def nats_urls(self) -> list[str]:
        """Every NATS server's URL (``nats.connect(servers=…)``)."""
        return self.config.nats_urls

    def grpc_addr(self, name: str) -> str:
        """The first instance of service ``name``."""
        return self.config.grpc_addr(name)

    def grpc_addresses(self, name: str) -> str:
        """Every instance of service ``name``, comma-separated (``open_channel`` balances over them)."""
        return grpc_addresses(self.config, name)

    def sign_as_local_client(self) -> None:
        """Make this process's direct gRPC and NATS calls trusted by the stack's services: its identity
        tokens are signed with the stack's ``local-client`` key (written when the stack starts); with
        TLS on (``KS_STACK_TLS``) its channels also present the ``local-client`` certificate."""
        from knowsphere_runtime.identity_token import install_from_keys

        install_from_keys(self.config.identity_dir, LOCAL_CLIENT_ISSUER)
        client_tls = self.local_client_tls()
        if client_tls is not None:
            from knowsphere_runtime.rpc.tls import install_tls

            install_tls(client_tls)

    def local_client_tls(self) -> MutualTls | None:
        """The ``local-client`` certificate for a channel to the services
        (``open_channel(addr, tls=stack.local_client_tls())``); ``None`` without TLS."""
        if not self.config.tls:
            return None
        return tls_files(self.config.tls_dir, LOCAL_CLIENT_ISSUER).load()

    def nats_auth(self, identity: str = LOCAL_CLIENT_ISSUER) -> NatsAuthSettings:
        """How this process connects to the stack's NATS as ``identity``: by default ``local-client``,
        with every right; a service's name to act as that service. Pass it to ``build_broker(…,
        auth=stack.nats_auth())``, or its ``connect_options()`` to ``nats.connect``."""
        from knowsphere_stack.nats_auth import client_auth

        return client_auth(self.config, identity)

    @property
    def supervisor_log(self) -> Path:
        return self.config.log_path(SUPERVISOR)

    # Lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float | None = None) -> StackState:
        """Start everything and block until every health check passes.

        On failure everything started is stopped again and :class:`StackStartError` is raised.
        """
        if self._started:
            raise RuntimeError("this Stack has already been started")
        timeout = self.config.health_timeout if timeout is None else timeout
        supervisor = running_supervisor(self.run_dir)
        if supervisor is not None:
            raise StackAlreadyRunningError(
                SUPERVISOR,
                f"a stack is already running from {self.config.data_dir} (supervisor pid {supervisor.pid})",
            )
        # Leftovers of a stack whose supervisor died: stop them before their ports are checked.
        stop_running_stack(self.run_dir, self.config.stop_grace)
        check_services_installed(self.config)
        check_replicas_can_share(self.config)
        check_ports_free(self.config)
        self.components = build_components(self.config)
        self._prepare_directories()
        self._started = True
        try:
            if self.detach:
                self._launch_detached()
            else:
                self._launch_in_thread()
            return wait_until_healthy(
                self.state,
                [spec.name for spec in self.components],
                timeout,
                supervisor_exit=self._supervisor_exit,
                supervisor_log=self.supervisor_log if self.detach else None,
            )
        except BaseException:
            self.stop()
            raise

    def stop(self, grace: float | None = None) -> StopReport:
        """Stop everything this stack started; safe to call more than once."""
        if not self._started:
            return StopReport()
        grace = self.config.stop_grace if grace is None else grace
        if self._supervisor is not None:
            self._supervisor.request_stop()
            self._supervisor.join(grace * max(len(self.components), 1) + SUPERVISOR_EXIT_MARGIN)
            self._supervisor = None
            atexit.unregister(self.stop)
        report = stop_running_stack(self.run_dir, grace)
        self._reap_supervisor()
        self._started = False
        return report

    def state(self) -> StackState | None:
        if self._supervisor is not None:
            return self._supervisor.snapshot()
        return self.run_dir.read_state()

    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # Internals -------------------------------------------------------------------------------

    def _policy(self) -> RestartPolicy:
        c = self.config
        return RestartPolicy(
            backoff_initial=c.restart_backoff_initial,
            backoff_max=c.restart_backoff_max,
            max_crashes=c.restart_max_crashes,
            crash_window=c.restart_crash_window,
            stop_grace=c.stop_grace,
        )

    def _prepare_directories(self) -> None:
        self.config.log_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir.ensure()
        for spec in self.components:
            dir_name = "ingestion" if spec.name.startswith("ingestion") else spec.name
            self.config.service_data_dir(dir_name).mkdir(parents=True, exist_ok=True)
        # A fresh state: never let `up` read the previous run's verdicts.
        self.run_dir.remove_state()

    def _launch_in_thread(self) -> None:
        self._supervisor = Supervisor(self.components, self.run_dir.path, self._policy())
        self._supervisor.start_in_thread()
        atexit.register(self.stop)

    def _launch_detached(self) -> None:
        plan = SupervisorPlan(run_dir=self.run_dir.path, components=self.components, policy=self._policy())
        with open(self.supervisor_log, "ab") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "knowsphere_stack.supervisor_process"],
                stdin=subprocess.PIPE,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        self._supervisor_process = process
        start_time = process_identity.start_time(process.pid)
        if start_time is not None:
            self.run_dir.write_pid(SUPERVISOR, process.pid, start_time)
        # The plan (with the services' environment, maybe a generated MASTER_KEY) goes through a pipe,
        # never to disk.
        assert process.stdin is not None
        # If it died before reading, _supervisor_exit reports it with its log.
        with contextlib.suppress(BrokenPipeError):
            process.stdin.write(plan.model_dump_json().encode())
        with contextlib.suppress(BrokenPipeError):
            process.stdin.close()

    def _supervisor_exit(self) -> str | None:
        if self._supervisor_process is not None:
            code = self._supervisor_process.poll()
            if code is not None:
                return f"the supervisor exited with code {code}"
        if self._supervisor is not None and not self._supervisor.thread_alive():
            return f"the supervisor thread ended: {self._supervisor.failure!r}"
        return None

    def _reap_supervisor(self) -> None:
        if self._supervisor_process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._supervisor_process.wait(timeout=KILL_CONFIRM_TIMEOUT)
            self._supervisor_process = None
