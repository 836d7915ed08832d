"""What a service's image holds: the repository's libraries it needs, and everything they install.

Two uses, one definition:

- ``python service_closure.py libs <service>`` prints the ``libs/<name>`` folders the service depends
  on, directly or through another library (read from the ``pyproject.toml`` files, standard library
  only). The Dockerfile installs exactly these with the service, so an image holds no library, and no
  dependency of a library, that its service does not use.
- ``python service_closure.py sizes`` (``make bench-images``) estimates each image's size without
  Docker: the service's installed dependency closure, resolved from the distributions installed in the
  running environment (markers and extras evaluated), summed from their installed files, plus the base
  image. Run it from the repository's venv (``make setup`` installs every service there). The last line
  is JSON.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOCAL_PREFIX = "knowsphere-"
BASE_IMAGE = "python:3.11-slim"
BASE_IMAGE_MB = 125.0
"""Uncompressed size of the runtime stage's base image (python:3.11-slim, linux/amd64), for the total."""
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def local_packages() -> dict[str, Path]:
    """The repository's packages: distribution name -> folder (libs and services)."""
    found: dict[str, Path] = {}
    for pyproject in [*REPO.glob("libs/*/pyproject.toml"), *REPO.glob("services/*/pyproject.toml")]:
        name = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["name"]
        found[normalise(name)] = pyproject.parent
    return found


def _declared(folder: Path) -> list[str]:
    return list(
        tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    )


def local_closure(service: str) -> list[Path]:
    """The ``libs/`` folders ``services/<service>`` needs, in a stable order."""
    folder = REPO / "services" / service
    if not (folder / "pyproject.toml").is_file():
        raise SystemExit(f"no service {service!r}: services/{service}/pyproject.toml does not exist")
    packages = local_packages()
    seen: set[Path] = set()
    todo = [folder]
    while todo:
        for requirement in _declared(todo.pop()):
            match = _NAME.match(requirement)
            name = normalise(match.group(1)) if match else ""
            if name.startswith(LOCAL_PREFIX) and name in packages and packages[name] not in seen:
                if packages[name].parent.name != "libs":
                    raise SystemExit(f"{service} depends on another service's package {name}")
                seen.add(packages[name])
                todo.append(packages[name])
    return sorted(seen)


def installed_closure(service: str) -> set[str]:
    """Normalised names of every distribution ``knowsphere-<service>`` installs (itself included)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    closure: set[str] = set()
    visited: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, frozenset[str]]] = [(f"{LOCAL_PREFIX}{service}", frozenset())]
    while todo:
        name, extras = todo.pop()
        key = normalise(name)
        if (key, extras) in visited:
            continue
        visited.add((key, extras))
        closure.add(key)
        marker_extras = extras or frozenset({""})
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{name} is not installed here: run `make setup` first") from None
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is not None and not any(
                requirement.marker.evaluate({"extra": extra}) for extra in marker_extras
            ):
                continue
            todo.append((requirement.name, frozenset(requirement.extras)))
    return closure


def installed_megabytes(names: set[str]) -> dict[str, float]:
    from importlib import metadata

    sizes: dict[str, float] = {}
    for name in names:
        total = 0
        for file in metadata.distribution(name).files or []:
            path = Path(str(file.locate()))
            if path.is_file():
                total += path.stat().st_size
        sizes[name] = total / 2**20
    return sizes


def services() -> list[str]:
    return sorted(p.parent.name for p in REPO.glob("services/*/pyproject.toml"))


def report_sizes() -> dict[str, object]:
    rows: dict[str, object] = {}
    print(f"{'image':<14}{'packages':>9}{'venv MB':>10}{'image MB':>10}  largest")
    for service in services():
        closure = installed_closure(service)
        sizes = installed_megabytes(closure)
        venv = sum(sizes.values())
        largest = sorted(sizes.items(), key=lambda item: -item[1])[:3]
        print(
            f"{service:<14}{len(closure):>9}{venv:>10.0f}{venv + BASE_IMAGE_MB:>10.0f}  "
            + ", ".join(f"{n} {mb:.0f}" for n, mb in largest)
        )
        rows[service] = {
            "packages": len(closure),
            "venv_mb": round(venv, 1),
            "image_mb_estimate": round(venv + BASE_IMAGE_MB, 1),
            "largest": {n: round(mb, 1) for n, mb in largest},
        }
    return {
        "summary": "image sizes",
        "base_image": BASE_IMAGE,
        "base_image_mb": BASE_IMAGE_MB,
        "images": rows,
    }


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "libs":
        for folder in local_closure(argv[2]):
            print(f"./{folder.relative_to(REPO)}")
        return 0
    if len(argv) == 2 and argv[1] == "sizes":
        print(json.dumps(report_sizes()))
        return 0
    print("usage: service_closure.py libs <service> | sizes", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
