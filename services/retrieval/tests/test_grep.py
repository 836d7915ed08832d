"""grep_chunks' pure logic: the linear-time engine, pattern validation, offsets, limits and the literal
pre-filter (which must never hide a chunk that matches)."""

from __future__ import annotations

import time

import pytest
import re2

from knowsphere_retrieval.domain.grep import (
    GrepCandidate,
    GrepLimits,
    GrepPatternError,
    GrepScan,
    grep_texts,
    plan_grep,
    required_literal,
)


def candidate(text: str, chunk_id: str = "c1", position: int = 0) -> GrepCandidate:
    return GrepCandidate(
        chunk_id=chunk_id,
        knowledge_base_id="kb",
        document_id="doc",
        file_name="f.txt",
        position=position,
        page=3,
        heading_path=("Intro",),
        text=text,
    )


def test_catastrophic_backtracking_pattern_finishes_in_well_under_a_second():
    text = "a" * 50_000 + "b"
    plan = plan_grep("(a+)+$")
    started = time.monotonic()
    result = grep_texts(plan, [candidate(text)])
    elapsed = time.monotonic() - started
    assert elapsed < 1.0, f"took {elapsed:.2f} s"
    assert result.matches == [] and not result.timed_out and result.scanned_chunk_count == 1

    # Still a real regex engine: the same pattern matches when the text ends in "a".
    matched = grep_texts(plan_grep("(a+)+$", context_chars=5), [candidate("b" + "a" * 50_000)])
    assert [(m.start, m.end, m.before) for m in matched.matches] == [(1, 50_001, "b")]


@pytest.mark.parametrize(
    ("pattern", "explanation"),
    [
        (r"(\w+) \1", "backreferences"),
        (r"(?P<word>\w+) (?P=word)", "named backreferences"),
        (r"foo(?=bar)", "lookahead and lookbehind"),
        (r"(?<!un)known", "lookahead and lookbehind"),
        (r"a++", "possessive quantifiers"),
        (r"(?>ab)", "atomic groups"),
    ],
)
def test_unsupported_syntax_is_refused_with_the_construct_named(pattern: str, explanation: str):
    with pytest.raises(GrepPatternError) as caught:
        plan_grep(pattern)
    message = str(caught.value)
    assert message.startswith(f"pattern {pattern!r} is not a valid RE2 regular expression")
    assert f"{explanation} " in message and "not supported" in message
    assert isinstance(caught.value, ValueError)


def test_invalid_empty_and_overlong_patterns_get_clear_errors():
    with pytest.raises(GrepPatternError, match=r"missing \]"):
        plan_grep("[abc")
    with pytest.raises(GrepPatternError, match="pattern must not be empty"):
        plan_grep("")
    limits = GrepLimits(max_pattern_length=10)
    plan_grep("x" * 10, limits=limits)
    with pytest.raises(GrepPatternError, match="pattern is 11 characters long; the limit is 10"):
        plan_grep("x" * 11, limits=limits)
    with pytest.raises(ValueError, match="max_matches must not be negative"):
        plan_grep("x", max_matches=-1)
    with pytest.raises(ValueError, match="context_chars must not be negative"):
        plan_grep("x", context_chars=-1)


def test_chinese_offsets_are_code_points_with_context():
    text = "我在上海交通大学读书，上海交通大学很好。"
    result = grep_texts(plan_grep("上海(交通)?大学", context_chars=2), [candidate(text)])
    got = [(m.start, m.end, m.match, m.before, m.after) for m in result.matches]
    assert got == [
        (2, 8, "上海交通大学", "我在", "读书"),
        (11, 17, "上海交通大学", "书，", "很好"),
    ]
    for m in result.matches:
        assert text[m.start : m.end] == m.match
    first = result.matches[0]
    assert (first.chunk_id, first.document_id, first.knowledge_base_id, first.file_name) == (
        "c1",
        "doc",
        "kb",
        "f.txt",
    )
    assert (first.position, first.page, first.heading_path) == (0, 3, ("Intro",))


def test_context_is_clipped_at_the_chunk_edges_and_capped_by_the_limit():
    result = grep_texts(plan_grep("b", context_chars=100), [candidate("abc")])
    assert [(m.before, m.after) for m in result.matches] == [("a", "c")]
    limits = GrepLimits(max_context_chars=3, context_chars=1)
    assert plan_grep("x", context_chars=50, limits=limits).context_chars == 3
    assert plan_grep("x", limits=limits).context_chars == 1  # 0 = the default


def test_ignore_case():
    chunks = [candidate("An ERROR occurred; error again")]
    assert [m.match for m in grep_texts(plan_grep("error"), chunks).matches] == ["error"]
    assert [m.match for m in grep_texts(plan_grep("error", ignore_case=True), chunks).matches] == [
        "ERROR",
        "error",
    ]


def test_max_matches_stops_the_scan_and_reports_truncation():
    chunks = [candidate("x1 x2 x3", "c1"), candidate("x4", "c2", 1)]
    result = grep_texts(plan_grep(r"x\d", max_matches=2), chunks)
    assert [m.match for m in result.matches] == ["x1", "x2"]
    assert result.truncated and result.scanned_chunk_count == 1

    exactly = grep_texts(plan_grep(r"x\d", max_matches=4), chunks)
    assert len(exactly.matches) == 4 and not exactly.truncated and exactly.scanned_chunk_count == 2
    assert plan_grep("x", max_matches=10_000, limits=GrepLimits(max_matches=50)).max_matches == 50


def test_time_budget_stops_the_scan_with_a_partial_result():
    ticks = iter(range(100))
    plan = plan_grep("x", limits=GrepLimits(time_budget_seconds=3))
    scan = GrepScan(plan, clock=lambda: float(next(ticks)))  # each look at the clock costs 1 s
    scan.scan([candidate("x", f"c{i}", i) for i in range(10)])
    result = scan.result()
    assert result.timed_out and not result.truncated
    assert 0 < len(result.matches) < 10
    assert result.scanned_chunk_count == len(result.matches)


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        ("上海交通大学", "上海交通大学"),
        (r"ERR-\d+", "ERR-"),
        (r"a\.b", "a.b"),
        (r"\bword\b", "word"),
        ("colou?r", "colo"),
        ("ab*c", "a"),
        ("abc{2}x", "ab"),
        ("ab+cd", "ab"),
        ("(foo)barbaz", "barbaz"),
        ("(?:ab)cd", "cd"),
        ("[xyz]def", "def"),
        ("[]a]bc", "bc"),
        ("foo|bar", ""),
        ("(?i)abc", ""),
        (r"\x41bc", ""),
        (r"\p{Han}+", ""),
        (r"\Qa.b\E", ""),
        (".*", ""),
    ],
)
def test_required_literal(pattern: str, literal: str):
    assert required_literal(pattern) == literal


@pytest.mark.parametrize(
    "pattern",
    ["colou?r", "ab*c", "abc{2}x", "ab+cd", "(foo)?barbaz", "x[yz]+w", r"ERR-\d+", "a(b|c)d", "^ab$"],
)
@pytest.mark.parametrize(
    "text",
    ["color", "colour", "ac", "abbbc", "abccx", "abbbcd", "barbaz", "xyzw", "ERR-42", "acd", "ab", "zzz"],
)
def test_required_literal_never_hides_a_match(pattern: str, text: str):
    if re2.search(pattern, text):
        assert required_literal(pattern) in text


def test_ignore_case_drops_a_cased_literal_but_keeps_a_caseless_one():
    assert plan_grep("Error", ignore_case=True).required_literal == ""
    assert plan_grep("Error").required_literal == "Error"
    assert plan_grep("错误-42", ignore_case=True).required_literal == "错误-42"
