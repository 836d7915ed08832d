"""The first program inside the sandbox: limits itself, then runs the skill script.

It is copied into each run and started by bwrap as
``python3 -I -S -B /sandbox/launcher.py KEY=VALUE ... -- COMMAND ...``; it uses a few standard modules
only (no json, subprocess or typing: each run pays for every import, and the start-to-exit goal is
150 ms) and imports nothing of KnowSphere. In order it:

1. makes itself non-dumpable (the script, same uid, cannot open its file descriptors through /proc);
2. sets the resource limits (address space, CPU, processes, file size, open files, no core dumps);
3. applies Landlock where the kernel has it: read and execute everywhere in the sandbox's view,
   write only beneath ``/workspace``, ``/tmp`` and ``/dev/shm`` and to a few device files, no TCP
   bind or connect, and (ABI 6+) no abstract UNIX sockets or signals outside the run;
4. runs the script as a child with the inherited stdin/stdout/stderr, waits for it, then kills every
   other process left in the sandbox's pid namespace;
5. reports on the channel fd, one ASCII line each: ``started``; ``status <exit code|-> <signal|->``;
   per regular file of the output folder ``file <size> <hex of the relative path>`` followed by its
   bytes (symlinks and special files are skipped, never followed; within the output budget);
   ``end <1 if files were left out, else 0>``.

Exit status 125 means the launcher itself failed before the script ran (reported on stderr).
"""

import ctypes
import os
import resource
import signal
import stat
import struct
import sys

# Landlock (include/uapi/linux/landlock.h)
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_RULE_PATH_BENEATH = 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_ALL_ABI_1 = (1 << 13) - 1
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 4, 38
_FAILED = 125
_NOT_STARTED = 127
_COPY_CHUNK = 65536


def fail(message: str) -> None:
    os.write(2, f"sandbox launcher: {message}\n".encode())
    os._exit(_FAILED)


def apply_landlock(libc: ctypes.CDLL, abi: int, writable: list[str], devices: list[str]) -> None:
    handled_fs = _FS_ALL_ABI_1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    handled_net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    attr = ctypes.create_string_buffer(struct.pack("<QQQ", handled_fs, handled_net, scoped)[:size], size)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, attr, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        fail(f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    file_write = _FS_WRITE_FILE | _FS_READ_FILE | (_FS_TRUNCATE if abi >= 3 else 0)
    rules = [("/", _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR)]
    rules += [(path, handled_fs) for path in writable]
    rules += [(path, file_write) for path in devices]
    for path, access in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        rule = ctypes.create_string_buffer(struct.pack("<Qi", access, fd), 12)
        if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, rule, ctypes.c_uint32(0)) < 0:
            fail(f"landlock_add_rule {path}: {os.strerror(ctypes.get_errno())}")
        os.close(fd)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        fail("prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.syscall(_SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) < 0:
        fail(f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    os.close(ruleset)


def send(channel: int, line: str, payload: bytes = b"") -> None:
    view = memoryview(line.encode() + b"\n" + payload)
    while view:
        view = view[os.write(channel, view) :]


def send_outputs(channel: int, root: str, max_bytes: int, max_files: int) -> bool:
    """Send the output folder's regular files; True if some were left out for the budget."""
    sent_bytes, sent_files, truncated = 0, 0, False
    try:
        if not stat.S_ISDIR(os.lstat(root).st_mode):
            return False  # the script replaced the output folder (e.g. by a symlink): nothing is sent
    except OSError:
        return False
    for directory, subdirectories, names in os.walk(root, followlinks=False):
        subdirectories.sort()
        for name in sorted(names):
            path = os.path.join(directory, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                continue  # a symlink, a socket, or gone
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    continue
                if sent_files >= max_files or sent_bytes + info.st_size > max_bytes:
                    truncated = True
                    continue
                content = bytearray()
                while len(content) < info.st_size:
                    chunk = os.read(fd, min(_COPY_CHUNK, info.st_size - len(content)))
                    if not chunk:
                        break
                    content += chunk
                relative = os.fsencode(os.path.relpath(path, root)).hex()
                send(channel, f"file {len(content)} {relative}", bytes(content))
                sent_bytes += len(content)
                sent_files += 1
            finally:
                os.close(fd)
    return truncated


def parse_arguments(argv: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """``KEY=VALUE`` options (a key may repeat) up to ``--``, then the command."""
    split = argv.index("--")
    options: dict[str, list[str]] = {}
    for item in argv[:split]:
        key, _, value = item.partition("=")
        options.setdefault(key, []).append(value)
    return options, argv[split + 1 :]


def run(command: list[str], cwd: str) -> int:
    """Run the script; its wait status."""
    child = os.fork()
    if child == 0:
        try:
            os.chdir(cwd)
            os.execv(command[0], command)
        except OSError as error:
            os.write(2, f"cannot start {command[0]}: {error.strerror}\n".encode())
        os._exit(_NOT_STARTED)
    while True:
        try:
            return os.waitpid(child, 0)[1]
        except InterruptedError:
            continue


def main() -> None:
    options, command = parse_arguments(sys.argv[1:])
    channel = int(options["channel_fd"][0])
    os.set_inheritable(channel, False)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        fail("prctl(PR_SET_DUMPABLE) failed")
    for item in options.get("rlimit", []):
        name, soft, hard = item.split(":")
        resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))
    abi = int(options["landlock_abi"][0])
    if abi:
        apply_landlock(libc, abi, options.get("writable", []), options.get("device", []))
    send(channel, "started")
    status = run(command, options["cwd"][0])
    if os.WIFSIGNALED(status):
        send(channel, f"status - {os.WTERMSIG(status)}")
    else:
        send(channel, f"status {os.WEXITSTATUS(status)} -")
    # Nothing may keep writing to the output folder while it is collected.
    try:  # noqa: SIM105 (contextlib is not imported: every import is paid by every run)
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass  # nothing else was left
    truncated = send_outputs(
        channel,
        options["output_dir"][0],
        int(options["max_output_bytes"][0]),
        int(options["max_output_files"][0]),
    )
    send(channel, f"end {int(truncated)}")


if __name__ == "__main__":
    main()
