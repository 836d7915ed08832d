"""The text analysis both lexical backends index and query with."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowsphere_retrieval.domain import analysis
from knowsphere_retrieval.domain.analysis import AnalysisConfig, Analyzer


@pytest.fixture(scope="module")
def analyzer() -> Analyzer:
    analyzer = Analyzer()
    analyzer.warm_up()
    return analyzer


def test_english_is_lower_cased_stemmed_and_stop_words_dropped(analyzer: Analyzer) -> None:
    assert analyzer.index_terms("The pump RUNS; it was running.") == ["pump", "run", "run"]
    assert analyzer.index_terms("the patient's claims") == ["patient", "claim"]


def test_chinese_names_are_indexed_whole_and_by_their_words(analyzer: Analyzer) -> None:
    terms = analyzer.index_terms("我在上海交通大学读书")
    assert terms == ["上海", "交通", "大学", "上海交通大学", "读书"]  # 我, 在: stop words
    assert analyzer.query_terms("交通大学") == ["交通", "大学"]
    # Longer than jieba's search mode reaches (it stops at three characters).
    assert {"中华", "人民", "共和国", "中华人民共和国"} <= set(analyzer.index_terms("中华人民共和国"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("XJ-2000-B", ["xj-2000-b", "xj", "2000", "b"]),
        ("A1B2C3", ["a1b2c3"]),
        ("E0420", ["e0420"]),
        ("ERR_CONN_RESET", ["err_conn_reset", "err", "conn", "reset"]),
        ("0x80070005", ["0x80070005"]),
        ("v2.3.1", ["v2.3.1", "v2", "3", "1"]),
        ("ＸＪ－２０００－Ｂ", ["xj-2000-b", "xj", "2000", "b"]),  # full-width, as pasted from Chinese text
        ("型号XJ-2000-B。", ["型号", "xj-2000-b", "xj", "2000", "b"]),
    ],
)
def test_identifiers_are_indexed_whole_and_by_their_parts(
    analyzer: Analyzer, text: str, expected: list[str]
) -> None:
    assert analyzer.index_terms(text) == expected


def test_a_lookup_query_requires_its_identifiers_and_a_sentence_does_not(analyzer: Analyzer) -> None:
    assert analyzer.analyse_query("XJ-2000-B").identifiers == ("xj-2000-b",)
    assert analyzer.analyse_query("ERR_CONN_RESET 怎么解决").identifiers == ("err_conn_reset",)
    assert analyzer.analyse_query("fix 0x80070005 and E0420").identifiers == ("0x80070005", "e0420")
    # Words and numbers are not identifiers.
    assert analyzer.analyse_query("state-of-the-art pump 2000 3.5").identifiers == ()
    sentence = analyzer.analyse_query("Aspirin inhibits the production of PGE2 in platelets.")
    assert sentence.identifiers == ()
    assert "pge2" in sentence.terms


def test_query_terms_are_distinct_in_order(analyzer: Analyzer) -> None:
    assert analyzer.query_terms("pump pumps PUMP valve") == ["pump", "valv"]
    assert analyzer.query_terms("the of and ，。") == []


def test_domain_terms_from_settings_and_a_user_dictionary_stay_whole(tmp_path: Path) -> None:
    assert "知识球平台" not in Analyzer().index_terms("知识球平台上线了")
    dictionary = tmp_path / "terms.txt"
    dictionary.write_text("# domain terms\n灵析引擎 10 n\n\nC#\n", encoding="utf-8")
    custom = Analyzer(
        AnalysisConfig(user_terms=("知识球平台", "C++", "Machine Learning"), user_dictionary=dictionary)
    )
    assert {"知识球平台", "知识", "平台"} <= set(custom.index_terms("知识球平台上线了"))
    assert "灵析引擎" in custom.index_terms("灵析引擎发布")
    assert custom.index_terms("C++ and machine  learning")[:2] == ["c++", "machine_learning"]
    assert "c++" not in custom.index_terms("abc++")
    assert custom.index_terms("C# tips")[:1] == ["c#"]


def test_a_bad_user_dictionary_is_reported_with_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"missing\.txt cannot be read"):
        Analyzer(AnalysisConfig(user_dictionary=tmp_path / "missing.txt"))
    bad = tmp_path / "bad.txt"
    bad.write_text("知识球 10 n\n知识球平台 often\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.txt line 2: expected 'term \[freq\] \[tag\]'"):
        Analyzer(AnalysisConfig(user_dictionary=bad))


def test_character_bigrams_mode_for_comparison() -> None:
    bigrams = Analyzer(AnalysisConfig(cjk_mode="bigrams"))
    assert bigrams.index_terms("交通大学 水") == ["交通", "通大", "大学", "水"]


def test_over_long_terms_are_dropped() -> None:
    short = Analyzer(AnalysisConfig(max_term_chars=8))
    assert short.index_terms("pump QmFzZTY0ZW5jb2RlZGJsb2I") == ["pump"]
    with pytest.raises(ValueError, match="max_term_chars must be at least 1, got 0"):
        Analyzer(AnalysisConfig(max_term_chars=0))


def test_a_long_query_keeps_its_first_distinct_terms() -> None:
    capped = Analyzer(AnalysisConfig(max_query_terms=3))
    assert capped.query_terms("alpha beta gamma delta epsilon") == ["alpha", "beta", "gamma"]


def test_module_functions_use_the_default_analyzer() -> None:
    assert analysis.index_terms("Runs") == ["run"]
    assert analysis.query_terms("runs running") == ["run"]
