"""Each document is parsed in a child process of its own, within a budget of CPU time, memory and
wall-clock time.

A thread cannot be stopped: a file that makes a parser loop, allocate without end or crash would hold a
parse thread and the worker's memory for good. So the worker parses every file in a child process:

- children are forked from a server process (multiprocessing's *forkserver*) that imported the parsers
  once, so a child starts in milliseconds, shares the imported code, and inherits nothing of the worker
  (its threads, sockets, event loop, memory);
- a child parses one document and exits, so whatever it allocated goes back to the system;
- the child limits itself before it reads the file: RLIMIT_AS caps its address space (an allocation
  over it fails with MemoryError), RLIMIT_CPU its CPU time (the kernel ends it with SIGXCPU), and
  Pillow's pixel limit is set to the configured one;
- the parent kills it (SIGKILL) when it outlives the wall-clock budget or the parse is cancelled, and a
  child whose worker died (its connection to the worker closed) ends itself at once;
- with its result, the child reports its peak resident memory and its CPU time; for a child killed for
  time they are read from ``/proc`` just before.

Every way a parse can end is a :class:`BudgetedParse`: the parsed document, or a ParseError whose code
and reason name the budget and its setting (``parse_budget_exceeded``; ``parser_crashed`` for a child
that died), which the parse stage fails the document with for good. Only a bug (an exception that is
not a ParseError) raises :class:`ParserBug`, which the stage retries like any unexpected error.

A fixed number of threads wait for the children, one child per thread: that number is how many
documents a worker parses at once.

Small plain-text files (``.txt``, ``.md``, ``.csv`` up to :data:`IN_PROCESS_MAX_BYTES`) are parsed on
such a thread in the worker itself: their parsers take time and memory in proportion to a size that is
already small and open nothing compressed, and a child's start would be most of their cost (measured on
600 one-kilobyte SciFact records: parse went from 0.6% to 25% of the worker's time with a child each).
Every other format, and larger text, goes to a child.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import os
import resource
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import CancelledError, ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path, PurePath

from PIL import Image

from knowsphere_ingestion.domain.document import ParsedDocument
from knowsphere_ingestion.parsing import parse
from knowsphere_ingestion.parsing.errors import ParseError, ParseErrorCode
from knowsphere_ingestion.parsing.limits import ParseLimits, setting

IN_PROCESS_EXTENSIONS = frozenset({".txt", ".md", ".markdown", ".csv"})
IN_PROCESS_MAX_BYTES = 256 * 1024
"""Plain-text files up to this size are parsed in the worker (see the module's docstring)."""

# After sending its report a child only exits; this long is allowed for that before it is killed.
EXIT_WAIT_SECONDS = 5.0
# A parse that failed after its address space had reached this share of the memory budget failed for
# want of memory, whatever its parser made of the failed allocation (lxml reports an "unknown error").
MEMORY_BUDGET_REACHED = 0.9


class ParserBug(RuntimeError):
    """A parser failed with an exception that is not a ParseError: a defect, not a verdict on the file."""


@dataclass(frozen=True)
class ChildUsage:
    """What the process that parsed one document used."""

    peak_rss_bytes: int
    cpu_seconds: float


@dataclass(frozen=True)
class BudgetedParse:
    """How a budgeted parse ended: the document or the ParseError, and what its process used (None when
    it died before reporting)."""

    document: ParsedDocument | None
    error: ParseError | None
    usage: ChildUsage | None  # None too for a small plain-text file parsed in the worker

    def result(self) -> ParsedDocument:
        """The parsed document; raises the ParseError when there is none."""
        if self.error is not None:
            raise self.error
        assert self.document is not None
        return self.document


@dataclass(frozen=True)
class _Report:
    """What a child sends back: the document, or a ParseError's code and message, or a bug's traceback."""

    usage: ChildUsage
    document: ParsedDocument | None = None
    code: str = ""
    message: str = ""
    bug: str = ""


class BudgetedParser:
    """Parses documents in child processes within ``limits``, ``processes`` at a time.

    A component of the worker: ``start`` starts the server process the children are forked from (so the
    first document does not wait for the parsers to be imported), ``stop`` kills the children still
    running.
    """

    name = "parser-processes"

    def __init__(
        self, limits: ParseLimits, *, processes: int, in_process_max_bytes: int = IN_PROCESS_MAX_BYTES
    ) -> None:
        self.limits = limits
        self._in_process_max_bytes = in_process_max_bytes
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(_preload())
        self._slots = ThreadPoolExecutor(max_workers=processes, thread_name_prefix="ingestion-parse")
        self._children: set[_Child] = set()
        self._lock = threading.Lock()

    async def start(self) -> object:
        await asyncio.to_thread(forkserver.ensure_running)
        return None

    async def stop(self, grace: float | None = None) -> None:
        with self._lock:
            children = list(self._children)
        for child in children:
            child.kill()
        self._slots.shutdown(wait=False, cancel_futures=True)

    async def parse(self, data: bytes, file_name: str, content_type: str = "") -> BudgetedParse:
        """Parse one file in a child process (a small plain-text file in this one); raises ParserBug only
        for a parser's defect."""
        loop = asyncio.get_running_loop()
        if (
            len(data) <= self._in_process_max_bytes
            and PurePath(file_name).suffix.lower() in IN_PROCESS_EXTENSIONS
        ):
            return await loop.run_in_executor(self._slots, self._in_process, data, file_name, content_type)
        child = _Child()
        work = loop.run_in_executor(self._slots, self._run, child, data, file_name, content_type)
        try:
            return await work
        except asyncio.CancelledError:
            child.kill()  # the thread then sees the child gone and returns at once
            raise

    def _in_process(self, data: bytes, file_name: str, content_type: str) -> BudgetedParse:
        """In a slot thread: parse a small plain-text file here (no child, so no usage to report)."""
        try:
            return BudgetedParse(parse(data, file_name, content_type, self.limits), None, None)
        except ParseError as error:
            return BudgetedParse(None, error, None)
        except Exception as error:
            raise ParserBug(f"parsing {file_name} failed unexpectedly: {error!r}") from error

    def _run(self, child: _Child, data: bytes, file_name: str, content_type: str) -> BudgetedParse:
        """In a slot thread: start a child, hand it the file, wait for its report within the wall-clock
        budget, and make sure it is gone."""
        ours, theirs = self._context.Pipe()
        process = self._context.Process(
            target=_child_main, args=(theirs, self.limits), name="ingestion-parse", daemon=True
        )
        with self._lock:
            self._children.add(child)
        try:
            started = time.monotonic()
            if not child.start(process):
                raise CancelledError
            theirs.close()
            report, over_time, usage = self._wait(process, ours, started, data, file_name, content_type)
        finally:
            ours.close()
            with self._lock:
                self._children.discard(child)
        if child.killed:  # cancelled, or the worker is stopping: not a verdict on the file
            raise CancelledError
        if over_time:
            return BudgetedParse(None, self._over_wall_clock(file_name), usage)
        if report is None:
            return BudgetedParse(None, self._death(file_name, process.exitcode), None)
        if report.bug:
            raise ParserBug(f"parsing {file_name} failed unexpectedly:\n{report.bug}")
        error = ParseError(report.message, code=ParseErrorCode(report.code)) if report.code else None
        return BudgetedParse(report.document, error, report.usage)

    def _wait(
        self,
        process: BaseProcess,
        connection: Connection,
        started: float,
        data: bytes,
        file_name: str,
        content_type: str,
    ) -> tuple[_Report | None, bool, ChildUsage | None]:
        """The child's report (None when it died without one); or, when it outlived the wall-clock
        budget and was killed, True and what it had used by then."""
        with contextlib.suppress(OSError):  # a child that died at once: its exit status says why
            connection.send((file_name, content_type))
            connection.send_bytes(data)
        if not connection.poll(max(self.limits.wall_seconds - (time.monotonic() - started), 0.0)):
            usage = _usage_of(process.pid)
            process.kill()
            process.join()
            return None, True, usage
        try:
            report: _Report | None = connection.recv()
        except (EOFError, OSError):
            report = None
        process.join(EXIT_WAIT_SECONDS)  # after its report a child only exits
        if process.exitcode is None:
            process.kill()
            process.join()
        return report, False, None

    def _over_wall_clock(self, file_name: str) -> ParseError:
        return ParseError(
            f"{file_name} took longer to parse than its budget of {self.limits.wall_seconds:g} seconds "
            f"({setting('wall_seconds')}); the parse was stopped",
            code=ParseErrorCode.PARSE_BUDGET_EXCEEDED,
        )

    def _death(self, file_name: str, exitcode: int | None) -> ParseError:
        """The failure of a child that ended without a report."""
        if exitcode == -signal.SIGXCPU:
            return ParseError(
                f"{file_name} needs more CPU time to parse than its budget of "
                f"{_cpu_limit(self.limits)} seconds ({setting('cpu_seconds')}); the parse was stopped",
                code=ParseErrorCode.PARSE_BUDGET_EXCEEDED,
            )
        if exitcode == -signal.SIGKILL:
            reason = (
                f"the process parsing {file_name} was killed by the system (SIGKILL), most likely because "
                "the machine ran out of memory"
            )
        elif exitcode is not None and exitcode < 0:
            reason = (
                f"the process parsing {file_name} crashed ({signal.Signals(-exitcode).name}): the file "
                "breaks a parser library, or needs more memory than the budget of "
                f"{self.limits.memory_bytes} bytes ({setting('memory_bytes')})"
            )
        else:
            reason = f"the process parsing {file_name} ended (exit status {exitcode}) without a result"
        return ParseError(reason, code=ParseErrorCode.PARSER_CRASHED)


class _Child:
    """The process parsing one document, as the slot thread and a cancelled caller both see it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: BaseProcess | None = None
        self._killed = False

    @property
    def killed(self) -> bool:
        return self._killed

    def start(self, process: BaseProcess) -> bool:
        """Start the process, unless the parse was cancelled already (then False)."""
        with self._lock:
            if self._killed:
                return False
            process.start()
            self._process = process
            return True

    def kill(self) -> None:
        with self._lock:
            self._killed = True
            if self._process is not None:
                self._process.kill()


def _preload() -> list[str]:
    """What the server process imports once for every child: this module (and with it the parsers), and
    the main module of a process started with ``python -m`` (the worker), which multiprocessing runs
    again in every child: preloaded, that costs the child its module's body, not its imports (1.3 s)."""
    modules = [__name__]
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    main_name = getattr(main_spec, "name", None)
    if main_name and not main_name.endswith("__main__"):
        modules.append(main_name)
    return modules


def _cpu_limit(limits: ParseLimits) -> int:
    """RLIMIT_CPU counts whole seconds."""
    return max(1, math.ceil(limits.cpu_seconds))


def _usage_of(pid: int | None) -> ChildUsage | None:
    """A running child's peak resident memory and CPU time, read from /proc (None where there is none)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the command name: field 3 (state) onwards
    ticks = int(fields[11]) + int(fields[12])  # utime and stime, fields 14 and 15
    return ChildUsage(
        peak_rss_bytes=_status_bytes(status, "VmHWM"), cpu_seconds=ticks / os.sysconf("SC_CLK_TCK")
    )


# --- in the child ------------------------------------------------------------------------------------


def _child_main(connection: Connection, limits: ParseLimits) -> None:
    _limit_resources(limits)
    file_name, content_type = connection.recv()
    data = connection.recv_bytes()
    _end_with_worker(connection)
    report = _parse_reporting(data, file_name, content_type, limits)
    del data
    try:
        connection.send(report)
    except MemoryError:  # the document is too large to send back within the memory budget
        connection.send(_Report(usage=_own_usage(), **_over_memory(file_name, limits)))


def _parse_reporting(data: bytes, file_name: str, content_type: str, limits: ParseLimits) -> _Report:
    try:
        document = parse(data, file_name, content_type, limits)
    except MemoryError:
        return _Report(usage=_own_usage(), **_over_memory(file_name, limits))
    except Exception as error:
        if _caused_by_memory(error) or _peak_address_space() >= MEMORY_BUDGET_REACHED * limits.memory_bytes:
            return _Report(usage=_own_usage(), **_over_memory(file_name, limits))
        if isinstance(error, ParseError):
            return _Report(usage=_own_usage(), code=error.code.value, message=str(error))
        return _Report(usage=_own_usage(), bug=traceback.format_exc())
    return _Report(usage=_own_usage(), document=document)


def _over_memory(file_name: str, limits: ParseLimits) -> dict[str, str]:
    return {
        "code": ParseErrorCode.PARSE_BUDGET_EXCEEDED.value,
        "message": f"{file_name} needs more memory to parse than its budget of {limits.memory_bytes} "
        f"bytes ({setting('memory_bytes')})",
    }


def _caused_by_memory(error: BaseException) -> bool:
    """Whether a failed allocation is behind an error (parsers wrap what their libraries raise,
    MemoryError included, in a ParseError)."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, MemoryError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _end_with_worker(connection: Connection) -> None:
    """End this child as soon as its connection to the worker closes. The worker sends nothing after the
    file, so once that has been read the connection turns readable only at its end: when the worker is
    gone. (The server process that forked the child cannot tell: it lives as long as its children.)"""

    def watch() -> None:
        connection.poll(None)
        os._exit(1)

    threading.Thread(target=watch, name="worker-watch", daemon=True).start()


def _limit_resources(limits: ParseLimits) -> None:
    _lower(resource.RLIMIT_CORE, 0, 0)  # SIGXCPU would otherwise dump a core
    _lower(resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes)
    cpu = _cpu_limit(limits)
    # Over the soft limit the kernel sends SIGXCPU, whose default action ends the process; the hard
    # limit (SIGKILL) a second later is a backstop.
    _lower(resource.RLIMIT_CPU, cpu, cpu + 1)
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    Image.MAX_IMAGE_PIXELS = limits.max_image_pixels


def _lower(limit: int, soft: int, hard: int) -> None:
    """Set a resource limit, never above the hard limit this process already has."""
    _, current_hard = resource.getrlimit(limit)
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(limit, (soft, hard))


def _peak_address_space() -> int:
    """This process's peak address space (what RLIMIT_AS bounds), 0 where /proc does not say."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    return _status_bytes(status, "VmPeak")


def _status_bytes(status: str, key: str) -> int:
    """A size from a /proc/<pid>/status text (given there in kB)."""
    for line in status.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _own_usage() -> ChildUsage:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return ChildUsage(peak_rss_bytes=usage.ru_maxrss * 1024, cpu_seconds=usage.ru_utime + usage.ru_stime)
