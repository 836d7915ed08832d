"""Query expansion from a local synonym table (the LLM multi-query path lives in the search flow).

The table is a plain text file, one group of interchangeable terms per line, comma-separated
(``年假, 带薪休假, annual leave``). Expansion is used only when a query recalls too few hits.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


class SynonymTable:
    def __init__(self, groups: Iterable[Iterable[str]] = ()) -> None:
        self._groups: list[list[str]] = []
        self._index: dict[str, int] = {}
        for group in groups:
            terms = [t.strip() for t in group if t.strip()]
            if len(terms) < 2:
                continue
            for term in terms:
                self._index.setdefault(term.lower(), len(self._groups))
            self._groups.append(terms)

    @classmethod
    def from_file(cls, path: Path) -> SynonymTable:
        lines = path.read_text(encoding="utf-8").splitlines()
        return cls(line.split(",") for line in lines if line.strip() and not line.lstrip().startswith("#"))

    def __len__(self) -> int:
        return len(self._groups)

    def expand(self, query: str, limit: int = 3) -> list[str]:
        """Variants of ``query`` with one known term replaced by a synonym each (at most ``limit``)."""
        variants: list[str] = []
        lowered = query.lower()
        for term, group_index in sorted(self._index.items(), key=lambda item: -len(item[0])):
            start = lowered.find(term)
            if start < 0:
                continue
            for synonym in self._groups[group_index]:
                if synonym.lower() == term:
                    continue
                variant = query[:start] + synonym + query[start + len(term) :]
                if variant not in variants and variant != query:
                    variants.append(variant)
                if len(variants) >= limit:
                    return variants
        return variants
