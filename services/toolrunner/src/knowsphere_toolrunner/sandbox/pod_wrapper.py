"""The first program of a run's pod: runs the skill script and prints one report on its own stdout.

The pod has no network, so nothing can be uploaded: the toolrunner reads the container's log. The
script's stdout and stderr go to pipes of this program (never to the container's log), so the log holds
only what this program writes, and it is non-dumpable, so the script (same uid) cannot reach its file
descriptors through /proc. It is passed in the run's ConfigMap and started as
``python3 -I -S -B /sandbox/wrapper.py /sandbox/run.json``; it uses the standard library only and
imports nothing of KnowSphere. The report, after everything else the script started is killed:

    #ks-sandbox-report <nonce>
    #status <exit code|-> <signal|-> <1 if the wall time ended it, else 0> <seconds>
    #stdout <1 if cut, else 0>
    <base64, in lines>
    #stderr <1 if cut, else 0>
    <base64, in lines>
    #outputs <1 if files were left out, else 0>
    <base64 of an uncompressed tar of the regular files of the output folder, in lines>
    #end <nonce>

Header lines start with ``#``, which base64 never does, so the sections cannot be confused.
"""

import base64
import contextlib
import ctypes
import io
import json
import os
import resource
import selectors
import signal
import stat
import subprocess
import sys
import tarfile
import time

_PR_SET_DUMPABLE = 0x4
_READ_CHUNK = 65536
_LINE_CHARS = 4096
_DRAIN_SECONDS = 2.0
_NOT_STARTED = 127


def write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def section(header: str, payload: bytes) -> None:
    encoded = base64.b64encode(payload)
    lines = [encoded[i : i + _LINE_CHARS] for i in range(0, len(encoded), _LINE_CHARS)]
    write(("#" + header + "\n").encode() + b"".join(line + b"\n" for line in lines))


def kill_rest(child: "subprocess.Popen[bytes]") -> None:
    """Kill the script's process group and, as the container's first process, everything else."""
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGKILL)
    if os.getpid() == 1:
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)


def collect(root: str, max_bytes: int, max_files: int) -> "tuple[bytes, bool]":
    """A tar of the output folder's regular files (never following symlinks), within the budget."""
    buffer = io.BytesIO()
    truncated, sent_bytes, sent_files = False, 0, 0
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        try:
            if not stat.S_ISDIR(os.lstat(root).st_mode):
                return buffer.getvalue(), False
        except OSError:
            return buffer.getvalue(), False
        for directory, subdirectories, names in os.walk(root, followlinks=False):
            subdirectories.sort()
            for name in sorted(names):
                path = os.path.join(directory, name)
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    info = os.fstat(fd)
                    if not stat.S_ISREG(info.st_mode):
                        continue
                    if sent_files >= max_files or sent_bytes + info.st_size > max_bytes:
                        truncated = True
                        continue
                    content = bytearray()
                    while len(content) < info.st_size:
                        chunk = os.read(fd, min(_READ_CHUNK, info.st_size - len(content)))
                        if not chunk:
                            break
                        content += chunk
                finally:
                    os.close(fd)
                member = tarfile.TarInfo(os.path.relpath(path, root))
                member.size = len(content)
                member.mode = 0o644
                archive.addfile(member, io.BytesIO(bytes(content)))
                sent_bytes += len(content)
                sent_files += 1
    return buffer.getvalue(), truncated


def main() -> None:
    with open(sys.argv[1], "rb") as spec_file:
        spec = json.loads(spec_file.read())
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")
    for folder in (spec["input_dir"], spec["output_dir"]):
        os.makedirs(folder, exist_ok=True)
    rlimits = [(getattr(resource, name), (soft, hard)) for name, soft, hard in spec["rlimits"]]

    def limit_child() -> None:
        for which, values in rlimits:
            resource.setrlimit(which, values)

    caps = {"stdout": spec["max_stdout_bytes"], "stderr": spec["max_stderr_bytes"]}
    kept = {"stdout": bytearray(), "stderr": bytearray()}
    cut = {"stdout": False, "stderr": False}
    started = time.monotonic()
    timed_out = False
    exit_code: int | None = None
    signal_number: int | None = None
    with open(spec["stdin"], "rb") as stdin:
        try:
            child = subprocess.Popen(
                spec["command"],
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=spec["cwd"],
                env=spec["env"],
                start_new_session=True,
                close_fds=True,
                preexec_fn=limit_child,
            )
        except OSError as error:
            child = None
            exit_code = _NOT_STARTED
            kept["stderr"] += f"cannot start {spec['command'][0]}: {error.strerror}\n".encode()
    if child is not None:
        assert child.stdout is not None and child.stderr is not None
        selector = selectors.DefaultSelector()
        selector.register(child.stdout, selectors.EVENT_READ, "stdout")
        selector.register(child.stderr, selectors.EVENT_READ, "stderr")
        deadline = started + spec["wall_time_seconds"]
        drain_until: float | None = None
        while selector.get_map():
            now = time.monotonic()
            if drain_until is None:
                if child.poll() is not None:
                    kill_rest(child)
                    drain_until = now + _DRAIN_SECONDS
                elif now >= deadline:
                    timed_out = True
                    kill_rest(child)
                    child.wait()
                    drain_until = now + _DRAIN_SECONDS
            elif now >= drain_until:
                break
            for key, _ in selector.select(timeout=0.05):
                data = os.read(key.fd, _READ_CHUNK)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                room = caps[key.data] - len(kept[key.data])
                kept[key.data] += data[: max(room, 0)]
                if len(data) > room:
                    cut[key.data] = True
        if child.poll() is None:
            kill_rest(child)
        status = child.wait()
        kill_rest(child)
        if timed_out:
            signal_number = signal.SIGKILL
        elif status < 0:
            signal_number = -status
        else:
            exit_code = status
    duration = time.monotonic() - started
    outputs, outputs_cut = b"", False
    if not timed_out:
        outputs, outputs_cut = collect(spec["output_dir"], spec["max_output_bytes"], spec["max_output_files"])
    nonce = spec["nonce"]
    write(f"#ks-sandbox-report {nonce}\n".encode())
    code = "-" if exit_code is None else str(exit_code)
    sig = "-" if signal_number is None else str(int(signal_number))
    write(f"#status {code} {sig} {int(timed_out)} {duration:.3f}\n".encode())
    section(f"stdout {int(cut['stdout'])}", bytes(kept["stdout"]))
    section(f"stderr {int(cut['stderr'])}", bytes(kept["stderr"]))
    section(f"outputs {int(outputs_cut)}", outputs)
    write(f"#end {nonce}\n".encode())


if __name__ == "__main__":
    main()
