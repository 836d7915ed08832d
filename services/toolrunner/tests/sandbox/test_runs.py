"""What a skill author sees: inputs in, outputs back, exit code and capped output, clear refusals."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from knowsphere_toolrunner.sandbox import (
    SandboxCommand,
    SandboxError,
    SandboxErrorCode,
    SandboxRequest,
    ScriptSandbox,
)
from knowsphere_toolrunner.sandbox.host import landlock_abi

from .conftest import reported, run_python


async def test_a_script_reads_its_input_and_its_output_files_come_back(sandbox: ScriptSandbox) -> None:
    result = await run_python(
        sandbox,
        """
        import csv, pathlib
        rows = list(csv.reader(open("/workspace/input/data.csv")))
        total = sum(int(row[1]) for row in rows)
        out = pathlib.Path("/workspace/output")
        (out / "summary.txt").write_text(f"{len(rows)} rows, total {total}\\n")
        (out / "charts").mkdir()
        (out / "charts" / "bars.svg").write_bytes(b"<svg/>")
        print("argv", sys.argv[1:], "stdin", sys.stdin.read(), "cwd", os.getcwd())
        print("done", file=sys.stderr)
        sys.exit(3)
        """,
        inputs={"data.csv": b"a,1\nb,2\nc,39\n"},
        args=("--fast", "x y"),
        stdin=b"from stdin",
    )
    assert result.exit_code == 3
    assert not result.timed_out and not result.memory_exceeded
    assert result.outputs == {"summary.txt": b"3 rows, total 42\n", "charts/bars.svg": b"<svg/>"}
    assert result.stdout == b"argv ['--fast', 'x y'] stdin from stdin cwd /workspace\n"
    assert result.stderr == b"done\n"


async def test_scripts_import_their_skills_own_modules_and_shell_scripts_run(sandbox: ScriptSandbox) -> None:
    python = await run_python(
        sandbox, "import helper\nprint(helper.VALUE)", extra_files={"scripts/helper.py": b"VALUE = 42\n"}
    )
    assert python.stdout.strip().endswith(b"42")
    shell = await sandbox.run_script(
        SandboxRequest(
            script="run.sh",
            skill_files={"run.sh": b'echo "shell $1" > /workspace/output/o.txt\n'},
            args=("ok",),
        )
    )
    assert (shell.exit_code, shell.outputs) == (0, {"o.txt": b"shell ok\n"})


async def test_every_protection_this_machine_offers_is_in_force(sandbox: ScriptSandbox) -> None:
    result = await run_python(
        sandbox,
        """
        lines = open("/proc/self/status").read().splitlines()
        status = dict(line.split(":\\t", 1) for line in lines if ":\\t" in line)
        results.update({k: status[k].strip() for k in ("Uid", "NoNewPrivs", "Seccomp", "CapEff", "CapBnd")})
        results["hostname"] = socket.gethostname()
        results["pid"] = os.getpid()
        results["root"] = sorted(os.listdir("/"))
        report()
        """,
    )
    seen = reported(result)
    assert seen["Uid"].split() == ["65534"] * 4
    assert (seen["NoNewPrivs"], seen["Seccomp"], seen["CapEff"], seen["CapBnd"]) == (
        "1",
        "2",
        "0000000000000000",
        "0000000000000000",
    )
    assert seen["hostname"] == "sandbox"
    assert seen["pid"] < 10  # a pid namespace of its own
    assert seen["root"] == [
        "bin",
        "dev",
        "etc",
        "lib",
        "lib64",
        "proc",
        "sandbox",
        "sbin",
        "skill",
        "tmp",
        "usr",
        "workspace",
    ]
    assert {"namespaces", "seccomp", "rlimits"} <= set(result.protections)
    if landlock_abi():
        assert f"landlock-abi-{landlock_abi()}" in result.protections
    else:
        pytest.skip("this kernel has no Landlock; everything else was checked")


async def test_stdout_and_stderr_are_capped_and_the_run_still_ends(
    make_sandbox: Callable[..., ScriptSandbox],
) -> None:
    sandbox = make_sandbox(max_stdout_bytes=1000, max_stderr_bytes=10)
    result = await run_python(sandbox, "sys.stdout.write('x' * 5_000_000); sys.stderr.write('e' * 100)")
    assert (result.exit_code, len(result.stdout), result.stdout_truncated) == (0, 1000, True)
    assert (result.stderr, result.stderr_truncated) == (b"e" * 10, True)


async def test_output_files_over_the_budget_are_left_out_and_flagged(
    make_sandbox: Callable[..., ScriptSandbox],
) -> None:
    sandbox = make_sandbox(max_output_bytes=1500, max_output_files=2)
    result = await run_python(
        sandbox,
        """
        for name, size in (("a", 1000), ("b", 1000), ("c", 10), ("d", 10)):
            open(f"/workspace/output/{name}", "wb").write(b"x" * size)
        """,
    )
    assert result.exit_code == 0
    assert result.outputs == {"a": b"x" * 1000, "c": b"x" * 10}
    assert result.outputs_truncated


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (SandboxRequest(script="../main.py", skill_files={"../main.py": b""}), "script"),
        (SandboxRequest(script="/etc/passwd"), "script"),
        (SandboxRequest(script="main.py", skill_files={}), "script"),
        (SandboxRequest(script="main.rb", skill_files={"main.rb": b""}), "script"),
        (SandboxRequest(script="m.py", skill_files={"m.py": b""}, inputs={"/etc/x": b""}), "inputs"),
        (SandboxRequest(script="m.py", skill_files={"m.py": b""}, inputs={"a/../../x": b""}), "inputs"),
        (
            SandboxRequest(script="m.py", skill_files={"m.py": b""}, inputs={"big": b"x" * 2_000_000}),
            "inputs",
        ),
        (SandboxRequest(script="m.py", skill_files={"m.py": b""}, args=("a",) * 51), "args"),
        (SandboxRequest(script="m.py", skill_files={"m.py": b""}, env={"BAD NAME": "x"}), "env"),
        (SandboxRequest(script="m.py", skill_files={"m.py": b""}, stdin=b"x" * 100_001), "stdin"),
    ],
)
async def test_a_bad_request_is_refused_naming_the_field(
    make_sandbox: Callable[..., ScriptSandbox], request_: SandboxRequest, field: str
) -> None:
    sandbox = make_sandbox(max_input_bytes=1_000_000)
    with pytest.raises(SandboxError) as caught:
        await sandbox.run_script(request_)
    assert (caught.value.code, caught.value.field) == (SandboxErrorCode.INVALID_REQUEST, field)


async def test_concurrent_runs_stay_apart(sandbox: ScriptSandbox) -> None:
    code = """
    import time
    name = open("/workspace/input/name.txt").read()
    time.sleep(0.3)
    results["others"] = sorted(os.listdir("/workspace/output"))
    open(f"/workspace/output/{name}.txt", "w").write(name)
    results["uid"] = os.getuid()
    report()
    """
    runs = await asyncio.gather(
        *(run_python(sandbox, code, inputs={"name.txt": name.encode()}) for name in ("a", "b", "c"))
    )
    assert [run.outputs for run in runs] == [{"a.txt": b"a"}, {"b.txt": b"b"}, {"c.txt": b"c"}]
    assert all(reported(run)["others"] == [] for run in runs)


async def test_a_script_that_kills_the_launcher_gets_a_clean_result(sandbox: ScriptSandbox) -> None:
    result = await run_python(
        sandbox, "import signal\nos.kill(os.getppid(), signal.SIGKILL)\nimport time\ntime.sleep(5)"
    )
    assert result.exit_code is None and result.signal == 9
    assert not result.timed_out and result.duration_seconds < 4
    assert result.outputs == {}


async def test_a_bwrap_the_runs_own_uid_cannot_reach_is_copied_where_it_can(
    make_sandbox: Callable[..., ScriptSandbox], tmp_path: Path
) -> None:
    """A checkout in a private folder (mode 0700, as a fresh clone in a temporary folder is) holds its
    environment's bwrap where the runs' own uid cannot go: the sandbox still starts."""
    from knowsphere_toolrunner.sandbox.host import locate_bwrap

    found = locate_bwrap(None)
    assert found is not None
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    wheel_root = found.resolve().parents[2]  # the installed wheel: <package>/_bin/bwrap and its libs
    for part in (
        found.resolve().relative_to(wheel_root).parts[0],
        *[p.name for p in wheel_root.glob("*.libs")],
    ):
        shutil.copytree(wheel_root / part, private / part)
    hidden = private / found.resolve().relative_to(wheel_root)
    sandbox = make_sandbox(bwrap_path=str(hidden))
    result = await run_python(sandbox, "print('hello from the sandbox')")
    assert result.exit_code == 0 and result.stdout == b"hello from the sandbox\n"


@pytest.fixture
def packages() -> Iterator[Path]:
    """A folder of packages anyone may read, as an operator installs an MCP server's."""
    folder = Path(tempfile.mkdtemp(prefix="ks-sandbox-shown-"))
    folder.chmod(0o755)
    (folder / "note.txt").write_text("seen inside\n")
    yield folder
    shutil.rmtree(folder)


async def test_a_folder_shown_read_only_is_readable_inside_and_a_private_one_is_refused_clearly(
    sandbox: ScriptSandbox, packages: Path, tmp_path: Path
) -> None:
    script = f"cat {packages}/note.txt; echo no > {packages}/note.txt || echo refused"
    command = SandboxCommand(argv=("/bin/sh", "-c", script), read_only_paths=(str(packages),))
    async with sandbox.interactive(command) as running:
        said = (await asyncio.wait_for(running.stdout.read(), 30)).decode()
    assert "seen inside" in said and "refused" in said, (said, running.stderr_tail())
    assert (packages / "note.txt").read_bytes() == b"seen inside\n"

    # Below a folder only its owner may enter (pytest's tmp_path, a checkout in a private temporary
    # folder), the runs' own uids could not reach it: refused before anything starts, saying why.
    private = tmp_path / "site-packages"
    private.mkdir()
    hidden = SandboxCommand(argv=("/bin/true",), read_only_paths=(str(private),))
    with pytest.raises(SandboxError, match="not readable by the sandbox's run users") as refused:
        async with sandbox.interactive(hidden):
            pass
    assert refused.value.field == "read_only_paths"
