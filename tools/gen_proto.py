"""Generate the Python gRPC code for every .proto under proto/ (what `make proto` runs).

Writes ``knowsphere/<service>/v1/*_pb2.py``, ``*_pb2.pyi`` and ``*_pb2_grpc.py`` under ``--out``,
replacing what was there, so a removed .proto leaves no stale module behind.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import grpc_tools
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE = "knowsphere"


def proto_files() -> list[str]:
    return sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE).rglob("*.proto"))


def generate(out: Path) -> None:
    target = out / PACKAGE
    if target.exists():
        shutil.rmtree(target)
    out.mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *proto_files(),
    ]
    status = protoc.main(args)
    if status != 0:
        raise SystemExit(f"protoc failed with status {status}")
    # Regular packages (not namespace packages) so type checkers and importers agree.
    for directory in [target, *(p for p in target.rglob("*") if p.is_dir())]:
        (directory / "__init__.py").touch()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--out", type=Path, required=True, help="directory that receives the knowsphere/ package"
    )
    generate(parser.parse_args().out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
