"""The embedded graph server's own behaviour: bad settings, a JVM that dies, a second server on a data dir.

Starting a working server (3–7 s) is covered once per session by ``tests/contract/test_graph_store.py``;
these tests either fail before a JVM is started or start one that dies at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from knowsphere_retrieval.adapters.graph_server import EmbeddedBoltServer, EmbeddedServerError


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bolt_port": 70000}, "bolt_port must be between 0 and 65535"),
        ({"heap": "lots"}, "heap must be a JVM size such as '512m'"),
        ({"database": "x; drop"}, "database must be a letter then up to 63 letters"),
        ({"start_timeout_seconds": 0}, "start_timeout_seconds and stop_timeout_seconds must be positive"),
    ],
)
def test_bad_settings_are_refused_with_the_setting_named(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EmbeddedBoltServer(tmp_path, **kwargs)


async def test_a_jvm_that_dies_at_start_is_reported_with_its_output(tmp_path: Path) -> None:
    server = EmbeddedBoltServer(tmp_path / "graph", 0, jvm_options=["-XX:+NoSuchOptionAnywhere"])

    with pytest.raises(EmbeddedServerError, match=r"exited with status 1 during start") as failure:
        await server.start()

    assert "NoSuchOptionAnywhere" in str(failure.value)  # the JVM's own words are quoted
    assert not server.running
    assert not (tmp_path / "graph" / "server.pid").exists()
    password = tmp_path / "graph" / "root-password"
    assert password.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "graph").stat().st_mode & 0o777 == 0o700


async def test_a_data_dir_whose_password_is_lost_is_refused(tmp_path: Path) -> None:
    users = tmp_path / "arcadedb" / "config" / "server-users.jsonl"
    users.parent.mkdir(parents=True)
    users.write_text("{}\n")

    with pytest.raises(EmbeddedServerError, match="the root password of this data dir is lost"):
        await EmbeddedBoltServer(tmp_path, 0).start()


def sleeper_naming(root: Path) -> subprocess.Popen[bytes]:
    """A stand-in for a server: a process whose command line names the server root."""
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"-Darcadedb.server.rootPath={root}"]
    )


def orphaned_sleeper_naming(root: Path) -> int:
    """The same, started by a shell that exits at once, as a server outliving its parent would be."""
    sleeper = f"{sys.executable} -c 'import time; time.sleep(60)' -Darcadedb.server.rootPath={root}"
    started = subprocess.run(
        ["sh", "-c", f"{sleeper} >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True
    )
    return int(started.stdout)


def gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


async def test_a_data_dir_in_use_by_a_live_server_is_refused(tmp_path: Path) -> None:
    stand_in = sleeper_naming(tmp_path / "arcadedb")
    try:
        (tmp_path / "server.pid").write_text(f"{stand_in.pid} {os.getpid()}")
        with pytest.raises(EmbeddedServerError, match=f"another embedded graph server \\(pid {stand_in.pid}"):
            await EmbeddedBoltServer(tmp_path, 0).start()
        assert stand_in.poll() is None  # left alone
    finally:
        stand_in.kill()
        stand_in.wait()


async def test_a_server_orphaned_by_a_dead_parent_is_stopped_before_a_new_start(tmp_path: Path) -> None:
    orphan = orphaned_sleeper_naming(tmp_path / "arcadedb")
    (tmp_path / "server.pid").write_text(f"{orphan} {os.getpid() + 1_000_000}")  # its starter is gone
    server = EmbeddedBoltServer(tmp_path, 0, jvm_options=["-XX:+NoSuchOptionAnywhere"])

    try:
        with pytest.raises(EmbeddedServerError, match="exited with status 1"):
            await server.start()  # got past the orphan, then failed on the option
        assert gone(orphan)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(orphan, signal.SIGKILL)
