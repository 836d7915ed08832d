"""LLM observation through Langfuse, active only when its keys are set.

``build_llm_observer`` returns a Langfuse-backed observer when both ``LANGFUSE_PUBLIC_KEY`` and
``LANGFUSE_SECRET_KEY`` are present (``LANGFUSE_HOST`` / ``LANGFUSE_BASE_URL`` pick the server),
and a no-op observer otherwise, so callers never branch on configuration.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol


class Generation(Protocol):
    """One model call being observed."""

    def update(self, *, output: Any = None, usage: Mapping[str, int] | None = None) -> None: ...


class LlmObserver(Protocol):
    """Records model calls as Langfuse generations (or nothing, when Langfuse is off)."""

    enabled: bool

    def generation(
        self, *, name: str, model: str, input: Any = None, parameters: Mapping[str, Any] | None = None
    ) -> Any: ...

    def flush(self) -> None: ...


class _NoopGeneration:
    def update(self, *, output: Any = None, usage: Mapping[str, int] | None = None) -> None:
        return None


class NoopLlmObserver:
    """Used when Langfuse keys are absent: every method does nothing."""

    enabled = False

    @contextmanager
    def generation(
        self, *, name: str, model: str, input: Any = None, parameters: Mapping[str, Any] | None = None
    ) -> Iterator[Generation]:
        yield _NoopGeneration()

    def flush(self) -> None:
        return None


class _LangfuseGeneration:
    def __init__(self, observation: Any) -> None:
        self._observation = observation

    def update(self, *, output: Any = None, usage: Mapping[str, int] | None = None) -> None:
        self._observation.update(output=output, usage_details=dict(usage) if usage else None)


class LangfuseLlmObserver:
    """Sends each model call to Langfuse as a generation."""

    enabled = True

    def __init__(self, client: Any) -> None:
        self._client = client

    @contextmanager
    def generation(
        self, *, name: str, model: str, input: Any = None, parameters: Mapping[str, Any] | None = None
    ) -> Iterator[Generation]:
        with self._client.start_as_current_observation(
            name=name,
            as_type="generation",
            model=model,
            input=input,
            model_parameters=dict(parameters) if parameters else None,
        ) as observation:
            yield _LangfuseGeneration(observation)

    def flush(self) -> None:
        self._client.flush()


def build_llm_observer(env: Mapping[str, str] | None = None) -> LlmObserver:
    """A Langfuse observer when both keys are set, a no-op one otherwise."""
    env = os.environ if env is None else env
    public_key = env.get("LANGFUSE_PUBLIC_KEY")
    secret_key = env.get("LANGFUSE_SECRET_KEY")
    if not (public_key and secret_key):
        return NoopLlmObserver()
    from langfuse import Langfuse

    client = Langfuse(
        public_key=public_key,
        secret_key=secret_key,
        base_url=env.get("LANGFUSE_BASE_URL") or env.get("LANGFUSE_HOST") or None,
    )
    return LangfuseLlmObserver(client)
