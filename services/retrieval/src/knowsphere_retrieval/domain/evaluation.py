"""Retrieval evaluation: one search's ranked chunks judged against a question's labelled documents.

A label names a document by its document id, its file name, or its file name without the extension, so
a BEIR corpus uploaded as files named ``<corpus-id>.txt`` is judged by corpus id. Chunks of one document
count once, at the rank of its best chunk (as the benchmarks count them). The scores are
:mod:`.metrics`' own: this module only decides which document stands for which label.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from knowsphere_retrieval.domain.metrics import ndcg_at_k, recall_at_k, reciprocal_rank_at_k
from knowsphere_retrieval.domain.ports import StoredChunk

NDCG_CUTOFF: Final = 10
RECALL_CUTOFFS: Final = (5, 10, 20)
MRR_CUTOFF: Final = 10
SEARCH_DEPTH: Final = max(NDCG_CUTOFF, MRR_CUTOFF, *RECALL_CUTOFFS)
"""Results each evaluated search asks for: as deep as the deepest cutoff (20)."""
RANKING_DEPTH: Final = 10
"""Documents of a ranking shown with a query's scores."""


@dataclass(frozen=True)
class RankedDocument:
    """A document in a ranking, at the rank of its best chunk."""

    document_id: str
    file_name: str

    @property
    def stem(self) -> str:
        """The file name without its extension; the document id when there is no file name."""
        return file_stem(self.file_name) or self.document_id

    def label_in(self, labels: Collection[str]) -> str | None:
        """The label among ``labels`` that names this document (by id, file name or stem), or None."""
        for name in (self.document_id, self.file_name, file_stem(self.file_name)):
            if name and name in labels:
                return name
        return None


@dataclass(frozen=True)
class QueryScores:
    """One query's scores in one mode (the fields of ``RankingMetrics``)."""

    ndcg_at_10: float
    recall_at_5: float
    recall_at_10: float
    recall_at_20: float
    mrr_at_10: float


def file_stem(file_name: str) -> str:
    """``report.final.pdf`` → ``report.final``; a name without an extension stays as it is."""
    return posixpath.splitext(file_name)[0]


def ranked_documents(chunks: Sequence[StoredChunk]) -> list[RankedDocument]:
    """The documents of ranked chunks, best first, each once (at its best chunk's rank)."""
    seen: dict[str, RankedDocument] = {}
    for chunk in chunks:
        if chunk.document_id not in seen:
            seen[chunk.document_id] = RankedDocument(chunk.document_id, chunk.file_name)
    return list(seen.values())


def judged_ranking(documents: Sequence[RankedDocument], relevance: Mapping[str, int]) -> list[str]:
    """The ranking as the judgements read it: each document as the label naming it, else its id (which,
    naming no label, counts as not relevant)."""
    return [document.label_in(relevance) or document.document_id for document in documents]


def score(documents: Sequence[RankedDocument], relevance: Mapping[str, int]) -> QueryScores:
    """The scores of a ranking of documents against ``relevance`` (label → grade)."""
    ranking = judged_ranking(documents, relevance)
    recall = {k: recall_at_k(ranking, relevance, k) for k in RECALL_CUTOFFS}
    return QueryScores(
        ndcg_at_10=ndcg_at_k(ranking, relevance, NDCG_CUTOFF),
        recall_at_5=recall[5],
        recall_at_10=recall[10],
        recall_at_20=recall[20],
        mrr_at_10=reciprocal_rank_at_k(ranking, relevance, MRR_CUTOFF),
    )


def shown_ranking(documents: Sequence[RankedDocument]) -> list[str]:
    """The first :data:`RANKING_DEPTH` documents as a person reads them: their file name stems."""
    return [document.stem for document in documents[:RANKING_DEPTH]]


__all__ = [
    "RANKING_DEPTH",
    "SEARCH_DEPTH",
    "QueryScores",
    "RankedDocument",
    "file_stem",
    "judged_ranking",
    "ranked_documents",
    "score",
    "shown_ranking",
]
