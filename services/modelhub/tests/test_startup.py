"""modelhub's start-up (``ModelHubCore.start``) on a real store: keys written by earlier versions are
rewritten in the current format and keep working; a store that cannot open is named without its
password."""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import traceback
from datetime import UTC, datetime
from pathlib import Path

import pytest
import structlog
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere_modelhub.adapters.local_embedding import LocalEmbeddingAdapter
from knowsphere_modelhub.adapters.sql_store import SqlModelStore
from knowsphere_modelhub.core import ModelHubCore
from knowsphere_modelhub.domain.providers import PROVIDERS
from knowsphere_modelhub.domain.records import ModelParams, ModelRecord
from knowsphere_modelhub.domain.registry import Registry
from knowsphere_modelhub.settings import Settings
from knowsphere_runtime.lifecycle import StartupError
from knowsphere_runtime.secrets import (
    MASTER_KEY_CHECK_PLAINTEXT,
    MASTER_KEY_CHECK_SETTING,
    KeyRing,
    derive_key,
    key_id_of,
    version_of,
)

API_KEY = "sk-written-by-v1-0123456789WXYZ"


def legacy_v1(master_key: str, plaintext: str) -> str:
    """A token as modelhub wrote them before records were bound (HKDF, the key id as associated data)."""
    derived = derive_key(master_key)
    key_id = hashlib.sha256(derived).hexdigest()[:8]
    nonce = os.urandom(12)
    sealed = AESGCM(derived).encrypt(nonce, plaintext.encode(), key_id.encode())
    return ":".join(("v1", key_id, base64.b64encode(nonce).decode(), base64.b64encode(sealed).decode()))


def _core(settings: Settings, store: SqlModelStore) -> tuple[ModelHubCore, Registry]:
    keyring = KeyRing.from_strings(settings.master_key.get_secret_value(), settings.master_key_previous)
    registry = Registry(store, keyring, PROVIDERS, {})
    local = LocalEmbeddingAdapter(batch_size=1)
    return ModelHubCore(settings, store, keyring, registry, local, []), registry


@pytest.mark.parametrize(
    "master_key",
    [
        "a-passphrase-typed-by-an-operator",  # now stretched with scrypt: a new key id too
        base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),  # what `make up` generates
    ],
    ids=["passphrase", "random-32-bytes"],
)
async def test_an_old_format_key_is_rewritten_at_start_and_still_works(
    tmp_path: Path, master_key: str
) -> None:
    settings = Settings(data_dir=tmp_path, master_key=master_key, local_embedding_enabled=False)  # type: ignore[arg-type]
    store = SqlModelStore(settings.sqlalchemy_url())
    # The database as the previous version left it: v1 check value and key, HKDF of MASTER_KEY.
    await store.open()
    await store.put_setting(MASTER_KEY_CHECK_SETTING, legacy_v1(master_key, MASTER_KEY_CHECK_PLAINTEXT))
    now = datetime.now(UTC)
    await store.create(
        ModelRecord(
            id="model-old",
            tenant_id="acme",
            display_name="old",
            provider_id="openai",
            model_name="gpt-4o",
            types=frozenset({ModelType.KNOWLEDGE_QA}),
            base_url="",
            parameters=ModelParams(),
            api_key_ciphertext=legacy_v1(master_key, API_KEY),
            api_key_hint="sk-…WXYZ",
            builtin=False,
            description="",
            create_time=now,
            update_time=now,
        )
    )
    await store.close()

    core, registry = _core(settings, store)
    with structlog.testing.capture_logs() as logged:
        await core.start()
    try:
        (stored,) = await store.list_api_keys()
        assert version_of(stored.ciphertext) == "v2"
        check = await store.get_setting(MASTER_KEY_CHECK_SETTING)
        assert check is not None and version_of(check) == "v2"
        assert key_id_of(check) == key_id_of(stored.ciphertext)
        assert any(line.get("records") == 1 for line in logged)
        # The model works as before: its call carries the key it was given.
        target = registry.call_target(await registry.get("acme", "model-old"))
        assert target.api_key == API_KEY
    finally:
        await core.stop()

    # The next start has nothing left to rewrite.
    again, _ = _core(settings, store)
    with structlog.testing.capture_logs() as logged:
        await again.start()
    await again.stop()
    assert not any(line.get("records") for line in logged)


async def test_a_model_store_that_cannot_open_is_named_without_its_password(tmp_path: Path) -> None:
    password = "Pg-Pa55word-9f8e7d"
    settings = Settings(
        data_dir=tmp_path,
        master_key="startup-test-master-key-0123",  # type: ignore[arg-type]
        local_embedding_enabled=False,
        # Nothing listens on port 1 of the loopback.
        database_url=f"postgresql+asyncpg://modelhub:{password}@127.0.0.1:1/knowsphere",
    )
    store = SqlModelStore(settings.sqlalchemy_url())
    core, _ = _core(settings, store)
    with structlog.testing.capture_logs() as logged, pytest.raises(StartupError) as refused:
        await core.start()
    shown = "".join(traceback.format_exception(refused.value))
    assert "cannot open the model store: cannot open SqlModelStore at " in shown
    assert "postgresql+asyncpg://modelhub:***@127.0.0.1:1/knowsphere" in shown
    assert password not in shown
    assert all(password not in str(line) for line in logged)
