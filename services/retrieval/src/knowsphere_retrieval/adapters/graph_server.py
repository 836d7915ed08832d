"""The embedded graph server: ArcadeDB with its Bolt plugin, run as a child JVM on loopback.

The ``arcadedb-embedded`` package ships ArcadeDB's jars and its own JRE. Its Python API embeds the
engine *in this process* through JPype; we do not use that API, only the runtime it ships: a JPype
JVM can be started once per process and never restarted, shares this process's memory and signals,
and cannot be stopped cleanly. Instead ``EmbeddedBoltServer`` runs the bundled ``java`` with
``com.arcadedb.server.ArcadeDBServer`` as a child process, so the graph store talks to it over Bolt
with the official ``neo4j`` driver exactly as it talks to a Neo4j server in production.

Layout under ``data_dir`` (created 0700):

- ``root-password`` — generated on first start, 0600; ArcadeDB reads it once to create its ``root``
  user (``arcadedb.server.rootPasswordPath``) and stores only a PBKDF2 hash of it afterwards;
- ``arcadedb/`` — the server root: ``databases/``, ``config/`` (users), ``log/``;
- ``server.out`` — the JVM's console output of the last start, quoted when a start fails;
- ``server.pid`` — the JVM's pid while it runs, so that a JVM orphaned by a hard crash of its
  parent is recognised (by its command line naming this data dir) and stopped before a new start.

Every listener binds to loopback: Bolt on ``bolt_port`` and ArcadeDB's HTTP API on ``http_port``
(ArcadeDB always serves HTTP; it is used only to create the database at start). On Linux the child
gets ``PR_SET_PDEATHSIG``, so it is sent SIGTERM when the thread that started it ends: start it from
the thread that lives as long as the service (the event loop's), not from a worker thread.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import importlib.util
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Final

from neo4j import AsyncGraphDatabase

DEFAULT_HEAP: Final = "512m"
DEFAULT_DATABASE: Final = "knowsphere"
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_START_TIMEOUT_SECONDS: Final = 60.0
DEFAULT_STOP_TIMEOUT_SECONDS: Final = 30.0
ROOT_USER: Final = "root"
LOG_TAIL_LINES: Final = 40
_POLL_INTERVAL_SECONDS: Final = 0.1
_HTTP_TIMEOUT_SECONDS: Final = 5.0
_PASSWORD_BYTES: Final = 32
_HEAP_PATTERN: Final = re.compile(r"^[1-9][0-9]*[kKmMgG]?$")
_DATABASE_NAME_PATTERN: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_SERVER_MAIN_CLASS: Final = "com.arcadedb.server.ArcadeDBServer"
_BOLT_PLUGIN: Final = "Bolt:com.arcadedb.bolt.BoltProtocolPlugin"
_PR_SET_PDEATHSIG: Final = 1

# The JVM flags the package's own launcher (arcadedb_embedded.jvm) passes, less its XML-import ones:
# the engine needs the vector module and these reflective opens.
_ENGINE_JVM_OPTIONS: Final = (
    "--add-modules=jdk.incubator.vector",
    "--enable-native-access=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=java.base/java.nio.channels.spi=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "-XX:+UseCompactObjectHeaders",
    "-Djava.awt.headless=true",
    "-Dfile.encoding=UTF-8",
    "-Dpolyglot.engine.WarnInterpreterOnly=false",
)
# A small heap on a machine with few cores: the serial collector has no GC threads to compete with
# the service and the least footprint. Override with ``jvm_options`` (a later flag wins).
_DEFAULT_GC_OPTIONS: Final = ("-XX:+UseSerialGC",)


class EmbeddedServerError(RuntimeError):
    """The embedded graph server could not be started, reached, or stopped."""


@dataclass(frozen=True)
class BoltCredentials:
    user: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class ArcadeDBRuntime:
    """The bundled ``java`` executable and the jar directory of the ``arcadedb-embedded`` package."""

    java: Path
    jars: Path

    @classmethod
    def bundled(cls) -> ArcadeDBRuntime:
        # find_spec, not import: importing the package starts nothing, but pulls in JPype for no use.
        spec = importlib.util.find_spec("arcadedb_embedded")
        if spec is None or not spec.submodule_search_locations:
            raise EmbeddedServerError(
                "the embedded graph server needs the 'arcadedb-embedded' package (it ships ArcadeDB "
                "and a JRE); install it, or set a Neo4j URL to use a Neo4j server instead"
            )
        root = Path(next(iter(spec.submodule_search_locations)))
        runtime = cls(java=root / "jre" / "bin" / "java", jars=root / "jars")
        if not runtime.java.is_file() or not any(runtime.jars.glob("arcadedb-server-*.jar")):
            raise EmbeddedServerError(
                f"'arcadedb-embedded' at {root} lacks its bundled JRE (jre/bin/java) or server jars "
                "(jars/arcadedb-server-*.jar); reinstall the package"
            )
        return runtime


def free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port that was free on ``host`` a moment ago (another process may still take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class EmbeddedBoltServer:
    """ArcadeDB serving one database over Bolt on loopback, as a child process of this one.

    ``bolt_port`` and ``http_port`` 0 mean a free port picked at start. ``heap`` caps the JVM heap
    (``-Xmx``, e.g. ``"512m"``, ``"2g"``). The root password is generated once and kept in
    ``data_dir/root-password`` (0600); data survive a restart on the same ``data_dir``.
    """

    def __init__(
        self,
        data_dir: Path | str,
        bolt_port: int = 0,
        *,
        http_port: int = 0,
        host: str = DEFAULT_HOST,
        database: str = DEFAULT_DATABASE,
        heap: str = DEFAULT_HEAP,
        jvm_options: Sequence[str] = (),
        start_timeout_seconds: float = DEFAULT_START_TIMEOUT_SECONDS,
        stop_timeout_seconds: float = DEFAULT_STOP_TIMEOUT_SECONDS,
        runtime: ArcadeDBRuntime | None = None,
    ) -> None:
        for name, port in (("bolt_port", bolt_port), ("http_port", http_port)):
            if not 0 <= port <= 65535:
                raise ValueError(f"{name} must be between 0 and 65535 (0 = a free port), got {port}")
        if not _HEAP_PATTERN.match(heap):
            raise ValueError(f"heap must be a JVM size such as '512m' or '2g', got {heap!r}")
        if not _DATABASE_NAME_PATTERN.match(database):
            raise ValueError(
                f"database must be a letter then up to 63 letters, digits or '_', got {database!r}"
            )
        if start_timeout_seconds <= 0 or stop_timeout_seconds <= 0:
            raise ValueError("start_timeout_seconds and stop_timeout_seconds must be positive")
        self._data_dir = Path(data_dir).absolute()
        self._requested_bolt_port = bolt_port
        self._requested_http_port = http_port
        self._host = host
        self._database = database
        self._heap = heap
        self._jvm_options = tuple(jvm_options)
        self._start_timeout = start_timeout_seconds
        self._stop_timeout = stop_timeout_seconds
        self._runtime = runtime
        self._process: subprocess.Popen[bytes] | None = None
        self._console: IO[bytes] | None = None
        self._bolt_port = bolt_port
        self._http_port = http_port
        self._credentials: BoltCredentials | None = None

    # --- what clients need ---------------------------------------------------------------------

    @property
    def uri(self) -> str:
        self._require_running()
        return f"bolt://{self._host}:{self._bolt_port}"

    @property
    def credentials(self) -> BoltCredentials:
        self._require_running()
        assert self._credentials is not None
        return self._credentials

    @property
    def database(self) -> str:
        return self._database

    @property
    def bolt_port(self) -> int:
        self._require_running()
        return self._bolt_port

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    # --- life cycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the JVM and return once the database answers a Cypher query over Bolt."""
        if self._process is not None:
            raise EmbeddedServerError("the embedded graph server is already started")
        runtime = self._runtime or ArcadeDBRuntime.bundled()
        password = await asyncio.to_thread(self._prepare_data_dir)
        if (orphan := await asyncio.to_thread(self._orphan_pid)) is not None:
            await _terminate(orphan, self._stop_timeout)
        self._credentials = BoltCredentials(ROOT_USER, password)
        self._bolt_port = self._requested_bolt_port or free_port(self._host)
        self._http_port = self._requested_http_port or free_port(self._host)
        try:
            # On this thread, not a worker's: PR_SET_PDEATHSIG fires when the starting thread ends.
            self._spawn(runtime)
            await self._wait_until_ready()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """SIGTERM the JVM (ArcadeDB closes its databases in its shutdown hook), SIGKILL on timeout."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                if not await _wait_for_exit(process, self._stop_timeout):
                    process.kill()
                    await _wait_for_exit(process, self._stop_timeout)
        finally:
            if self._console is not None:
                self._console.close()
                self._console = None
            self._pid_path.unlink(missing_ok=True)

    async def __aenter__(self) -> EmbeddedBoltServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # --- internals -----------------------------------------------------------------------------

    @property
    def _console_path(self) -> Path:
        return self._data_dir / "server.out"

    @property
    def _pid_path(self) -> Path:
        return self._data_dir / "server.pid"

    @property
    def _password_path(self) -> Path:
        return self._data_dir / "root-password"

    @property
    def _server_root(self) -> Path:
        return self._data_dir / "arcadedb"

    def _prepare_data_dir(self) -> str:
        """Create the data dir (0700) and the server root; return the root password."""
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._data_dir.chmod(0o700)
        self._server_root.mkdir(exist_ok=True)
        return self._root_password()

    def _spawn(self, runtime: ArcadeDBRuntime) -> None:
        console = open(self._console_path, "wb")  # noqa: SIM115 - stays open while the JVM runs
        try:
            self._process = subprocess.Popen(
                [str(runtime.java), *self._java_arguments(runtime)],
                cwd=self._server_root,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C meant for us must not kill it before we stop it
                preexec_fn=_die_with_parent(),  # only prctl, resolved beforehand
            )
        except BaseException:
            console.close()
            raise
        self._console = console
        self._pid_path.write_text(f"{self._process.pid} {os.getpid()}")

    def _root_password(self) -> str:
        users = self._server_root / "config" / "server-users.jsonl"
        if self._password_path.exists():
            self._password_path.chmod(0o600)
            return self._password_path.read_text(encoding="utf-8")
        if users.exists():
            raise EmbeddedServerError(
                f"{users} exists but {self._password_path} does not: the root password of this "
                "data dir is lost; remove the data dir to start afresh"
            )
        password = secrets.token_urlsafe(_PASSWORD_BYTES)
        fd = os.open(self._password_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(password)
        return password

    def _java_arguments(self, runtime: ArcadeDBRuntime) -> list[str]:
        server_root = self._server_root
        settings = {
            "arcadedb.server.rootPath": server_root,
            "arcadedb.server.rootPasswordPath": self._password_path,
            "arcadedb.server.logsDirectory": server_root / "log",
            # production: no Studio, no LOAD CSV from local files.
            "arcadedb.server.mode": "production",
            "arcadedb.server.plugins": _BOLT_PLUGIN,
            "arcadedb.server.httpIncomingHost": self._host,
            "arcadedb.server.httpIncomingPort": self._http_port,
            "arcadedb.bolt.host": self._host,
            "arcadedb.bolt.port": self._bolt_port,
            "arcadedb.bolt.defaultDatabase": self._database,
        }
        return [
            *_ENGINE_JVM_OPTIONS,
            *_DEFAULT_GC_OPTIONS,
            f"-Xmx{self._heap}",
            f"-XX:ErrorFile={server_root / 'log' / 'hs_err_pid%p.log'}",
            *self._jvm_options,
            *(f"-D{key}={value}" for key, value in settings.items()),
            "-cp",
            str(runtime.jars / "*"),
            _SERVER_MAIN_CLASS,
        ]

    async def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self._start_timeout
        last_error = "no answer yet"
        while True:
            self._raise_if_exited()
            try:
                await asyncio.to_thread(self._http, "GET", "/api/v1/ready")  # 204 once ready
                break
            except OSError as exc:  # refused while the JVM is still starting
                last_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                raise self._failure(f"did not answer on HTTP within {self._start_timeout:g} s ({last_error})")
            await asyncio.sleep(_POLL_INTERVAL_SECONDS)
        await asyncio.to_thread(self._ensure_database)
        await self._wait_for_bolt(deadline)

    def _ensure_database(self) -> None:
        try:
            exists = self._http("GET", f"/api/v1/exists/{self._database}")
            if not (isinstance(exists, dict) and exists.get("result") is True):
                self._http("POST", "/api/v1/server", {"command": f"create database {self._database}"})
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise self._failure(
                f"could not create database {self._database!r}: HTTP {exc.code} {detail}"
            ) from exc

    async def _wait_for_bolt(self, deadline: float) -> None:
        credentials = self.credentials
        driver = AsyncGraphDatabase.driver(self.uri, auth=(credentials.user, credentials.password))
        try:
            while True:
                self._raise_if_exited()
                try:
                    async with driver.session(database=self._database) as session:
                        result = await session.run("RETURN 1 AS ok")
                        if (await result.single(strict=True))["ok"] == 1:
                            return
                except Exception as exc:  # any failure before the deadline means: not ready yet
                    if time.monotonic() > deadline:
                        raise self._failure(
                            f"did not answer a Bolt query ({type(exc).__name__}: {exc})"
                        ) from exc
                await asyncio.sleep(_POLL_INTERVAL_SECONDS)
        finally:
            await driver.close()

    def _http(self, method: str, path: str, body: dict[str, str] | None = None) -> object:
        """One call to ArcadeDB's HTTP API as root; ``None`` for an empty answer (204); raises ``OSError``."""
        credentials = self.credentials
        token = base64.b64encode(f"{credentials.user}:{credentials.password}".encode()).decode()
        request = urllib.request.Request(
            f"http://{self._host}:{self._http_port}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT_SECONDS) as response:
            payload = response.read()
        return json.loads(payload) if payload else None

    def _orphan_pid(self) -> int | None:
        """The pid of a JVM left running on this data dir by a parent that died without stopping it.

        ``server.pid`` holds the JVM's pid and the pid of the process that started it. A JVM still
        the child of that process is not an orphan but another live server, and this start is
        refused; one that was re-parented (its starter died) is returned to be stopped.
        """
        try:
            pid, owner = (int(field) for field in self._pid_path.read_text().split())
            command_line = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            # /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces, so split after ")".
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            self._pid_path.unlink(missing_ok=True)
            return None
        if f"-Darcadedb.server.rootPath={self._server_root}".encode() not in command_line:
            self._pid_path.unlink(missing_ok=True)  # the pid now belongs to an unrelated process
            return None
        if parent == owner:
            raise EmbeddedServerError(
                f"another embedded graph server (pid {pid}, started by pid {owner}) runs on {self._data_dir}"
            )
        self._pid_path.unlink(missing_ok=True)
        return pid

    def _raise_if_exited(self) -> None:
        if self._process is not None and (code := self._process.poll()) is not None:
            raise self._failure(f"exited with status {code} during start")

    def _require_running(self) -> None:
        if self._process is None:
            raise EmbeddedServerError("the embedded graph server is not started")

    def _failure(self, what: str) -> EmbeddedServerError:
        try:
            lines = self._console_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            lines = []
        tail = "\n".join(lines[-LOG_TAIL_LINES:])
        return EmbeddedServerError(
            f"embedded graph server (ArcadeDB, data dir {self._data_dir}) {what}; "
            f"last lines of {self._console_path}:\n{tail}"
        )


async def _wait_for_exit(process: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(_POLL_INTERVAL_SECONDS)
    return True


async def _terminate(pid: int, timeout: float) -> None:
    """SIGTERM a process that is not our child, SIGKILL it if it is still there after ``timeout``."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        for _ in range(int(timeout / _POLL_INTERVAL_SECONDS)):
            await asyncio.sleep(_POLL_INTERVAL_SECONDS)
            if not _alive(pid):
                return
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (exited, not yet reaped by its parent) does not."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGTERM the child when its parent thread ends."""
    if not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(OSError):
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the forked child
        return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    return None
