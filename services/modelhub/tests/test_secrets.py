"""API-key encryption: round trip, fresh nonces, tamper detection, ciphertexts bound to their record,
how MASTER_KEY becomes a key (HKDF for random keys, scrypt for passphrases), the MASTER_KEY check,
rotation and format upgrade at start-up, masks."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere_modelhub.adapters.sql_store import SqlModelStore
from knowsphere_modelhub.domain.records import ModelParams, ModelRecord
from knowsphere_modelhub.domain.secrets import rotate_all, verify_master_key
from knowsphere_runtime.secrets import (
    CHECK_SCOPE,
    MASTER_KEY_CHECK_PLAINTEXT,
    MASTER_KEY_CHECK_SETTING,
    SALT_SETTING,
    KeyRing,
    MasterKeyError,
    SecretError,
    SecretFailure,
    SecretScope,
    derive_key,
    is_random_key,
    key_id_of,
    mask,
    version_of,
)

OLD = "old-master-key-0123456789abcdef"
NEW = "new-master-key-fedcba9876543210"
SALT = b"installation-salt-16+"
API_KEY = "sk-live-0123456789abcdefghijWXYZ"
HERE = SecretScope("tenant-a", "model-a")


def ring(master_key: str, previous: tuple[str, ...] = ()) -> KeyRing:
    return KeyRing(master_key, previous, salt=SALT)


def legacy_v1(master_key: str, plaintext: str) -> str:
    """A token as modelhub wrote them before records were bound: HKDF of the master key, whatever it
    is, and the key id alone as associated data."""
    derived = derive_key(master_key)
    key_id = hashlib.sha256(derived).hexdigest()[:8]
    nonce = os.urandom(12)
    sealed = AESGCM(derived).encrypt(nonce, plaintext.encode(), key_id.encode())
    return ":".join(("v1", key_id, base64.b64encode(nonce).decode(), base64.b64encode(sealed).decode()))


def _flip_last_byte(token: str) -> str:
    version, key_id, nonce, data = token.split(":")
    raw = bytearray(base64.b64decode(data))
    raw[-1] ^= 0x01
    return ":".join((version, key_id, nonce, base64.b64encode(bytes(raw)).decode()))


def test_round_trip_and_token_shape():
    keys = ring(NEW)
    token = keys.encrypt(API_KEY, HERE)
    version, key_id, nonce, _ = token.split(":")
    assert (version, key_id) == ("v2", keys.key_id)
    assert len(key_id) == 8 and int(key_id, 16) >= 0
    assert len(base64.b64decode(nonce)) == 12
    assert API_KEY not in token
    assert keys.decrypt(token, HERE) == API_KEY


def test_every_encryption_uses_a_fresh_nonce():
    keys = ring(NEW)
    first, second = keys.encrypt(API_KEY, HERE), keys.encrypt(API_KEY, HERE)
    assert first != second
    assert first.split(":")[2] != second.split(":")[2]
    assert keys.decrypt(first, HERE) == keys.decrypt(second, HERE) == API_KEY


def test_tampered_ciphertext_is_rejected():
    keys = ring(NEW)
    token = keys.encrypt(API_KEY, HERE)
    with pytest.raises(SecretError, match="failed authentication") as caught:
        keys.decrypt(_flip_last_byte(token), HERE)
    assert caught.value.failure is SecretFailure.NOT_AUTHENTIC


@pytest.mark.parametrize(
    "elsewhere",
    [
        SecretScope("tenant-b", "model-a"),  # the same model id under another tenant
        SecretScope("tenant-a", "model-b"),  # another model of the same tenant
        SecretScope("tenant-b", "model-b"),
        CHECK_SCOPE,
    ],
)
def test_a_ciphertext_moved_to_another_record_does_not_decrypt(elsewhere):
    keys = ring(NEW)
    token = keys.encrypt(API_KEY, HERE)
    with pytest.raises(SecretError) as caught:
        keys.decrypt(token, elsewhere)
    assert caught.value.failure is SecretFailure.NOT_AUTHENTIC
    message = str(caught.value)
    assert f"was made for another record than {elsewhere.describe()} (copied from another row)" in message
    assert API_KEY not in message


def test_ids_cannot_be_shifted_between_tenant_and_model():
    # "a:b" + "c" and "a" + "b:c" must not make the same associated data.
    keys = ring(NEW)
    token = keys.encrypt(API_KEY, SecretScope("t1:x", "m"))
    with pytest.raises(SecretError):
        keys.decrypt(token, SecretScope("t1", "x:m"))


def test_relabelled_key_id_is_rejected():
    # The key id is associated data: moving a ciphertext under another key's id fails authentication.
    keys = ring(NEW, (OLD,))
    token = keys.encrypt(API_KEY, HERE)
    other_id = ring(OLD).key_id
    relabelled = token.replace(f":{keys.key_id}:", f":{other_id}:", 1)
    with pytest.raises(SecretError, match=other_id):
        keys.decrypt(relabelled, HERE)


def test_unknown_key_id_is_named():
    token = ring(OLD).encrypt(API_KEY, HERE)
    with pytest.raises(SecretError, match=ring(OLD).key_id) as caught:
        ring(NEW).decrypt(token, HERE)
    assert caught.value.key_id == ring(OLD).key_id
    assert caught.value.failure is SecretFailure.UNKNOWN_KEY


@pytest.mark.parametrize("token", ["", "sk-plain", "v3:abcd1234:AAAA:AAAA", "v2:abcd1234:not base64!:AAAA"])
def test_malformed_tokens_are_rejected(token):
    with pytest.raises(SecretError) as caught:
        ring(NEW).decrypt(token, HERE)
    assert caught.value.failure is SecretFailure.MALFORMED


def test_empty_master_key_is_refused():
    with pytest.raises(MasterKeyError, match="MASTER_KEY is empty"):
        KeyRing("  ")


def test_rotation_previous_key_decrypts_and_reencrypt_moves_to_current():
    old_token = ring(OLD).encrypt(API_KEY, HERE)
    keys = KeyRing.from_strings(NEW, f" other-retired-key-xxxxxxxx , {OLD} ", salt=SALT)
    assert keys.key_ids[0] == keys.key_id and ring(OLD).key_id in keys.key_ids
    assert keys.decrypt(old_token, HERE) == API_KEY
    assert keys.needs_rotation(old_token)
    fresh = keys.reencrypt(old_token, HERE)
    assert key_id_of(fresh) == keys.key_id
    assert not keys.needs_rotation(fresh)
    assert keys.reencrypt(fresh, HERE) == fresh
    assert ring(NEW).decrypt(fresh, HERE) == API_KEY


def test_a_v1_token_is_still_read_and_rewritten_as_v2_bound_to_its_record():
    old_format = legacy_v1(NEW, API_KEY)
    keys = ring(NEW)
    assert version_of(old_format) == "v1"
    assert keys.decrypt(old_format, HERE) == API_KEY
    assert keys.needs_rotation(old_format)
    fresh = keys.reencrypt(old_format, HERE)
    assert version_of(fresh) == "v2" and key_id_of(fresh) == keys.key_id
    assert keys.decrypt(fresh, HERE) == API_KEY
    with pytest.raises(SecretError):
        keys.decrypt(fresh, SecretScope("tenant-b", "model-a"))


# --- what MASTER_KEY becomes ---------------------------------------------------------------------------


def test_32_random_bytes_in_base64_are_used_through_hkdf_as_before():
    for text in (
        base64.b64encode(secrets.token_bytes(32)).decode(),  # openssl rand -base64 32
        base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),  # make up's master.key
        secrets.token_urlsafe(32),  # unpadded base64url
    ):
        assert is_random_key(text), text
        keys = KeyRing(text)  # needs no salt
        assert not keys.needs_salt
        # The key id is the one earlier versions derived: records of `make up` need no migration.
        assert keys.key_ids == (hashlib.sha256(derive_key(text)).hexdigest()[:8],)
        assert keys.decrypt(legacy_v1(text, API_KEY), HERE) == API_KEY


@pytest.mark.parametrize(
    "text",
    [
        NEW,
        "the-right-master-key-123456",
        "A" * 43,  # base64 of 32 bytes in form, but a typed pattern
        base64.b64encode(secrets.token_bytes(24)).decode(),  # random, but too short for AES-256
        base64.b64encode(secrets.token_bytes(32)).decode() + "x",
    ],
)
def test_anything_else_is_a_passphrase_stretched_with_scrypt_and_the_installation_salt(text):
    assert not is_random_key(text)
    keys = KeyRing(text)
    assert keys.needs_salt
    with pytest.raises(RuntimeError, match="unlock"):
        keys.encrypt(API_KEY, HERE)
    keys.unlock(SALT)
    elsewhere = KeyRing(text, salt=b"another-installation")
    # Another installation's salt gives another key; neither is the HKDF one of earlier versions.
    hkdf_id = hashlib.sha256(derive_key(text)).hexdigest()[:8]
    assert keys.key_id != elsewhere.key_id and hkdf_id not in (keys.key_id, elsewhere.key_id)
    # The HKDF key stays in the ring to read what was written before, and never encrypts.
    assert keys.key_ids == (keys.key_id, hkdf_id)
    assert keys.decrypt(legacy_v1(text, API_KEY), HERE) == API_KEY
    with pytest.raises(SecretError):
        elsewhere.decrypt(keys.encrypt(API_KEY, HERE), HERE)


def test_a_short_salt_is_refused():
    with pytest.raises(MasterKeyError, match="16 bytes"):
        KeyRing(NEW, salt=b"short")


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


# --- the start-up check, the installation salt, rotation of stored keys -------------------------------


@pytest.fixture
async def store(tmp_path: Path):
    store = SqlModelStore(f"sqlite+aiosqlite:///{tmp_path}/modelhub.db")
    await store.open()
    yield store
    await store.close()


def _record(model_id: str, ciphertext: str | None, tenant_id: str = "t1") -> ModelRecord:
    now = datetime.now(UTC)
    return ModelRecord(
        id=model_id,
        tenant_id=tenant_id,
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


def _scope(model_id: str, tenant_id: str = "t1") -> SecretScope:
    return SecretScope(tenant_id, model_id)


async def test_first_start_writes_a_check_and_the_same_key_passes_later(store):
    keys = KeyRing(NEW)
    await verify_master_key(store, keys)
    check = await store.get_setting(MASTER_KEY_CHECK_SETTING)
    assert check is not None and key_id_of(check) == keys.key_id and version_of(check) == "v2"
    await verify_master_key(store, KeyRing(NEW))
    assert await store.get_setting(MASTER_KEY_CHECK_SETTING) == check


async def test_the_installation_salt_is_made_once_and_kept(store):
    assert await store.get_setting(SALT_SETTING) is None
    first = KeyRing(NEW)
    await verify_master_key(store, first)
    salt = await store.get_setting(SALT_SETTING)
    assert salt is not None and len(base64.b64decode(salt)) == 16
    again = KeyRing(NEW)
    await verify_master_key(store, again)
    assert await store.get_setting(SALT_SETTING) == salt and again.key_id == first.key_id


async def _replicas_start_together(url: str) -> None:
    replicas = [SqlModelStore(url) for _ in range(4)]  # each with its own engine and connections
    for replica in replicas:
        await replica.open()
    try:
        rings = [KeyRing(NEW) for _ in replicas]
        await asyncio.gather(*(verify_master_key(r, keys) for r, keys in zip(replicas, rings, strict=True)))
        assert len({keys.key_id for keys in rings}) == 1
        # add_setting never replaces what is stored.
        stored = await replicas[0].get_setting(SALT_SETTING)
        assert await replicas[1].add_setting(SALT_SETTING, "something else") == stored
    finally:
        for replica in replicas:
            await replica.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_replicas_starting_together_agree_on_one_salt(backend, tmp_path, postgres_database):
    if backend == "sqlite":
        await _replicas_start_together(f"sqlite+aiosqlite:///{tmp_path}/modelhub.db")
        return
    async for url in postgres_database("modelhub installation salt"):
        await _replicas_start_together(url)


async def test_random_master_keys_need_no_salt(store):
    await verify_master_key(store, KeyRing(base64.b64encode(secrets.token_bytes(32)).decode()))
    assert await store.get_setting(SALT_SETTING) is None


async def test_an_altered_salt_stops_the_start_naming_it(store):
    await store.put_setting(SALT_SETTING, "not base64!")
    with pytest.raises(MasterKeyError, match=f"{SALT_SETTING} is not 16 or more bytes"):
        await verify_master_key(store, KeyRing(NEW))


async def test_wrong_master_key_fails_with_a_clear_message(store):
    old = KeyRing(OLD)
    await verify_master_key(store, old)
    with pytest.raises(MasterKeyError) as caught:
        await verify_master_key(store, KeyRing(NEW))
    message = str(caught.value)
    assert message.startswith(
        f"MASTER_KEY does not match the key this modelhub's data was encrypted with (key id {old.key_id})."
    )
    assert "Set the original MASTER_KEY, or keep it in MASTER_KEY_PREVIOUS while rotating." in message


async def test_start_with_previous_key_rotates_every_stored_key_then_the_check(store):
    old = KeyRing(OLD)
    await verify_master_key(store, old)
    await store.create(_record("m1", old.encrypt("key-one-0123456789", _scope("m1"))))
    await store.create(_record("m2", old.encrypt("key-two-0123456789", _scope("m2"))))
    await store.create(_record("m3", None))

    rotating = KeyRing(NEW, [OLD])
    report = await verify_master_key(store, rotating)
    assert report.rotated == 2 and report.undecryptable == [] and report.rejected == []
    stored = {k.model_id: k.ciphertext for k in await store.list_api_keys()}
    assert set(stored) == {"m1", "m2"}
    assert {key_id_of(c) for c in stored.values()} == {rotating.key_id}
    check = await store.get_setting(MASTER_KEY_CHECK_SETTING)
    assert check is not None and key_id_of(check) == rotating.key_id

    # The previous key can now be dropped.
    alone = KeyRing(NEW)
    await verify_master_key(store, alone)
    assert alone.decrypt(stored["m1"], _scope("m1")) == "key-one-0123456789"


async def test_old_format_records_are_rewritten_at_start_and_still_decrypt(store):
    # What an installation with a passphrase MASTER_KEY holds before this version: v1 tokens under the
    # HKDF key of the passphrase, the check value included, and no salt yet.
    await store.put_setting(MASTER_KEY_CHECK_SETTING, legacy_v1(NEW, MASTER_KEY_CHECK_PLAINTEXT))
    await store.create(_record("m1", legacy_v1(NEW, "key-one-0123456789"), tenant_id="t1"))
    await store.create(_record("m2", legacy_v1(NEW, "key-two-0123456789"), tenant_id="t2"))

    keys = KeyRing(NEW)
    report = await verify_master_key(store, keys)
    assert report.rotated == 2 and report.rejected == []
    stored = {k.model_id: k.ciphertext for k in await store.list_api_keys()}
    assert {(version_of(c), key_id_of(c)) for c in stored.values()} == {("v2", keys.key_id)}
    assert keys.decrypt(stored["m1"], _scope("m1", "t1")) == "key-one-0123456789"
    assert keys.decrypt(stored["m2"], _scope("m2", "t2")) == "key-two-0123456789"
    check = await store.get_setting(MASTER_KEY_CHECK_SETTING)
    assert check is not None and (version_of(check), key_id_of(check)) == ("v2", keys.key_id)
    # Now bound: the rewritten m1 does not open in m2's row.
    with pytest.raises(SecretError):
        keys.decrypt(stored["m1"], _scope("m2", "t2"))
    # A later start has nothing left to do.
    assert (await verify_master_key(store, KeyRing(NEW))).rotated == 0


async def test_a_key_nobody_can_decrypt_stops_the_rotation_and_is_named(store):
    old = KeyRing(OLD)
    await verify_master_key(store, old)
    lost = ring("a-key-that-was-lost-long-ago")
    await store.create(_record("m-lost", lost.encrypt("whatever-0123456789", _scope("m-lost"))))
    with pytest.raises(MasterKeyError, match=rf"m-lost \(key id {lost.key_id}\)"):
        await verify_master_key(store, KeyRing(NEW, [OLD]))
    # The check stays under the old key, so the next start tries again.
    check = await store.get_setting(MASTER_KEY_CHECK_SETTING)
    assert check is not None and key_id_of(check) == old.key_id


async def test_a_moved_ciphertext_is_left_as_it_is_and_named_without_stopping_the_start(store):
    old = KeyRing(OLD)
    await verify_master_key(store, old)
    await store.create(_record("m1", old.encrypt("key-one-0123456789", _scope("m1"))))
    # m2's row holds a copy of m1's ciphertext: no MASTER_KEY decrypts it there.
    await store.create(_record("m2", old.encrypt("key-one-0123456789", _scope("m1")), tenant_id="t2"))
    rotating = KeyRing(NEW, [OLD])
    report = await verify_master_key(store, rotating)
    assert report.rotated == 1 and report.undecryptable == []
    assert [model_id for model_id, _ in report.rejected] == ["m2"]
    assert "was made for another record than record m2 of tenant 't2'" in report.rejected[0][1]
    stored = {k.model_id: k.ciphertext for k in await store.list_api_keys()}
    assert key_id_of(stored["m1"]) == rotating.key_id and key_id_of(stored["m2"]) == old.key_id


async def test_rotate_all_skips_keys_already_current(store):
    keys = ring(NEW, (OLD,))
    current = keys.encrypt("already-current-0123", _scope("m1"))
    await store.create(_record("m1", current))
    report = await rotate_all(store, keys)
    assert report.rotated == 0
    assert [k.ciphertext for k in await store.list_api_keys()] == [current]
