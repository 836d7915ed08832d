"""Unit tests of the domain rules no single tool of today exercises through the wire: which results
are stored (a top-level array over 10 items, a whole-result flag), how a stored result is viewed
without ever showing a piece of JSON as the whole, and how sources are numbered across a turn."""

from __future__ import annotations

import json

from knowsphere.toolrunner.v1.toolrunner_enums import SourceKind
from knowsphere_toolrunner.domain.externalise import ExternaliseLimits, must_store
from knowsphere_toolrunner.domain.previews import cut_text, view
from knowsphere_toolrunner.domain.sources import Source, SourceBook

LIMITS = ExternaliseLimits(
    over_chars=8000,
    over_items=10,
    distil_over_chars=10000,
    distil_target_chars=2000,
    preview_chars=600,
    page_chars=16000,
)


def test_a_top_level_array_of_more_than_ten_items_is_stored_however_short():
    eleven = [{"id": i} for i in range(11)]
    ten = eleven[:10]
    assert must_store(json.dumps(eleven), eleven, whole_result=False, limits=LIMITS)
    assert not must_store(json.dumps(ten), ten, whole_result=False, limits=LIMITS)
    nested = {"items": eleven}  # only the top level counts
    assert not must_store(json.dumps(nested), nested, whole_result=False, limits=LIMITS)


def test_length_and_the_whole_result_flag_store_a_result():
    assert must_store("x" * 8001, "x" * 8001, whole_result=False, limits=LIMITS)
    assert not must_store("x" * 8000, "x" * 8000, whole_result=False, limits=LIMITS)
    assert must_store("{}", {}, whole_result=True, limits=LIMITS)


def test_a_view_of_an_array_shows_whole_items_and_counts_the_rest():
    items = [{"id": f"doc-{i}", "title": f"Report {i}", "pages": i} for i in range(40)]
    shown = view(items, json.dumps(items), 300)
    lines = shown.split("\n")
    assert lines[0] == "JSON array of 40 items."
    whole = [json.loads(line) for line in lines[1:] if line.startswith("{")]
    assert whole == items[: len(whole)] and 0 < len(whole) < 40  # every item shown is complete
    assert f"[{len(whole)} of 40 items shown; the rest are left out]" in lines
    assert "not the whole result" in shown


def test_a_view_of_an_object_describes_what_does_not_fit():
    result = {"query": "leave", "results": [{"source": "c1", "text": "x" * 50_000}] * 3, "note": "cite"}
    shown = view(result, json.dumps(result), 600)
    assert '"query": "leave"' in shown and '"note": "cite"' in shown
    assert '"results": <array of 3 items>' in shown
    assert '{"source": "c1", "text": <text of 50000 characters>}' in shown
    assert "x" * 200 not in shown


def test_text_is_cut_at_a_sentence_or_word_boundary_and_says_so():
    text = "The pump must be serviced every six months. " * 40
    shown = view(text, text, 100)
    first = shown.split("\n")[0]
    assert first.endswith("six months.") and len(first) <= 100
    assert f"of {len(text)} characters" in shown
    assert cut_text("第一句话说完了。第二句很长很长很长", 12) == "第一句话说完了。"


def test_sources_continue_the_turns_numbering_and_a_chunk_keeps_its_number():
    earlier = [
        Source(label="c1", index=1, kind=SourceKind.CHUNK, chunk_id="a", handle="h-a"),
        Source(label="c4", index=4, kind=SourceKind.WEB, url="https://example.com"),
    ]
    book = SourceBook(earlier, snippet_chars=5)
    again = book.cite(Source(kind=SourceKind.CHUNK, chunk_id="a", handle="h-a"))
    fresh = book.cite(Source(kind=SourceKind.CHUNK, chunk_id="b", handle="h-b", snippet="long snippet"))
    twice = book.cite(Source(kind=SourceKind.CHUNK, chunk_id="b", handle="h-b"))
    assert again.label == "c1" and fresh.label == "c5" and twice is fresh
    assert fresh.snippet == "long "
    assert [s.label for s in book.new] == ["c5"]
    assert book.resolve("[[c5]]") is fresh and book.resolve("c4") == earlier[1]
    assert book.resolve("c2") is None and book.resolve("5") is None


def test_a_source_known_only_by_its_label_keeps_it_and_one_without_a_number_is_not_reused():
    book = SourceBook(
        [
            Source(label="c7", kind=SourceKind.CHUNK, chunk_id="a"),
            Source(kind=SourceKind.CHUNK, chunk_id="b"),  # no number: the caller broke the contract
        ]
    )
    assert book.cite(Source(kind=SourceKind.CHUNK, chunk_id="a")).label == "c7"
    assert book.cite(Source(kind=SourceKind.CHUNK, chunk_id="b")).label == "c8"
