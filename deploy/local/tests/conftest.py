"""Fixtures of the launcher tests.

The repository runs pytest with ``--import-mode=importlib``, which puts no test folder on
``sys.path``; the tests of this package import their helpers (``stack_testing``), so this folder is
added here, once, for them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No KS_STACK_* or MASTER_KEY from the outside, and a cwd without a .env file."""
    for key in list(os.environ):
        if key.startswith("KS_STACK_") or key == "MASTER_KEY":
            monkeypatch.delenv(key)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    yield
