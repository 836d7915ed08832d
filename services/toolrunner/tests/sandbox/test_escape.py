"""The escape suite: each attempt a hostile skill script would make, and the clean failure it meets.
Modelled on the sandbox tests of OpenAI's Codex and Dify. Every test also does the harmless thing next
to the hostile one (write in /workspace, open a UNIX socket, fork a little …), so a sandbox that
simply failed to run anything could not pass."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from knowsphere_toolrunner.sandbox import SandboxError, SandboxErrorCode, SandboxLimits, ScriptSandbox
from knowsphere_toolrunner.sandbox.host import landlock_abi
from knowsphere_toolrunner.skills import SkillError, SkillErrorCode, SkillStore

from .conftest import processes_left_after, reported, run_python, run_uids

MASTER_KEY = "ks-master-key-7f3a9c0e5b1d4e2f"
OTHER_TENANT_SECRET = "globex private skill: do not share"


@pytest.fixture
def secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A master key on disk and in the environment, and another tenant's skill, all on the host."""
    key_file = tmp_path / "master.key"
    key_file.write_text(MASTER_KEY)
    monkeypatch.setenv("KS_MASTER_KEY", MASTER_KEY)
    store = SkillStore(tmp_path / "data")
    other = store.tenant_dir("globex") / "pricing"
    other.mkdir(parents=True)
    (other / "SKILL.md").write_text(f"---\ndescription: {OTHER_TENANT_SECRET}\n---\n")
    return {"key": key_file, "other_skill": other / "SKILL.md", "data": tmp_path / "data"}


async def test_secrets_outside_the_sandbox_cannot_be_read(
    sandbox: ScriptSandbox, secrets: dict[str, Path]
) -> None:
    targets = [str(secrets["key"]), str(secrets["other_skill"]), str(secrets["data"])]
    result = await run_python(
        sandbox,
        f"""
        for path in {targets!r}:
            attempt("host:" + path, lambda path=path: open(path).read())
            attempt("via-proc-root:" + path, lambda path=path: open("/proc/1/root" + path).read())
        attempt("shadow", lambda: open("/etc/shadow").read())
        attempt("skill-escape", lambda: open("/skill/../../" + {targets[0]!r}).read())
        attempt("host-processes", lambda: sorted(p for p in os.listdir("/proc") if p.isdigit()))
        results["env"] = dict(os.environ)
        attempt("init-environ", lambda: open("/proc/1/environ").read())
        attempt("own-input", lambda: open("/workspace/input/note.txt").read())
        report()
        """,
        inputs={"note.txt": b"mine"},
    )
    seen = reported(result)
    assert MASTER_KEY not in result.stdout.decode() and OTHER_TENANT_SECRET not in result.stdout.decode()
    for label, outcome in seen.items():
        if label.startswith(("host:", "via-proc-root:")) or label in ("shadow", "skill-escape"):
            assert outcome in ("ENOENT", "EACCES"), (label, outcome)
    assert seen["own-input"] == ["ok", "mine"]
    assert seen["host-processes"][1] == ["1", "2", "3"]  # bwrap's init, the launcher, the script
    assert "KS_MASTER_KEY" not in seen["env"]
    assert set(seen["env"]) == {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE", "PWD"}


async def test_nothing_outside_the_workspace_can_be_written(sandbox: ScriptSandbox, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    targets = [
        "/x",
        "/etc/x",
        "/etc/passwd",
        "/usr/x",
        "/usr/bin/python3",
        "/skill/x",
        "/skill/scripts/main.py",
    ]
    targets += ["/workspace/input/x", "/workspace/input/data.txt", "/sandbox/launcher.py", "/dev/x"]
    targets += ["/proc/sys/kernel/hostname", "/proc/1/mem", str(victim), str(tmp_path / "new.txt")]
    result = await run_python(
        sandbox,
        f"""
        for path in {targets!r}:
            attempt(path, lambda path=path: open(path, "w").write("pwned"))
        attempt("mkdir /opt", lambda: os.mkdir("/opt"))
        attempt("remove input", lambda: os.remove("/workspace/input/data.txt"))
        attempt("workspace", lambda: open("/workspace/scratch.txt", "w").write("fine"))
        attempt("tmp", lambda: open("/tmp/scratch.txt", "w").write("fine"))
        attempt("output", lambda: open("/workspace/output/kept.txt", "w").write("fine"))
        report()
        """,
        inputs={"data.txt": b"original"},
    )
    seen = reported(result)
    for path in [*targets, "mkdir /opt", "remove input"]:
        assert seen[path] in ("EROFS", "EACCES", "ENOENT", "EPERM"), (path, seen[path])
    assert seen["workspace"] == seen["tmp"] == seen["output"] == ["ok", 4]
    assert victim.read_text() == "untouched"
    assert not (tmp_path / "new.txt").exists()
    assert result.outputs == {"kept.txt": b"fine"}


async def test_symlinks_in_the_workspace_do_not_leak_files_into_the_outputs(sandbox: ScriptSandbox) -> None:
    result = await run_python(
        sandbox,
        """
        out = "/workspace/output"
        attempt("link-passwd", lambda: os.symlink("/etc/passwd", out + "/passwd"))
        attempt("link-launcher", lambda: os.symlink("/sandbox/launcher.py", out + "/launcher.py"))
        attempt("link-dir", lambda: os.symlink("/skill", out + "/skill"))
        os.mkfifo(out + "/fifo")
        open(out + "/real.txt", "w").write("real")
        attempt("replace-input-with-link", lambda: (os.rename("/workspace/input", "/workspace/gone")))
        attempt("replace-skill-with-link", lambda: (os.rmdir("/skill"), os.symlink("/etc", "/skill")))
        report()
        """,
        inputs={"a.txt": b"a"},
    )
    seen = reported(result)
    assert seen["link-passwd"] == seen["link-launcher"] == seen["link-dir"] == "ok"
    assert seen["replace-input-with-link"] in ("EBUSY", "EROFS", "EACCES", "EPERM")
    assert seen["replace-skill-with-link"] in ("EBUSY", "EROFS", "EACCES", "EPERM")
    assert result.outputs == {"real.txt": b"real"}


async def test_the_output_folder_replaced_by_a_symlink_yields_nothing(sandbox: ScriptSandbox) -> None:
    result = await run_python(
        sandbox,
        """
        os.rmdir("/workspace/output")
        os.symlink("/etc", "/workspace/output")
        print(sorted(os.listdir("/workspace/output"))[:3])
        """,
    )
    assert result.exit_code == 0
    assert result.outputs == {}


def test_a_symlink_in_a_skill_is_refused_before_anything_runs(secrets: dict[str, Path]) -> None:
    store = SkillStore(secrets["data"])
    skill = store.tenant_dir("acme") / "report"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\ndescription: reports\n---\n")
    (skill / "scripts" / "key").symlink_to(secrets["key"])
    with pytest.raises(SkillError) as caught:
        store.load_files("acme", "report")
    assert caught.value.code == SkillErrorCode.UNSAFE_FILE
    with pytest.raises(SkillError) as caught:
        store.read_file("acme", "/skills/report/scripts/key", bound={"report"})
    assert caught.value.code == SkillErrorCode.UNSAFE_FILE
    # The skill folder itself swapped for a link to another tenant's skill.
    (store.tenant_dir("acme") / "pricing").symlink_to(secrets["other_skill"].parent)
    with pytest.raises(SkillError) as caught:
        store.load_files("acme", "pricing")
    assert caught.value.code == SkillErrorCode.UNSAFE_FILE
    with pytest.raises(SkillError) as caught:
        store.read_file("acme", "/skills/pricing/SKILL.md", bound={"pricing"})
    assert caught.value.code == SkillErrorCode.UNSAFE_FILE
    assert [skill.name for skill in store.list_skills("acme")] == ["report"]


@pytest.fixture
async def host_listeners(tmp_path: Path) -> AsyncIterator[dict[str, object]]:
    """A TCP listener on 127.0.0.1 and a UNIX socket, both reachable from the host; they count
    connections, which a sandboxed script must never make."""
    accepted: list[str] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append("connection")
        writer.close()

    tcp = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    unix_path = tmp_path / "service.sock"
    unix = await asyncio.start_unix_server(on_connect, str(unix_path))
    unix_path.parent.chmod(0o755)
    unix_path.chmod(0o777)
    port = tcp.sockets[0].getsockname()[1]
    # The listeners do answer from the host.
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.close()
    _, writer = await asyncio.open_unix_connection(str(unix_path))
    writer.close()
    await asyncio.sleep(0.05)
    assert len(accepted) == 2
    accepted.clear()
    try:
        yield {"port": port, "unix": str(unix_path), "accepted": accepted}
    finally:
        tcp.close()
        unix.close()


async def test_no_network_no_host_sockets_no_dns(
    sandbox: ScriptSandbox, host_listeners: dict[str, object]
) -> None:
    port, unix_path = host_listeners["port"], host_listeners["unix"]
    tcp_targets = [
        ("127.0.0.1", port),
        ("127.0.0.1", 4222),
        ("127.0.0.1", 5432),
        ("10.0.0.1", 80),
        ("1.1.1.1", 53),
    ]
    unix_targets = [unix_path, "/var/run/postgresql/.s.PGSQL.5432", "/run/postgresql/.s.PGSQL.5432"]
    result = await run_python(
        sandbox,
        f"""
        for host, port in {tcp_targets!r}:
            attempt(f"tcp {{host}}:{{port}}", lambda a=(host, port): socket.create_connection(a, timeout=2))
        attempt("tcp6", lambda: socket.create_connection(("::1", 4222), timeout=2))
        attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53)))
        attempt("raw", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
        attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW))
        for path in {unix_targets!r}:
            attempt("unix " + path, lambda p=path: socket.socket(socket.AF_UNIX).connect(p))
        attempt("abstract", lambda: socket.socket(socket.AF_UNIX).connect("\\0/tmp/.X11-unix/X0"))
        attempt("dns", lambda: socket.getaddrinfo("example.com", 443))
        attempt("dns-localhost", lambda: socket.getaddrinfo("localhost", 4222))
        attempt("unix-pair", lambda: len(socket.socketpair()))
        lines = open("/proc/net/dev").read().splitlines()[2:]
        results["interfaces"] = [line.split(":")[0].strip() for line in lines]
        report()
        """,
    )
    seen = reported(result)
    for label, outcome in seen.items():
        if label.startswith(("tcp", "udp", "raw", "netlink")):
            assert outcome in ("EAFNOSUPPORT", "EPERM", "EACCES", "ENETUNREACH", "ECONNREFUSED"), (
                label,
                outcome,
            )
        if label.startswith(("unix ", "abstract")):
            assert outcome in ("ENOENT", "ECONNREFUSED", "EPERM", "EACCES"), (label, outcome)
    assert seen["dns"] == seen["dns-localhost"] == "gaierror"
    assert seen["unix-pair"] == ["ok", 2]  # UNIX sockets inside the sandbox still work
    assert seen["interfaces"] == ["lo"]  # a network namespace of its own, even without seccomp
    assert host_listeners["accepted"] == []


async def test_a_fork_bomb_meets_the_process_limit_and_leaves_nothing_behind(
    make_sandbox: Callable[..., ScriptSandbox],
) -> None:
    limit = 16
    sandbox = make_sandbox(max_processes=limit, wall_time_seconds=20)
    result = await run_python(
        sandbox,
        """
        import time
        children, refused = 0, 0
        for _ in range(500):
            try:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                children += 1
            except BlockingIOError:
                refused += 1
        results.update(children=children, refused=refused)
        report()
        """,
    )
    seen = reported(result)
    assert 0 < seen["children"] < limit
    assert seen["refused"] == 500 - seen["children"]
    assert result.duration_seconds < 10  # the sleeping children died with the run
    assert processes_left_after(run_uids(sandbox)) == []


async def test_memory_past_the_limit_fails_cleanly(make_sandbox: Callable[..., ScriptSandbox]) -> None:
    sandbox = make_sandbox(memory_bytes=128 * 1024 * 1024)
    result = await run_python(
        sandbox,
        """
        attempt("small", lambda: len(bytearray(32 * 1024 * 1024)))
        attempt("large", lambda: len(bytearray(512 * 1024 * 1024)))
        report()
        """,
    )
    seen = reported(result)
    assert seen == {"small": ["ok", 32 * 1024 * 1024], "large": "MemoryError"}


async def test_memory_spread_over_many_processes_is_capped_for_the_whole_run(
    make_sandbox: Callable[..., ScriptSandbox],
) -> None:
    # Each process stays under its own address-space limit; together they pass the run's limit.
    sandbox = make_sandbox(memory_bytes=256 * 1024 * 1024, max_run_memory_bytes=192 * 1024 * 1024)
    result = await run_python(
        sandbox,
        """
        import time
        for _ in range(6):
            if os.fork() == 0:
                block = bytearray(64 * 1024 * 1024)
                time.sleep(30)
                os._exit(0)
        time.sleep(30)
        """,
    )
    assert result.memory_exceeded and not result.timed_out
    assert result.exit_code is None and result.signal == 9
    assert result.duration_seconds < 10
    assert processes_left_after(run_uids(sandbox)) == []


async def test_filling_the_disk_stops_at_the_workspace_size(
    make_sandbox: Callable[..., ScriptSandbox],
) -> None:
    workspace = 4 * 1024 * 1024
    sandbox = make_sandbox(workspace_bytes=workspace, tmp_bytes=2 * 1024 * 1024, max_output_bytes=1024)
    result = await run_python(
        sandbox,
        """
        def fill(path):
            written = 0
            with open(path, "wb") as handle:
                try:
                    while written < 1024 ** 3:
                        handle.write(b"x" * 65536)
                        handle.flush()
                        written += 65536
                finally:
                    results[path + " bytes"] = written
        attempt("/workspace/output/fill", lambda: fill("/workspace/output/fill"))
        attempt("/tmp/fill", lambda: fill("/tmp/fill"))
        attempt("/dev/shm/fill", lambda: fill("/dev/shm/fill"))
        report()
        """,
    )
    seen = reported(result)
    assert seen["/workspace/output/fill"] == "ENOSPC"
    assert 0 < seen["/workspace/output/fill bytes"] <= workspace
    assert seen["/tmp/fill"] == seen["/dev/shm/fill"] == "ENOSPC"
    assert seen["/tmp/fill bytes"] <= 2 * 1024 * 1024
    assert result.outputs == {} and result.outputs_truncated  # over max_output_bytes: left out


async def test_a_run_past_the_time_limit_is_killed_with_everything_it_started(
    make_sandbox: Callable[..., ScriptSandbox],
) -> None:
    sandbox = make_sandbox(wall_time_seconds=1.0, cpu_seconds=60)
    started = time.monotonic()
    result = await run_python(
        sandbox,
        """
        import subprocess
        # A detached grandchild in its own session, and a busy loop.
        subprocess.Popen(["/bin/sh", "-c", "sleep 300"], start_new_session=True)
        open("/workspace/output/partial.txt", "w").write("half")
        while True:
            pass
        """,
    )
    elapsed = time.monotonic() - started
    assert result.timed_out and result.exit_code is None
    assert elapsed < 3.0
    assert result.outputs == {}
    assert processes_left_after(run_uids(sandbox)) == []


async def test_a_caller_that_gives_up_leaves_no_run_behind(
    make_sandbox: Callable[..., ScriptSandbox],
) -> None:
    sandbox = make_sandbox(wall_time_seconds=60)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.0):
            await run_python(
                sandbox, "import time\nopen('/workspace/output/x', 'w').write('x')\ntime.sleep(60)"
            )
    assert processes_left_after(run_uids(sandbox)) == []  # the work_dir fixture checks the run folder


async def test_cpu_time_past_the_limit_ends_the_script(make_sandbox: Callable[..., ScriptSandbox]) -> None:
    sandbox = make_sandbox(cpu_seconds=1, wall_time_seconds=20)
    result = await run_python(sandbox, "while True:\n    pass\n")
    assert not result.timed_out
    assert result.exit_code is None and result.signal in (24, 9)  # SIGXCPU, then SIGKILL at the hard limit
    assert result.duration_seconds < 5


async def test_setuid_and_privilege_syscalls_fail(sandbox: ScriptSandbox) -> None:
    result = await run_python(
        sandbox,
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        def syscall(number, *args):
            if libc.syscall(number, *args) == -1:
                raise OSError(ctypes.get_errno(), "")
        attempt("setuid", lambda: os.setuid(0))
        attempt("setgid", lambda: os.setgid(0))
        attempt("setgroups", lambda: os.setgroups([0]))
        attempt("setresuid", lambda: os.setresuid(0, 0, 0))
        attempt("ptrace", lambda: syscall(101, 0, 0, 0, 0))  # PTRACE_TRACEME
        attempt("mount", lambda: syscall(165, b"none", b"/tmp", b"tmpfs", 0, None))
        attempt("unshare-user", lambda: syscall(272, 0x10000000))  # CLONE_NEWUSER
        attempt("setns", lambda: syscall(308, 0, 0))
        attempt("bpf", lambda: syscall(321, 0, None, 0))
        attempt("io_uring", lambda: syscall(425, 8, None))
        attempt("keyctl", lambda: syscall(250, 0, 0, 0, 0, 0))
        attempt("chroot", lambda: os.chroot("/tmp"))
        attempt("getpid", lambda: syscall(39))  # allowed: the filter is not a blanket refusal
        attempt("signal-init", lambda: os.kill(1, 0))
        report()
        """,
    )
    seen = reported(result)
    # uid/gid 0 do not exist in the sandbox's user namespace (EINVAL); without capabilities nothing
    # may change identity anyway (EPERM).
    for label in ("setuid", "setgid", "setgroups", "setresuid"):
        assert seen[label] in ("EPERM", "EINVAL"), (label, seen[label])
    for label in ("ptrace", "mount", "unshare-user", "setns"):
        assert seen[label] == "EPERM", (label, seen[label])
    for label in ("bpf", "io_uring", "keyctl", "chroot"):
        assert seen[label] == "EPERM", (label, seen[label])
    assert seen["getpid"] == "ok"
    if landlock_abi() >= 6:
        assert seen["signal-init"] == "EPERM"  # Landlock's signal scope: nothing outside the run


async def test_the_launcher_cannot_be_used_to_smuggle_outputs(sandbox: ScriptSandbox) -> None:
    """The script cannot reach the report channel through /proc (the launcher is not dumpable)."""
    result = await run_python(
        sandbox,
        """
        for fd in range(3, 10):
            attempt(f"fd{fd}", lambda fd=fd: os.write(fd, b"file 1 6576696c\\nx"))
            attempt(f"proc{fd}", lambda fd=fd: open(f"/proc/{os.getppid()}/fd/{fd}", "wb").write(b"x"))
        report()
        """,
    )
    seen = reported(result)
    assert all(outcome in ("EBADF", "EACCES", "ENOENT", "EPERM") for outcome in seen.values()), seen
    assert "evil" not in result.outputs
    with contextlib.suppress(ValueError):
        json.loads(result.stdout)
    assert os.geteuid() != 0 or "uid-per-run" in result.protections


def test_a_missing_bwrap_is_reported_as_unavailable(work_dir: Path) -> None:
    with pytest.raises(SandboxError) as caught:
        ScriptSandbox(SandboxLimits(work_dir=work_dir, bwrap_path=work_dir / "no-such-bwrap"))
    assert caught.value.code == SandboxErrorCode.UNAVAILABLE


async def test_a_sandbox_that_cannot_start_is_unavailable_not_a_script_failure(work_dir: Path) -> None:
    # /bin/false stands for a bwrap that cannot set up (no user namespaces, a seccomp load error …).
    sandbox = ScriptSandbox(SandboxLimits(work_dir=work_dir, bwrap_path=Path("/bin/false")))
    with pytest.raises(SandboxError) as caught:
        await run_python(sandbox, "print('never')")
    assert caught.value.code == SandboxErrorCode.UNAVAILABLE
