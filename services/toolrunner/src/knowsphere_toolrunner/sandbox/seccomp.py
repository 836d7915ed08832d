"""A seccomp-BPF program, built by hand, that bwrap installs on the sandboxed process (``--seccomp FD``).

It is a deny list on top of bwrap's namespaces: syscalls that no skill script needs and that are the
usual first step of a kernel or namespace escape (ptrace, mount and the new mount API, module loading,
kexec, bpf, perf, userfaultfd, io_uring, keyrings, unshare/setns, handle-based opens …) fail with
EPERM, and ``socket``/``socketpair`` only create UNIX sockets (network sockets fail with EAFNOSUPPORT,
so even a script that found a network could not open a socket to it). Any other architecture than the
one the program was built for, and x32 calls, are refused. No libseccomp is needed: the program is
a few dozen ``struct sock_filter`` records.
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

# struct sock_filter opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000

# struct seccomp_data offsets
_OFFSET_NR = 0
_OFFSET_ARCH = 4
_OFFSET_ARG0_LOW = 16  # little-endian: the low 32 bits of args[0]

_AF_UNIX = 1
_X32_SYSCALL_BIT = 0x40000000


@dataclass(frozen=True)
class _Arch:
    audit_arch: int
    denied: dict[str, int]
    socket: int
    socketpair: int
    has_x32: bool


_X86_64 = _Arch(
    audit_arch=0xC000003E,
    socket=41,
    socketpair=53,
    has_x32=True,
    denied={
        "uselib": 134,
        "ptrace": 101,
        "syslog": 103,
        "vhangup": 153,
        "pivot_root": 155,
        "_sysctl": 156,
        "adjtimex": 159,
        "chroot": 161,
        "acct": 163,
        "settimeofday": 164,
        "mount": 165,
        "umount2": 166,
        "swapon": 167,
        "swapoff": 168,
        "reboot": 169,
        "sethostname": 170,
        "setdomainname": 171,
        "iopl": 172,
        "ioperm": 173,
        "init_module": 175,
        "delete_module": 176,
        "quotactl": 179,
        "nfsservctl": 180,
        "lookup_dcookie": 212,
        "clock_settime": 227,
        "kexec_load": 246,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "unshare": 272,
        "move_pages": 279,
        "perf_event_open": 298,
        "fanotify_init": 300,
        "name_to_handle_at": 303,
        "open_by_handle_at": 304,
        "clock_adjtime": 305,
        "setns": 308,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "kcmp": 312,
        "finit_module": 313,
        "kexec_file_load": 320,
        "bpf": 321,
        "userfaultfd": 323,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
    },
)

_ARCHES = {"x86_64": _X86_64}


class SeccompUnsupported(RuntimeError):
    """No filter is built for this machine's architecture."""


def seccomp_program(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (default: this one) as bwrap reads it from ``--seccomp FD``."""
    machine = machine or platform.machine()
    arch = _ARCHES.get(machine)
    if arch is None:
        raise SeccompUnsupported(f"no seccomp filter is built for {machine}")
    # (code, jump-if-true label, jump-if-false label, k); labels resolve to relative offsets below.
    program: list[tuple[int, str | None, str | None, int]] = [
        (_LD_W_ABS, None, None, _OFFSET_ARCH),
        (_JEQ_K, None, "kill", arch.audit_arch),
        (_LD_W_ABS, None, None, _OFFSET_NR),
    ]
    if arch.has_x32:
        program.append((_JGE_K, "eperm", None, _X32_SYSCALL_BIT))
    for number in sorted(arch.denied.values()):
        program.append((_JEQ_K, "eperm", None, number))
    program.append((_JEQ_K, "socket", None, arch.socket))
    program.append((_JEQ_K, "socket", None, arch.socketpair))
    program.append((_RET_K, None, None, _RET_ALLOW))
    labels = {"socket": len(program)}
    program.append((_LD_W_ABS, None, None, _OFFSET_ARG0_LOW))
    program.append((_JEQ_K, None, "eafnosupport", _AF_UNIX))
    program.append((_RET_K, None, None, _RET_ALLOW))
    labels["eafnosupport"] = len(program)
    program.append((_RET_K, None, None, _RET_ERRNO | errno.EAFNOSUPPORT))
    labels["eperm"] = len(program)
    program.append((_RET_K, None, None, _RET_ERRNO | errno.EPERM))
    labels["kill"] = len(program)
    program.append((_RET_K, None, None, _RET_KILL_PROCESS))

    encoded = bytearray()
    for index, (code, if_true, if_false, k) in enumerate(program):
        jt = labels[if_true] - index - 1 if if_true else 0
        jf = labels[if_false] - index - 1 if if_false else 0
        if not (0 <= jt <= 255 and 0 <= jf <= 255):  # BPF jumps are forward and one byte long
            raise ValueError("seccomp program too long for its jumps")
        encoded += struct.pack("<HBBI", code, jt, jf, k)
    return bytes(encoded)


def denied_syscalls(machine: str | None = None) -> frozenset[str]:
    arch = _ARCHES.get(machine or platform.machine())
    return frozenset(arch.denied) if arch else frozenset()
