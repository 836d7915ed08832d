"""API-key encryption: round trip, fresh nonces, tamper detection, the MASTER_KEY check, rotation, masks."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path

import pytest

from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere_modelhub.adapters.sql_store import SqlModelStore
from knowsphere_modelhub.domain.records import ModelParams, ModelRecord
from knowsphere_modelhub.domain.secrets import (
    MASTER_KEY_CHECK_SETTING,
    KeyRing,
    MasterKeyError,
    SecretError,
    key_id_of,
    mask,
    rotate_all,
    verify_master_key,
)

OLD = "old-master-key-0123456789abcdef"
NEW = "new-master-key-fedcba9876543210"
API_KEY = "sk-live-0123456789abcdefghijWXYZ"


def _flip_last_byte(token: str) -> str:
    version, key_id, nonce, data = token.split(":")
    raw = bytearray(base64.b64decode(data))
    raw[-1] ^= 0x01
    return ":".join((version, key_id, nonce, base64.b64encode(bytes(raw)).decode()))


def test_round_trip_and_token_shape():
    ring = KeyRing(NEW)
    token = ring.encrypt(API_KEY)
    version, key_id, nonce, _ = token.split(":")
    assert (version, key_id) == ("v1", ring.key_id)
    assert len(key_id) == 8 and int(key_id, 16) >= 0
    assert len(base64.b64decode(nonce)) == 12
    assert API_KEY not in token
    assert ring.decrypt(token) == API_KEY


def test_every_encryption_uses_a_fresh_nonce():
    ring = KeyRing(NEW)
    first, second = ring.encrypt(API_KEY), ring.encrypt(API_KEY)
    assert first != second
    assert first.split(":")[2] != second.split(":")[2]
    assert ring.decrypt(first) == ring.decrypt(second) == API_KEY


def test_tampered_ciphertext_is_rejected():
    ring = KeyRing(NEW)
    token = ring.encrypt(API_KEY)
    with pytest.raises(SecretError, match="failed authentication"):
        ring.decrypt(_flip_last_byte(token))


def test_relabelled_key_id_is_rejected():
    # The key id is associated data: moving a ciphertext under another key's id fails authentication.
    ring = KeyRing(NEW, [OLD])
    token = ring.encrypt(API_KEY)
    other_id = KeyRing(OLD).key_id
    relabelled = token.replace(f":{ring.key_id}:", f":{other_id}:", 1)
    with pytest.raises(SecretError, match=other_id):
        ring.decrypt(relabelled)


def test_unknown_key_id_is_named():
    token = KeyRing(OLD).encrypt(API_KEY)
    with pytest.raises(SecretError, match=KeyRing(OLD).key_id) as caught:
        KeyRing(NEW).decrypt(token)
    assert caught.value.key_id == KeyRing(OLD).key_id


@pytest.mark.parametrize("token", ["", "sk-plain", "v2:abcd1234:AAAA:AAAA", "v1:abcd1234:not base64!:AAAA"])
def test_malformed_tokens_are_rejected(token):
    with pytest.raises(SecretError):
        KeyRing(NEW).decrypt(token)


def test_empty_master_key_is_refused():
    with pytest.raises(MasterKeyError, match="MASTER_KEY is empty"):
        KeyRing("  ")


def test_rotation_previous_key_decrypts_and_reencrypt_moves_to_current():
    old_token = KeyRing(OLD).encrypt(API_KEY)
    ring = KeyRing.from_strings(NEW, f" other-retired-key-xxxxxxxx , {OLD} ")
    assert ring.key_ids[0] == ring.key_id and KeyRing(OLD).key_id in ring.key_ids
    assert ring.decrypt(old_token) == API_KEY
    assert ring.needs_rotation(old_token)
    fresh = ring.reencrypt(old_token)
    assert key_id_of(fresh) == ring.key_id
    assert not ring.needs_rotation(fresh)
    assert ring.reencrypt(fresh) == fresh
    assert KeyRing(NEW).decrypt(fresh) == API_KEY


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("sk-0123456789abcdefa1b2", "sk-…a1b2"),
        ("0123456789abcdefghijklmn", "…klmn"),
        ("sk-short", "…"),
        ("abc", "…"),
        ("", "…"),
    ],
)
def test_mask_shows_at_most_the_last_four_characters(key, hint):
    assert mask(key) == hint


@pytest.mark.parametrize(
    "key", [API_KEY, "x" * 11 + "SECRET", "AKIA" + "Z" * 40, "sk-ant-api03-" + "q" * 30 + "TAIL"]
)
def test_mask_never_reveals_more_than_four_secret_characters(key):
    hint = mask(key)
    prefix, _, tail = hint.partition("…")
    assert len(tail) <= 4
    assert prefix in ("", "sk-")
    assert key.endswith(tail)
    assert len(hint) < len(key) // 2


# --- the start-up check and rotation of stored keys ----------------------------------------------------


@pytest.fixture
async def store(tmp_path: Path):
    store = SqlModelStore(f"sqlite+aiosqlite:///{tmp_path}/modelhub.db")
    await store.open()
    yield store
    await store.close()


def _record(model_id: str, ciphertext: str | None) -> ModelRecord:
    now = datetime.now(UTC)
    return ModelRecord(
        id=model_id,
        tenant_id="t1",
        display_name=model_id,
        provider_id="openai",
        model_name="gpt-4o",
        types=frozenset({ModelType.KNOWLEDGE_QA}),
        base_url="",
        parameters=ModelParams(),
        api_key_ciphertext=ciphertext,
        api_key_hint="",
        builtin=False,
        description="",
        create_time=now,
        update_time=now,
    )


async def test_first_start_writes_a_check_and_the_same_key_passes_later(store):
    await verify_master_key(store, KeyRing(NEW))
    check = await store.get_setting(MASTER_KEY_CHECK_SETTING)
    assert check is not None and key_id_of(check) == KeyRing(NEW).key_id
    await verify_master_key(store, KeyRing(NEW))
    assert await store.get_setting(MASTER_KEY_CHECK_SETTING) == check


async def test_wrong_master_key_fails_with_a_clear_message(store):
    await verify_master_key(store, KeyRing(OLD))
    with pytest.raises(MasterKeyError) as caught:
        await verify_master_key(store, KeyRing(NEW))
    message = str(caught.value)
    assert message.startswith(
        "MASTER_KEY does not match the key this modelhub's data was encrypted with "
        f"(key id {KeyRing(OLD).key_id})."
    )
    assert "Set the original MASTER_KEY, or keep it in MASTER_KEY_PREVIOUS while rotating." in message


async def test_start_with_previous_key_rotates_every_stored_key_then_the_check(store):
    old = KeyRing(OLD)
    await verify_master_key(store, old)
    await store.create(_record("m1", old.encrypt("key-one-0123456789")))
    await store.create(_record("m2", old.encrypt("key-two-0123456789")))
    await store.create(_record("m3", None))

    rotating = KeyRing(NEW, [OLD])
    report = await verify_master_key(store, rotating)
    assert report.rotated == 2 and report.undecryptable == []
    stored = {k.model_id: k.ciphertext for k in await store.list_api_keys()}
    assert set(stored) == {"m1", "m2"}
    assert {key_id_of(c) for c in stored.values()} == {rotating.key_id}
    check = await store.get_setting(MASTER_KEY_CHECK_SETTING)
    assert check is not None and key_id_of(check) == rotating.key_id

    # The previous key can now be dropped.
    alone = KeyRing(NEW)
    await verify_master_key(store, alone)
    assert alone.decrypt(stored["m1"]) == "key-one-0123456789"


async def test_a_key_nobody_can_decrypt_stops_the_rotation_and_is_named(store):
    await verify_master_key(store, KeyRing(OLD))
    lost = KeyRing("a-key-that-was-lost-long-ago")
    await store.create(_record("m-lost", lost.encrypt("whatever-0123456789")))
    with pytest.raises(MasterKeyError, match=rf"m-lost \(key id {lost.key_id}\)"):
        await verify_master_key(store, KeyRing(NEW, [OLD]))
    # The check stays under the old key, so the next start tries again.
    check = await store.get_setting(MASTER_KEY_CHECK_SETTING)
    assert check is not None and key_id_of(check) == KeyRing(OLD).key_id


async def test_rotate_all_skips_keys_already_current(store):
    ring = KeyRing(NEW, [OLD])
    current = ring.encrypt("already-current-0123")
    await store.create(_record("m1", current))
    report = await rotate_all(store, ring)
    assert report.rotated == 0
    assert [k.ciphertext for k in await store.list_api_keys()] == [current]
