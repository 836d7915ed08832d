"""The second hop of doc_retrieval: bridge entities from the first hop's passages, searched for too.

What a user notices: a passage that answers the second half of a multi-hop question, sharing no word
with it, is missing with one hop and found with two; the second hop is off unless asked for and then
changes nothing; its limits hold; it never brings back another tenant's chunks.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere_retrieval.adapters.chunk_sql import SqlChunkStore
from knowsphere_retrieval.adapters.lexical_tantivy import TantivyLexicalIndex
from knowsphere_retrieval.adapters.vector_edge import EdgeVectorIndex
from knowsphere_retrieval.api.convert import search_settings, search_stats
from knowsphere_retrieval.domain.multihop import BridgeExtractor, Passage
from knowsphere_retrieval.domain.ports import LexicalDoc, StoredChunk, VectorPoint
from knowsphere_retrieval.domain.search import KnowledgeBaseIndex, Searcher, SearchSettings
from knowsphere_retrieval.settings import Settings
from knowsphere_telemetry import attributes

from .test_searcher import ScriptedModels

DIMENSION = 64
KB = KnowledgeBaseIndex("kb", "words-model", DIMENSION, ("en",))
QUESTION = "Which school trained the doctoral advisor of Marie Curie?"
FIRST = "c-curie"  # names the bridge: her advisor
ANSWER = "c-lippmann"  # about the advisor; shares no word with the question
TEXTS = {
    FIRST: "Marie Curie\nMarie Curie was a physicist and chemist. Her doctoral advisor was Gabriel Lippmann.",
    ANSWER: "Gabriel Lippmann\nGabriel Lippmann graduated from the École Normale Supérieure in Paris.",
    "c-nobel": "The Nobel Prize in Chemistry is awarded by the Royal Swedish Academy of Sciences.",
    "c-school": "A school trains pupils; a doctoral programme trains researchers.",
    "c-radium": "Radium was discovered in 1898 and glows faintly blue.",
}
# Another tenant's passage about the bridge entity, which must never come back.
OTHER_TENANT = {"g-lippmann": "Gabriel Lippmann invented a method of colour photography."}


def word_vector(text: str) -> list[float]:
    """A bag-of-words vector (each word hashed to a dimension): texts sharing no word are orthogonal,
    so the vector leg cannot find the answer passage by chance."""
    vector = [0.0] * DIMENSION
    for word in re.findall(r"\w+", text.lower()):
        if len(word) > 3:  # short function words would make every text similar
            vector[hashlib.sha256(word.encode()).digest()[0] % DIMENSION] += 1.0
    return vector if any(vector) else [1.0] + [0.0] * (DIMENSION - 1)


class WordModels(ScriptedModels):
    async def embed_query(self, model_id: str, query: str) -> list[float]:
        self.calls["embed_query"] += 1
        return word_vector(query)


@pytest.fixture
async def searcher(tmp_path: Path):  # type: ignore[no-untyped-def]
    chunks = SqlChunkStore(f"sqlite+aiosqlite:///{tmp_path}/chunks.db")
    await chunks.open()
    vectors = EdgeVectorIndex(tmp_path / "vectors")
    lexical = TantivyLexicalIndex(tmp_path / "lexical")
    stored = [
        StoredChunk(cid, "acme", "kb", f"doc-{cid}", f"{cid}.txt", text, "", 0) for cid, text in TEXTS.items()
    ] + [
        StoredChunk(cid, "globex", "kb", f"doc-{cid}", f"{cid}.txt", text, "", 0)
        for cid, text in OTHER_TENANT.items()
    ]
    for tenant in ("acme", "globex"):
        await chunks.put_chunks([c for c in stored if c.tenant_id == tenant], {})
    await vectors.ensure_collection(KB.collection, DIMENSION)
    await vectors.upsert(
        KB.collection,
        [VectorPoint(c.chunk_id, c.tenant_id, "kb", c.document_id, word_vector(c.text)) for c in stored],
    )
    await lexical.upsert([LexicalDoc(c.chunk_id, c.tenant_id, "kb", c.document_id, c.text) for c in stored])
    yield Searcher(vectors=vectors, lexical=lexical, chunks=chunks, models=WordModels())
    await lexical.close()
    await vectors.close()
    await chunks.close()


def settings(**overrides: object) -> SearchSettings:
    """Convex fusion drops hits no leg lifts, as the service's default does; top 5 of 5 passages."""
    base = SearchSettings(top_k=5, fusion="convex", rerank_enabled=False, expansion_enabled=False)
    return SearchSettings(**{**base.__dict__, **overrides})  # type: ignore[arg-type]


def ids(outcome) -> list[str]:  # type: ignore[no-untyped-def]
    return [item.chunk.chunk_id for item in outcome.results]


# --- the extractor ---------------------------------------------------------------------------------


def test_english_bridges_are_names_the_question_does_not_hold():
    passages = [
        Passage(
            "Blue Velvet (film)\nBlue Velvet is a 1986 mystery film shot in Wilmington, North Carolina. "
            'Its title comes from the song "Blue Velvet". Filming took 52 days; the score was by '
            "Angelo Badalamenti."
        ),
        Passage("The theatre of the town is small. The Lord of the Rings played there."),
    ]
    bridges = [b.text for b in BridgeExtractor().bridges("Which film was shot in Wilmington?", passages, 10)]
    assert bridges[0] == "Blue Velvet"  # the first passage's title, parenthesis dropped, named most
    assert {"Angelo Badalamenti", "North Carolina", "Lord of the Rings", "52 days"} <= set(bridges)
    assert "Wilmington" not in bridges  # already in the question
    assert not any(b.startswith(("The ", "Its ")) for b in bridges)


def test_a_sentence_opening_word_written_lower_case_elsewhere_is_not_a_name():
    passage = Passage("Filming began in May. The filming of the sequel stopped. Nolan directed it.")
    bridges = [b.text for b in BridgeExtractor().bridges("Who directed the sequel?", [passage], 10)]
    assert "Filming" not in bridges
    assert "Nolan" in bridges and "May" in bridges


def test_a_short_word_inside_a_longer_name_counts_for_the_longer_name():
    passage = Passage("Christopher Nolan wrote the script. Nolan also produced it.")
    bridges = BridgeExtractor().bridges("Who wrote the script?", [passage], 10)
    assert [b.text for b in bridges] == ["Christopher Nolan"]


def test_chinese_bridges_are_frequent_nouns_by_jieba():
    passages = [
        Passage("梁启超是清华大学国学院的导师。梁启超出生于广东省新会县，梁启超曾任北洋政府司法总长。"),
        Passage("广东省位于中国南部。"),
    ]
    bridges = [b.text for b in BridgeExtractor().bridges("清华大学国学院的导师是谁？", passages, 4)]
    assert bridges[0] == "梁启超"  # a person's name, mentioned three times in the best passage
    assert "广东省" in bridges
    assert "清华大学" not in bridges and "国学院" not in bridges  # the question names them


def test_the_best_passage_counts_most_and_the_limit_holds():
    passages = [Passage("Ada Lovelace met Charles Babbage."), Passage("Alan Turing met Alonzo Church.")]
    bridges = BridgeExtractor().bridges("Who met whom?", passages, 2)
    assert [b.text for b in bridges] == ["Ada Lovelace", "Charles Babbage"]
    assert BridgeExtractor().bridges("Who met whom?", passages, 0) == []


# --- the search ------------------------------------------------------------------------------------


async def test_the_answer_passage_is_missing_with_one_hop_and_found_with_two(searcher, spans):
    one = await searcher.search("acme", QUESTION, [KB], settings())
    assert FIRST in ids(one) and ANSWER not in ids(one)
    assert not one.stats.second_hop and one.stats.second_hop_queries == []

    two = await searcher.search("acme", QUESTION, [KB], settings(second_hop_enabled=True))
    assert ids(two)[0] == FIRST  # the passage the bridge came from keeps its place
    assert ANSWER in ids(two)
    assert two.stats.second_hop
    assert f"{QUESTION} Gabriel Lippmann" in two.stats.second_hop_queries

    step = next(s for s in spans.get_finished_spans() if s.name == "retrieval.second_hop")
    assert step.attributes[attributes.EXPANSION_QUERIES] == len(two.stats.second_hop_queries)
    assert step.attributes[attributes.CHUNKS] == 3


async def test_the_second_hop_is_off_by_default_and_changes_nothing_then(
    searcher, spans: InMemorySpanExporter
):
    assert SearchSettings().second_hop_enabled is False
    assert Settings(modelhub_addr="x", data_dir=Path("unused")).second_hop_enabled is False
    default = await searcher.search("acme", QUESTION, [KB], settings())
    off = await searcher.search("acme", QUESTION, [KB], settings(second_hop_enabled=False))
    assert ids(default) == ids(off) and [i.score for i in default.results] == [i.score for i in off.results]
    assert not any(s.name == "retrieval.second_hop" for s in spans.get_finished_spans())


async def test_limits_are_respected(searcher):
    models = searcher._models
    before = models.calls["embed_query"]
    outcome = await searcher.search(
        "acme",
        QUESTION,
        [KB],
        settings(
            second_hop_enabled=True, second_hop_passages=1, second_hop_queries=1, second_hop_candidate_count=2
        ),
    )
    assert len(outcome.stats.second_hop_queries) == 1
    # One embedding for the question and one per follow-up query.
    assert models.calls["embed_query"] - before == 2
    # Each leg of the follow-up recalled at most two hits: the first hop's five at most, plus two plus two.
    assert outcome.stats.vector_hit_count <= 5 + 2 and outcome.stats.bm25_hit_count <= 5 + 2


async def test_another_tenants_chunks_never_appear(searcher):
    outcome = await searcher.search(
        "acme", QUESTION, [KB], settings(top_k=10, second_hop_enabled=True, second_hop_candidate_count=50)
    )
    assert ANSWER in ids(outcome)
    assert all(item.chunk.tenant_id == "acme" for item in outcome.results)
    assert "g-lippmann" not in ids(outcome)


# --- the contract ----------------------------------------------------------------------------------


def test_the_request_option_overrides_the_server_default_and_stats_report_it():
    defaults = Settings(modelhub_addr="x", data_dir=Path("unused"))
    asked = pb.SearchRequest(query="q", options=pb.SearchOptions(second_hop=True))
    assert search_settings(asked, defaults).second_hop_enabled is True
    assert search_settings(pb.SearchRequest(query="q"), defaults).second_hop_enabled is False
    on = Settings(modelhub_addr="x", data_dir=Path("unused"), second_hop_enabled=True, second_hop_queries=2)
    assert search_settings(pb.SearchRequest(query="q"), on).second_hop_queries == 2
    refused = pb.SearchRequest(query="q", options=pb.SearchOptions(second_hop=False))
    assert search_settings(refused, on).second_hop_enabled is False

    from knowsphere_retrieval.domain.search import SearchStats

    message = search_stats(SearchStats(second_hop=True, second_hop_queries=["q Gabriel Lippmann"]), [])
    assert message.second_hop and list(message.second_hop_queries) == ["q Gabriel Lippmann"]
