"""Batching a document's chunks for extraction, so each model request stays within a token budget.

Batches are runs of consecutive chunks within a token budget (chunk text plus heading path, counted
like the chunker does). A chunk is never split; one bigger than the budget is a batch on its own.
Chunks with blank text are skipped: there is nothing to extract from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from knowsphere_ingestion.domain.chunking import HeuristicTokenCounter, TokenCounter
from knowsphere_ingestion.domain.graph.records import ChunkText

DEFAULT_BATCH_MAX_TOKENS: Final = 3000


def batch_chunks(
    chunks: Sequence[ChunkText],
    max_tokens: int = DEFAULT_BATCH_MAX_TOKENS,
    counter: TokenCounter | None = None,
) -> list[list[ChunkText]]:
    """Consecutive non-blank chunks grouped so each batch's text and heading paths fit ``max_tokens``."""
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be > 0, got {max_tokens}")
    counter = counter or HeuristicTokenCounter()
    batches: list[list[ChunkText]] = []
    current: list[ChunkText] = []
    used = 0
    for chunk in chunks:
        if not chunk.text.strip():
            continue
        tokens = counter.count(chunk.text) + counter.count(" ".join(chunk.heading_path))
        if current and used + tokens > max_tokens:
            batches.append(current)
            current, used = [], 0
        current.append(chunk)
        used += tokens
    if current:
        batches.append(current)
    return batches
