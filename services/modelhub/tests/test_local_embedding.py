"""The built-in CPU embedding models, run for real on small inputs (no network, no fakes)."""

from __future__ import annotations

import asyncio
import math
import socket
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode, ModelType
from knowsphere_modelhub.adapters.local_embedding import (
    BUILTIN_MODELS,
    MINILM,
    MULTILINGUAL_E5_SMALL,
    PROVIDER_ID,
    BuiltinModel,
    LocalEmbeddingAdapter,
)
from knowsphere_modelhub.domain.errors import ModelError
from knowsphere_modelhub.domain.records import CallTarget, ModelParams

QUERY = pb.EMBED_INPUT_TYPE_QUERY
DOCUMENT = pb.EMBED_INPUT_TYPE_DOCUMENT
BATCH = 4  # small, so a handful of texts already spans several batches

# About 45 word pieces of real English prose; repeated to build long inputs.
PARAGRAPH = (
    "Vaccines train the immune system to recognise a pathogen without causing the disease. "
    "After vaccination, memory cells remain in the body and respond quickly if the real "
    "infection ever arrives, which is why a vaccinated person rarely falls seriously ill."
)
UNRELATED = "The central bank raised interest rates to slow down inflation in the housing market."


def target(model: BuiltinModel) -> CallTarget:
    return CallTarget(
        model_id=model.id,
        provider_id=PROVIDER_ID,
        model_name=model.model_name,
        base_url="",
        api_key=None,
        parameters=ModelParams(embedding_dimension=model.dimension),
        types=frozenset({ModelType.EMBEDDING}),
    )


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))  # the vectors are unit length


@pytest.fixture(scope="module")
def network_attempts() -> list[Any]:
    return []


@pytest.fixture(scope="module")
def adapter(network_attempts: list[Any]) -> Iterator[LocalEmbeddingAdapter]:
    """Both built-ins, loaded once with every name lookup and outbound connection refused and recorded."""
    instance = LocalEmbeddingAdapter(batch_size=BATCH)

    # Other tests' servers in this process (NATS, scripted providers) talk over loopback from their
    # own threads meanwhile; only traffic that would leave the machine counts as a network attempt.
    real_connect = socket.socket.connect
    real_lookup = socket.getaddrinfo
    loopback = {"127.0.0.1", "::1", "localhost"}

    def refuse_connect(sock: socket.socket, address: Any) -> None:
        if isinstance(address, str) or (isinstance(address, tuple) and address[0] in loopback):
            return real_connect(sock, address)
        network_attempts.append(address)
        raise OSError("tests forbid network access while loading local models")

    def refuse_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host in loopback:
            return real_lookup(host, *args, **kwargs)
        network_attempts.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "tests forbid network access while loading local models")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse_connect)
        patch.setattr(socket, "getaddrinfo", refuse_lookup)
        asyncio.run(instance.warm_up())
    yield instance
    asyncio.run(instance.close())


async def embed_one(adapter: LocalEmbeddingAdapter, model: BuiltinModel, text: str, kind: int) -> list[float]:
    return (await adapter.embed(target(model), [text], kind)).vectors[0]


def test_builtin_models_are_described_for_the_registry() -> None:
    by_id = {model.id: model for model in BUILTIN_MODELS}
    minilm = by_id["builtin-minilm-l6-v2"]
    assert (minilm.model_name, minilm.dimension, minilm.languages) == ("all-MiniLM-L6-v2", 384, ("en",))
    assert by_id["builtin-multilingual-e5-small"].dimension == 384

    from datetime import UTC, datetime

    record = minilm.record(datetime.now(UTC))
    assert record.builtin and record.tenant_id == "" and record.provider_id == "local"
    assert record.types == frozenset({ModelType.EMBEDDING})
    assert record.parameters.embedding_dimension == 384
    assert record.api_key_ciphertext is None


def test_models_load_from_their_packages_without_the_network(
    adapter: LocalEmbeddingAdapter, network_attempts: list[Any]
) -> None:
    assert network_attempts == []


async def test_concurrent_calls_of_both_models_each_get_their_own_vectors() -> None:
    # Batches of 16 split into pieces run at once on the pool; the pieces of four calls at a time,
    # two per model, must come back to their own call in their own order.
    pool = LocalEmbeddingAdapter(batch_size=16, threads=2)
    try:
        calls = [
            (model, [f"{word} number {n} of call {c}: {PARAGRAPH[: 20 * n]}" for n in range(1, 13)])
            for c, (model, word) in enumerate(
                [
                    (MINILM, "apples"),
                    (MULTILINGUAL_E5_SMALL, "rivers"),
                    (MINILM, "stars"),
                    (MULTILINGUAL_E5_SMALL, "bread"),
                ]
            )
        ]
        results = await asyncio.gather(*(pool.embed(target(m), texts, DOCUMENT) for m, texts in calls))
        for (model, texts), result in zip(calls, results, strict=True):
            alone = await pool.embed(target(model), texts[::-1], DOCUMENT)
            assert len(result.vectors) == len(texts)
            for vector, again in zip(result.vectors, alone.vectors[::-1], strict=True):
                assert cosine(vector, again) > 0.999
    finally:
        await pool.close()


@pytest.mark.parametrize("model", BUILTIN_MODELS, ids=lambda m: m.id)
async def test_vectors_have_the_model_dimension_and_unit_length(
    adapter: LocalEmbeddingAdapter, model: BuiltinModel
) -> None:
    result = await adapter.embed(target(model), ["hello world", PARAGRAPH, "x"], DOCUMENT)

    assert [len(v) for v in result.vectors] == [384, 384, 384]
    for vector in result.vectors:
        assert math.sqrt(sum(x * x for x in vector)) == pytest.approx(1.0, abs=1e-5)
    assert result.prompt_tokens is not None and result.prompt_tokens > 3 * 3  # specials + words


@pytest.mark.parametrize("model", BUILTIN_MODELS, ids=lambda m: m.id)
async def test_a_paraphrase_is_closer_than_an_unrelated_sentence(
    adapter: LocalEmbeddingAdapter, model: BuiltinModel
) -> None:
    query = await embed_one(adapter, model, "How do vaccines protect people from getting sick?", QUERY)
    paraphrase, unrelated = (
        await adapter.embed(
            target(model),
            [PARAGRAPH, UNRELATED],
            DOCUMENT,
        )
    ).vectors

    assert cosine(query, paraphrase) > cosine(query, unrelated) + 0.1


@pytest.mark.parametrize("model", BUILTIN_MODELS, ids=lambda m: m.id)
async def test_batches_keep_the_input_order(adapter: LocalEmbeddingAdapter, model: BuiltinModel) -> None:
    # Lengths are shuffled and the call spans several batches, so sorting by length inside the
    # adapter would show up here if the results were not put back in input order.
    texts = [
        "cats",
        PARAGRAPH,
        "The stock market fell sharply on Monday.",
        PARAGRAPH + " " + PARAGRAPH,
        "Photosynthesis turns light into chemical energy.",
        "a",
        "Rain is expected in the north tomorrow, with snow on high ground.",
    ]
    together = await adapter.embed(target(model), texts, DOCUMENT)

    one_by_one = [await adapter.embed(target(model), [text], DOCUMENT) for text in texts]
    assert len(together.vectors) == len(texts)
    for alone, vector in zip(one_by_one, together.vectors, strict=True):
        assert cosine(alone.vectors[0], vector) > 0.999
    assert together.prompt_tokens == sum(r.prompt_tokens or 0 for r in one_by_one)


@pytest.mark.parametrize("model", BUILTIN_MODELS, ids=lambda m: m.id)
async def test_a_1000_word_text_is_truncated_to_the_model_limit(
    adapter: LocalEmbeddingAdapter, model: BuiltinModel
) -> None:
    words = (PARAGRAPH + " ") * 40
    assert len(words.split()) >= 1000

    long_result = await adapter.embed(target(model), [words], DOCUMENT)
    with_other_tail = await adapter.embed(
        target(model), [words + " Completely unrelated: the recipe needs two cups of flour."], DOCUMENT
    )

    assert long_result.prompt_tokens is not None
    assert model.max_tokens - 16 <= long_result.prompt_tokens <= model.max_tokens
    # Only the first max_tokens count: what comes after them does not change the vector.
    assert cosine(long_result.vectors[0], with_other_tail.vectors[0]) > 0.9999


async def test_minilm_is_english_only_known_limitation(adapter: LocalEmbeddingAdapter) -> None:
    """Known limitation, stated in the model's description: MiniLM does not map Chinese onto English.

    "hello world" and "你好，世界" mean the same but score about 0.19; Chinese content needs the
    multilingual built-in (or a hosted multilingual model).
    """
    english, chinese = (await adapter.embed(target(MINILM), ["hello world", "你好，世界"], DOCUMENT)).vectors

    assert cosine(english, chinese) < 0.5
    assert "English only" in MINILM.description


async def test_multilingual_model_matches_chinese_queries_to_their_meaning(
    adapter: LocalEmbeddingAdapter,
) -> None:
    model = MULTILINGUAL_E5_SMALL
    query = await embed_one(adapter, model, "疫苗如何保护人们不生病？", QUERY)
    english_relevant, english_unrelated, chinese_relevant, chinese_unrelated = (
        await adapter.embed(
            target(model),
            [
                PARAGRAPH,
                UNRELATED,
                "疫苗让免疫系统在不引起疾病的情况下学会识别病原体，接种后记忆细胞会在真正感染时迅速反应。",
                "央行上调利率以抑制房地产市场的通货膨胀。",
            ],
            DOCUMENT,
        )
    ).vectors

    # Across languages (a Chinese question finds the English answer) and within Chinese.
    assert cosine(query, english_relevant) > cosine(query, english_unrelated) + 0.1
    assert cosine(query, chinese_relevant) > cosine(query, chinese_unrelated) + 0.05


async def test_e5_embeds_queries_and_passages_differently_minilm_does_not(
    adapter: LocalEmbeddingAdapter,
) -> None:
    text = "how much protein should an adult eat per day"
    e5_query = await embed_one(adapter, MULTILINGUAL_E5_SMALL, text, QUERY)
    e5_passage = await embed_one(adapter, MULTILINGUAL_E5_SMALL, text, DOCUMENT)
    minilm_query = await embed_one(adapter, MINILM, text, QUERY)
    minilm_passage = await embed_one(adapter, MINILM, text, pb.EMBED_INPUT_TYPE_UNSPECIFIED)

    assert cosine(e5_query, e5_passage) < 0.995  # "query: " vs "passage: " prefix
    assert cosine(minilm_query, minilm_passage) > 0.99999


async def test_embedding_runs_off_the_event_loop(adapter: LocalEmbeddingAdapter) -> None:
    gaps: list[float] = []
    stop = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    await adapter.embed(target(MINILM), [PARAGRAPH * 6] * 12, DOCUMENT)
    elapsed = time.perf_counter() - started
    stop.set()
    await ticker

    assert elapsed > 0.3, "the batch must take long enough for the check to mean something"
    assert max(gaps) < 0.25, f"the event loop stalled for {max(gaps):.3f}s during a {elapsed:.2f}s embed"
    assert len(gaps) > elapsed / 0.05


async def test_a_query_does_not_wait_for_a_whole_indexing_call(adapter: LocalEmbeddingAdapter) -> None:
    finished: list[str] = []

    async def index() -> None:
        await adapter.embed(target(MINILM), [PARAGRAPH * 6] * (BATCH * 3), DOCUMENT)
        finished.append("index")

    async def query() -> None:
        await asyncio.sleep(0.05)  # the indexing call's first batch is running by now
        await adapter.embed(target(MINILM), ["what do vaccines do"], QUERY)
        finished.append("query")

    await asyncio.gather(index(), query())

    assert finished == ["query", "index"]


async def test_calls_other_than_embed_are_the_wrong_model_type(adapter: LocalEmbeddingAdapter) -> None:
    call = target(MINILM)
    attempts: list[Any] = [
        adapter.next_token_logprobs(call, [], 5),
        adapter.rerank(call, "q", ["d"], 1),
        adapter.transcribe(call, pb.TranscribeRequest()),
    ]
    for attempt in attempts:
        with pytest.raises(ModelError) as caught:
            await attempt
        assert caught.value.code == ModelErrorCode.WRONG_MODEL_TYPE
        assert MINILM.id in caught.value.user_message()

    with pytest.raises(ModelError) as caught:
        async for _ in adapter.chat_stream(call, pb.ChatStreamRequest()):
            pass
    assert caught.value.code == ModelErrorCode.WRONG_MODEL_TYPE
    assert "knowledge_qa" in caught.value.user_message()


async def test_unknown_local_model_and_bad_input_type_are_clear_errors(
    adapter: LocalEmbeddingAdapter,
) -> None:
    unknown = CallTarget(
        model_id="m1",
        provider_id=PROVIDER_ID,
        model_name="no-such-model",
        base_url="",
        api_key=None,
        parameters=ModelParams(),
        types=frozenset({ModelType.EMBEDDING}),
    )
    with pytest.raises(ModelError) as caught:
        await adapter.embed(unknown, ["x"], DOCUMENT)
    assert caught.value.code == ModelErrorCode.MODEL_UNAVAILABLE
    assert "all-MiniLM-L6-v2" in caught.value.detail  # names what is available

    with pytest.raises(ModelError) as caught:
        await adapter.embed(target(MINILM), ["x"], 99)
    assert caught.value.code == ModelErrorCode.INVALID_INPUT
    assert caught.value.field == "input_type"

    assert (await adapter.embed(target(MINILM), [], DOCUMENT)).vectors == []
