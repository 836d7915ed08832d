"""Provider API keys at rest: the modelhub's part of the shared key ring (:mod:`knowsphere_runtime.secrets`)
— rotating its stored keys at start-up and checking MASTER_KEY against its data.

The key ring, the token format and the check live in the shared module, so every service that keeps a
tenant's secret uses the same MASTER_KEY the same way; a model's key is bound to ``(tenant, model id)``.
"""

from __future__ import annotations

from typing import Protocol

from knowsphere_modelhub.domain.ports import StoredKey
from knowsphere_runtime.secrets import (
    KeyRing,
    RotationReport,
    SecretError,
    SecretFailure,
    SecretScope,
    SettingsStore,
)
from knowsphere_runtime.secrets import verify_master_key as verify_ring

OWNER = "this modelhub"


class SecretStore(SettingsStore, Protocol):
    """What the start-up check and rotation need from the model store (a subset of ModelStore)."""

    async def list_api_keys(self) -> list[StoredKey]: ...

    async def replace_api_key(self, model_id: str, old_ciphertext: str, new_ciphertext: str) -> bool: ...


async def rotate_all(store: SecretStore, keyring: KeyRing) -> RotationReport:
    """Rewrite every stored API key that is not ``v2`` under the current key, bound to its row.

    A key changed concurrently (by an update) is left alone: the swap only happens when the stored
    ciphertext is still the one that was read.
    """
    rotated = 0
    undecryptable: list[tuple[str, str]] = []
    rejected: list[tuple[str, str]] = []
    for stored in await store.list_api_keys():
        try:
            if not keyring.needs_rotation(stored.ciphertext):
                continue
            fresh = keyring.reencrypt(stored.ciphertext, SecretScope(stored.tenant_id, stored.model_id))
        except SecretError as exc:
            if exc.failure is SecretFailure.UNKNOWN_KEY:
                undecryptable.append((stored.model_id, exc.key_id))
            else:
                rejected.append((stored.model_id, str(exc)))
            continue
        if await store.replace_api_key(stored.model_id, stored.ciphertext, fresh):
            rotated += 1
    return RotationReport(rotated=rotated, undecryptable=undecryptable, rejected=rejected)


async def verify_master_key(store: SecretStore, keyring: KeyRing) -> RotationReport:
    """Fail fast when MASTER_KEY is wrong; rotate the stored API keys when the data is under a previous
    key (see :func:`knowsphere_runtime.secrets.verify_master_key`)."""
    return await verify_ring(store, keyring, lambda: rotate_all(store, keyring), owner=OWNER)
