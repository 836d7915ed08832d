"""Query expansion: variants of a query that recalled too few hits, from synonyms or a chat model.

- :class:`SynonymTable`: a plain text file, one group of interchangeable terms per line,
  comma-separated (``年假, 带薪休假, annual leave``); each variant swaps one known term.
- :func:`llm_variants`: LLM multi-query: the tenant's chat model writes other phrasings, one per line.
  A tenant with no chat model configured gets no variants (the search goes on unexpanded).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from knowsphere_clients.errors import ServiceError
from knowsphere_clients.modelhub import is_model_missing
from knowsphere_retrieval.domain.ports import QueryModels

MULTI_QUERY_PROMPT: Final = (
    "Write {n} alternative search queries for the question below, each on its own line, in the "
    "question's language, using other words for the same need. Output only the queries.\n\nQuestion: {query}"
)
EXPANSION_PURPOSE: Final = "query_expansion"
# Some variety between phrasings, and room for a few short lines: not a free-form answer.
EXPANSION_TEMPERATURE: Final = 0.3
EXPANSION_MAX_TOKENS: Final = 200

# A list marker a model puts before a line: "-", "•", "*", "1.", "2)" …
_LIST_MARKER: Final = re.compile(r"^\s*(?:[-•*]+|\d+[.)])\s*")


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


def parse_variants(text: str, query: str, limit: int) -> list[str]:
    """The queries of a model's answer: one per line, list markers and the original query dropped."""
    variants: list[str] = []
    for line in text.splitlines():
        variant = _LIST_MARKER.sub("", line).strip()
        if variant and variant != query and variant not in variants:
            variants.append(variant)
    return variants[:limit]


async def llm_variants(models: QueryModels, query: str, limit: int) -> list[str]:
    """Up to ``limit`` other phrasings of ``query`` from the tenant's chat model; [] when it has none."""
    try:
        text = await models.complete(
            [{"role": "user", "content": MULTI_QUERY_PROMPT.format(n=limit, query=query)}],
            purpose=EXPANSION_PURPOSE,
            temperature=EXPANSION_TEMPERATURE,
            max_tokens=EXPANSION_MAX_TOKENS,
        )
    except ServiceError as error:
        if is_model_missing(error):
            return []
        raise
    return parse_variants(text, query, limit)
