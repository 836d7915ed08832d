"""Encryption of provider API keys at rest, and the start-up check that MASTER_KEY is the right one.

A :class:`KeyRing` derives an AES-256-GCM key from ``MASTER_KEY`` (HKDF-SHA256) and from each key in
``MASTER_KEY_PREVIOUS``. Every ciphertext names the key it was made with, so records written before a
rotation stay readable while the previous key is kept, and :func:`rotate_all` moves them to the
current key. Token format::

    v1:<key id>:<nonce, base64>:<ciphertext and GCM tag, base64>

The key id (first 8 hex digits of SHA-256 of the derived key) is also the GCM associated data, so a
token cannot be relabelled to another key. It identifies a key without revealing it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from knowsphere_modelhub.domain.ports import StoredKey

TOKEN_VERSION = "v1"
# Fixed HKDF inputs: changing either changes every derived key (and so every key id).
HKDF_SALT = b"KnowSphere modelhub key-encryption salt v1"
HKDF_INFO = b"KnowSphere modelhub provider API keys, AES-256-GCM"
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # the GCM standard nonce size
KEY_ID_HEX_CHARS = 8

MASTER_KEY_CHECK_SETTING = "master_key_check"
MASTER_KEY_CHECK_PLAINTEXT = "KnowSphere modelhub MASTER_KEY check v1"

# Masked hints: at most the last MASK_VISIBLE_CHARS characters of a key are shown, and only when the
# secret part is at least MASK_MIN_SECRET_CHARS long (for shorter keys 4 characters would be too much).
MASK_VISIBLE_CHARS = 4
MASK_MIN_SECRET_CHARS = 12
MASK_ELLIPSIS = "…"
# A well-known vendor prefix such as "sk-" carries no secret and helps recognise the key.
_KEY_PREFIX = re.compile(r"^[A-Za-z]{2,3}-")


class SecretError(Exception):
    """A ciphertext cannot be decrypted: unknown key id, failed authentication tag, or bad format."""

    def __init__(self, message: str, *, key_id: str = "") -> None:
        super().__init__(message)
        self.key_id = key_id


class MasterKeyError(Exception):
    """MASTER_KEY is missing, empty, or not the key this modelhub's data was encrypted with."""


@dataclass(frozen=True)
class _Key:
    key_id: str
    aead: AESGCM = field(repr=False)


def derive_key(master_key: str) -> bytes:
    """The 32-byte AES key derived from a master key (HKDF-SHA256 with KnowSphere's salt and info)."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=HKDF_SALT, info=HKDF_INFO)
    return hkdf.derive(master_key.encode("utf-8"))


def _make_key(master_key: str) -> _Key:
    derived = derive_key(master_key)
    key_id = hashlib.sha256(derived).hexdigest()[:KEY_ID_HEX_CHARS]
    return _Key(key_id=key_id, aead=AESGCM(derived))


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


class KeyRing:
    """The current key (encrypts) and previous keys (decrypt only), each known by its key id."""

    def __init__(self, master_key: str, previous: Iterable[str] = ()) -> None:
        if not master_key or not master_key.strip():
            raise MasterKeyError(
                "MASTER_KEY is empty. Set MASTER_KEY to the secret that encrypts provider API keys."
            )
        self._current = _make_key(master_key)
        self._keys: dict[str, _Key] = {self._current.key_id: self._current}
        for old in previous:
            if old and old.strip():
                key = _make_key(old.strip())
                self._keys.setdefault(key.key_id, key)

    @classmethod
    def from_strings(cls, master_key: str, previous_csv: str = "") -> KeyRing:
        """From the ``MASTER_KEY`` value and the comma-separated ``MASTER_KEY_PREVIOUS`` value."""
        return cls(master_key, [part.strip() for part in previous_csv.split(",") if part.strip()])

    @property
    def key_id(self) -> str:
        """Id of the current key (the one :meth:`encrypt` uses)."""
        return self._current.key_id

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Ids of every key this ring can decrypt with, current first."""
        return tuple(self._keys)

    def encrypt(self, plaintext: str) -> str:
        """Encrypt with the current key and a fresh random nonce."""
        nonce = os.urandom(NONCE_BYTES)
        key_id = self._current.key_id
        sealed = self._current.aead.encrypt(nonce, plaintext.encode("utf-8"), key_id.encode("ascii"))
        return ":".join(
            (
                TOKEN_VERSION,
                key_id,
                base64.b64encode(nonce).decode("ascii"),
                base64.b64encode(sealed).decode("ascii"),
            )
        )

    def decrypt(self, token: str) -> str:
        """Decrypt a token made by :meth:`encrypt` with the current or a previous key."""
        key_id, nonce, sealed = _parse(token)
        key = self._keys.get(key_id)
        if key is None:
            raise SecretError(
                f"ciphertext was made with key id {key_id}, which is neither MASTER_KEY (key id "
                f"{self.key_id}) nor in MASTER_KEY_PREVIOUS",
                key_id=key_id,
            )
        try:
            plaintext = key.aead.decrypt(nonce, sealed, key_id.encode("ascii"))
        except InvalidTag:
            raise SecretError(
                f"ciphertext under key id {key_id} failed authentication (tampered or corrupted)",
                key_id=key_id,
            ) from None
        return plaintext.decode("utf-8")

    def needs_rotation(self, token: str) -> bool:
        """Whether the token was made with a key other than the current one."""
        return key_id_of(token) != self.key_id

    def reencrypt(self, token: str) -> str:
        """The token under the current key (unchanged when it already is)."""
        return self.encrypt(self.decrypt(token)) if self.needs_rotation(token) else token


def _parse(token: str) -> tuple[str, bytes, bytes]:
    parts = token.split(":")
    if len(parts) != 4 or parts[0] != TOKEN_VERSION:
        raise SecretError(
            f"not a {TOKEN_VERSION} ciphertext (expected {TOKEN_VERSION}:<key id>:<nonce>:<data>)"
        )
    _, key_id, nonce_b64, sealed_b64 = parts
    try:
        nonce, sealed = _b64decode(nonce_b64), _b64decode(sealed_b64)
    except (binascii.Error, ValueError):
        raise SecretError(f"ciphertext under key id {key_id} is not valid base64", key_id=key_id) from None
    if len(nonce) != NONCE_BYTES:
        raise SecretError(f"ciphertext under key id {key_id} has a {len(nonce)}-byte nonce", key_id=key_id)
    return key_id, nonce, sealed


def key_id_of(token: str) -> str:
    """The key id a token names (without decrypting it)."""
    return _parse(token)[0]


def mask(api_key: str) -> str:
    """A hint that helps recognise a key without revealing it: ``sk-…a1b2``; ``…`` for short keys.

    Shows at most the last four characters, plus a short vendor prefix such as ``sk-``.
    """
    key = api_key.strip()
    match = _KEY_PREFIX.match(key)
    prefix = match.group(0) if match else ""
    secret = key[len(prefix) :]
    if len(secret) < MASK_MIN_SECRET_CHARS:
        return MASK_ELLIPSIS
    return f"{prefix}{MASK_ELLIPSIS}{secret[-MASK_VISIBLE_CHARS:]}"


# --- start-up check and rotation -----------------------------------------------------------------


class SecretStore(Protocol):
    """What the start-up check and rotation need from the model store (a subset of ModelStore)."""

    async def get_setting(self, key: str) -> str | None: ...

    async def put_setting(self, key: str, value: str) -> None: ...

    async def list_api_keys(self) -> list[StoredKey]: ...

    async def replace_api_key(self, model_id: str, old_ciphertext: str, new_ciphertext: str) -> bool: ...


@dataclass(frozen=True)
class RotationReport:
    rotated: int
    # (model id, key id) of keys no key of the ring can decrypt.
    undecryptable: list[tuple[str, str]]


def _mismatch_message(key_id: str) -> str:
    return (
        f"MASTER_KEY does not match the key this modelhub's data was encrypted with (key id {key_id}). "
        "Set the original MASTER_KEY, or keep it in MASTER_KEY_PREVIOUS while rotating."
    )


async def rotate_all(store: SecretStore, keyring: KeyRing) -> RotationReport:
    """Re-encrypt every stored API key that is not under the current key.

    A key changed concurrently (by an update) is left alone: the swap only happens when the stored
    ciphertext is still the one that was read.
    """
    rotated = 0
    undecryptable: list[tuple[str, str]] = []
    for stored in await store.list_api_keys():
        try:
            if not keyring.needs_rotation(stored.ciphertext):
                continue
            fresh = keyring.reencrypt(stored.ciphertext)
        except SecretError as exc:
            undecryptable.append((stored.model_id, exc.key_id or "?"))
            continue
        if await store.replace_api_key(stored.model_id, stored.ciphertext, fresh):
            rotated += 1
    return RotationReport(rotated=rotated, undecryptable=undecryptable)


async def verify_master_key(store: SecretStore, keyring: KeyRing) -> RotationReport:
    """Fail fast when MASTER_KEY is wrong; finish a rotation when the data is under a previous key.

    - First start (no check value): every stored key must decrypt (normally there are none), then an
      encrypted check value is written.
    - Later starts: the check value must decrypt, else :class:`MasterKeyError`. When it was written
      with a key from MASTER_KEY_PREVIOUS, every stored API key is re-encrypted with MASTER_KEY and
      the check value last, so the check moves only once everything else has.
    """
    stored = await store.get_setting(MASTER_KEY_CHECK_SETTING)
    if stored is not None:
        try:
            value = keyring.decrypt(stored)
        except SecretError as exc:
            raise MasterKeyError(_mismatch_message(exc.key_id or "unknown")) from None
        if value != MASTER_KEY_CHECK_PLAINTEXT:
            raise MasterKeyError(_mismatch_message(key_id_of(stored)))
        if not keyring.needs_rotation(stored):
            return RotationReport(rotated=0, undecryptable=[])
    report = await rotate_all(store, keyring)
    if report.undecryptable:
        listed = ", ".join(f"{model_id} (key id {key_id})" for model_id, key_id in report.undecryptable)
        first_key_id = report.undecryptable[0][1]
        raise MasterKeyError(
            f"{_mismatch_message(first_key_id)} API keys that cannot be decrypted: {listed}."
        )
    await store.put_setting(MASTER_KEY_CHECK_SETTING, keyring.encrypt(MASTER_KEY_CHECK_PLAINTEXT))
    return report
