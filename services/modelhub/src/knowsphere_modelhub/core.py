"""Start-up and shutdown of modelhub's state: the store, the master-key check, the built-in models."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import structlog

from knowsphere_modelhub.adapters.local_embedding import BUILTIN_MODELS, MINILM, LocalEmbeddingAdapter
from knowsphere_modelhub.domain.ports import ModelStore, ProviderAdapter
from knowsphere_modelhub.domain.registry import Registry
from knowsphere_modelhub.domain.secrets import verify_master_key
from knowsphere_modelhub.settings import Settings
from knowsphere_runtime.lifecycle import StartupError
from knowsphere_runtime.secrets import KeyRing, MasterKeyError
from knowsphere_telemetry.redaction import redact_text

log = structlog.get_logger(__name__)


class ModelHubCore:
    """Opens the store, checks MASTER_KEY against it, registers the built-in models."""

    name = "modelhub-core"

    def __init__(
        self,
        settings: Settings,
        store: ModelStore,
        keyring: KeyRing,
        registry: Registry,
        local: LocalEmbeddingAdapter,
        adapters: Sequence[ProviderAdapter],
    ) -> None:
        self._settings = settings
        self._store = store
        self._keyring = keyring
        self._registry = registry
        self._local = local
        self._adapters = adapters
        self._warm_up: asyncio.Task[None] | None = None

    async def start(self) -> object:
        self._settings.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            await self._store.open()  # type: ignore[attr-defined]
        except Exception as error:
            # The store's error names its URL with the password as ***; the settings' URL is not shown.
            raise StartupError(f"cannot open the model store: {redact_text(str(error))}") from None
        try:
            report = await verify_master_key(self._store, self._keyring)  # type: ignore[arg-type]
        except MasterKeyError as error:
            raise StartupError(str(error)) from error
        if report.rotated:
            log.info("api keys re-encrypted with the current master key and format", records=report.rotated)
        for model_id, why in report.rejected:
            log.warning("api key cannot be decrypted and is left as it is", model_id=model_id, reason=why)
        if self._settings.local_embedding_enabled:
            now = datetime.now(UTC)
            for model in BUILTIN_MODELS:
                await self._registry.register_builtin(model.record(now), default=model is MINILM)
            # Load the default model in the background: the service is usable at once, and the
            # first embedding request does not pay for loading the weights.
            self._warm_up = asyncio.create_task(self._preload())
        return None

    async def _preload(self) -> None:
        try:
            await self._local.warm_up([MINILM.model_name])
            log.info("local embedding model loaded", model=MINILM.model_name)
        except Exception:
            log.exception("local embedding model failed to load", model=MINILM.model_name)

    async def stop(self, grace: float | None = None) -> None:
        if self._warm_up is not None and not self._warm_up.done():
            self._warm_up.cancel()
        for adapter in self._adapters:
            await adapter.close()
        await self._store.close()
