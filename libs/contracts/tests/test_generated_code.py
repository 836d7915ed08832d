"""The committed generated code and AsyncAPI document match what the generators produce now."""

import filecmp
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "libs" / "contracts" / "src" / "knowsphere"


def _differences(left: Path, right: Path) -> list[str]:
    comparison = filecmp.dircmp(left, right, ignore=["__pycache__"])
    found = [f"only committed: {p}" for p in comparison.left_only]
    found += [f"only generated: {p}" for p in comparison.right_only]
    found += [f"differs: {p}" for p in comparison.diff_files]
    for name in comparison.subdirs:
        found += [f"{name}/{d}" for d in _differences(left / name, right / name)]
    return found


def test_generated_grpc_code_matches_the_protos(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "tools" / "gen_proto.py"), "--out", str(tmp_path)], check=True)
    fresh = tmp_path / "knowsphere"
    problems = _differences(COMMITTED, fresh)
    assert not problems, "generated code is stale; run `make proto` and commit:\n" + "\n".join(problems)


def test_asyncapi_document_matches_the_event_models(tmp_path):
    out = tmp_path / "asyncapi.yaml"
    subprocess.run([sys.executable, str(ROOT / "tools" / "gen_asyncapi.py"), "--out", str(out)], check=True)
    committed = ROOT / "docs" / "asyncapi.yaml"
    assert committed.exists(), "docs/asyncapi.yaml missing; run `make asyncapi`"
    assert committed.read_text() == out.read_text(), (
        "docs/asyncapi.yaml is stale; run `make asyncapi` and commit"
    )
