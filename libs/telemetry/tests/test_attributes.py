"""Span attributes of our own domain are registered once: no service writes a ``"ks.…"`` key itself."""

from __future__ import annotations

import re
from pathlib import Path

from knowsphere_telemetry import attributes

ROOT = Path(__file__).resolve().parents[3]
SOURCES = [*ROOT.glob("services/*/src"), *ROOT.glob("libs/*/src"), ROOT / "deploy" / "local" / "src"]
# A "ks.…" string where a span attribute key goes: set_attribute("ks.…", …), or a key of an
# attributes mapping ({"ks.…": …} passed to set_attributes / start_as_current_span(attributes=…)).
ATTRIBUTE_LITERAL = re.compile(
    r"""set_attribute\(\s*f?["']ks\.|set_attributes\(\s*\{[^}]*["']ks\.|attributes\s*=\s*\{[^}]*["']ks\."""
)


def test_every_attribute_name_is_a_registered_constant_of_our_namespace() -> None:
    names = attributes.registered()
    assert names, "no attributes registered"
    assert all(name.startswith("ks.") for name in names)
    assert len(names) == len(set(names))


def test_no_service_or_library_writes_an_attribute_key_as_a_literal() -> None:
    offenders = []
    for source in SOURCES:
        for path in source.rglob("*.py"):
            if path.name == "attributes.py" or "/knowsphere/" in path.as_posix():
                continue  # the registry itself, and generated code
            text = path.read_text(encoding="utf-8")
            for match in ATTRIBUTE_LITERAL.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                offenders.append(f"{path.relative_to(ROOT)}:{line}")
    assert not offenders, "use knowsphere_telemetry.attributes constants instead of literals:\n" + "\n".join(
        offenders
    )
