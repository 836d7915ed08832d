"""Encryption of tenants' secrets at rest (provider API keys, external applications' keys, channel
secrets), and the start-up check that MASTER_KEY is the right one. Every service that keeps such a
secret uses this one key ring, so one MASTER_KEY (and its rotation) covers them all.

**Keys.** A :class:`KeyRing` holds an AES-256-GCM key derived from ``MASTER_KEY`` and from each key in
``MASTER_KEY_PREVIOUS``, by what the master key is:

- 32 random bytes in base64 or base64url (``openssl rand -base64 32``; what ``make up`` generates):
  HKDF-SHA256 — the key already has all the entropy an AES key needs;
- anything else is a passphrase (settings require at least 16 characters): scrypt with
  N=2^15, r=8, p=1 (32 MiB, a few tens of milliseconds per key at start-up) and a random 16-byte salt
  per installation and service, kept in the service's store (``master_key_salt``), so every guess at a
  passphrase costs that much again. Such a ring can neither encrypt nor decrypt until it has the salt
  (:meth:`KeyRing.unlock`, which :func:`verify_master_key` calls at start-up).

Records written when passphrases went through HKDF stay readable: the ring keeps that derivation of
every passphrase for decrypting only, and start-up re-encrypts those records.

**Tokens**::

    v2:<key id>:<nonce, base64>:<ciphertext and GCM tag, base64>

The GCM associated data binds a token to its key id and to the record it belongs to — the tenant and
the record (:class:`SecretScope`; a model id, or ``<kind>/<id>/<field>`` for other records) — so a
ciphertext copied into another row (another tenant's, another field's) fails authentication instead of
decrypting. ``v1`` tokens (associated data: the key id only) are still read, and rewritten as ``v2`` at
start-up by the same pass that moves records off a previous master key. The key id (first 8 hex digits
of SHA-256 of the derived key) identifies a key without revealing it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
from pydantic import AliasChoices, Field, SecretStr

TOKEN_VERSION = "v2"  # associated data: key id, tenant id, model id
LEGACY_TOKEN_VERSION = "v1"  # associated data: key id only; read, rewritten as v2 at start-up
# Fixed HKDF inputs: changing either changes every derived key (and so every key id).
HKDF_SALT = b"KnowSphere modelhub key-encryption salt v1"
HKDF_INFO = b"KnowSphere modelhub provider API keys, AES-256-GCM"
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # the GCM standard nonce size
KEY_ID_HEX_CHARS = 8

# Passphrases: scrypt with these costs (N=2^15, r=8: 128·N·r bytes = 32 MiB of memory per derivation).
SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16
SALT_SETTING = "master_key_salt"

MASTER_KEY_CHECK_SETTING = "master_key_check"
MASTER_KEY_CHECK_PLAINTEXT = "KnowSphere modelhub MASTER_KEY check v1"  # kept: stored check values

# Masked hints: at most the last MASK_VISIBLE_CHARS characters of a key are shown, and only when the
# secret part is at least MASK_MIN_SECRET_CHARS long (for shorter keys 4 characters would be too much).
MASK_VISIBLE_CHARS = 4
MASK_MIN_SECRET_CHARS = 12
MASK_ELLIPSIS = "…"
# A well-known vendor prefix such as "sk-" carries no secret and helps recognise the key.
_KEY_PREFIX = re.compile(r"^[A-Za-z]{2,3}-")
# 32 bytes in base64 are 43 characters, 44 with the padding.
_RANDOM_KEY_CHARS = (43, 44)
# 32 random bytes hold about 30 different values; fewer than this is a typed pattern ("AAAA…").
RANDOM_KEY_MIN_DISTINCT_BYTES = 16


class SecretFailure(StrEnum):
    """Why a ciphertext could not be decrypted."""

    UNKNOWN_KEY = "unknown_key"  # made with a key the ring does not hold: MASTER_KEY is wrong
    NOT_AUTHENTIC = "not_authentic"  # a key of the ring, but altered or belonging to another record
    MALFORMED = "malformed"  # not a ciphertext of this module


class SecretError(Exception):
    """A ciphertext cannot be decrypted; ``failure`` says why, ``key_id`` names the key it claims."""

    def __init__(self, message: str, failure: SecretFailure, *, key_id: str = "") -> None:
        super().__init__(message)
        self.failure = failure
        self.key_id = key_id


class MasterKeyError(Exception):
    """MASTER_KEY is missing, empty, or not the key a service's data was encrypted with."""


@dataclass(frozen=True)
class SecretScope:
    """The record a ciphertext belongs to, bound into its associated data."""

    tenant_id: str
    record_id: str

    def describe(self) -> str:
        return f"record {self.record_id} of tenant {self.tenant_id!r}"


# The start-up check value is no record's: it has no tenant and its own id.
CHECK_SCOPE = SecretScope(tenant_id="", record_id="settings/master_key_check")


def _associated_data(key_id: str, scope: SecretScope) -> bytes:
    # JSON: unambiguous however the ids are spelled (no separator can be smuggled into one).
    return json.dumps(
        [TOKEN_VERSION, key_id, scope.tenant_id, scope.record_id], separators=(",", ":")
    ).encode()


@dataclass(frozen=True)
class _Key:
    key_id: str
    aead: AESGCM = field(repr=False)


def is_random_key(master_key: str) -> bool:
    """Whether ``master_key`` is 32 bytes in base64 or base64url (padded or not) that do not repeat
    like a typed pattern. What a person typed can pass this; it is a check of form, not of entropy."""
    text = master_key.strip()
    if len(text) not in _RANDOM_KEY_CHARS:
        return False
    standard = text.replace("-", "+").replace("_", "/")
    try:
        raw = base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(raw) == KEY_BYTES and len(set(raw)) >= RANDOM_KEY_MIN_DISTINCT_BYTES


def derive_key(master_key: str) -> bytes:
    """The 32-byte AES key HKDF-SHA256 derives from a master key (random keys; passphrases before v2)."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=HKDF_SALT, info=HKDF_INFO)
    return hkdf.derive(master_key.encode("utf-8"))


def stretch_passphrase(passphrase: str, salt: bytes) -> bytes:
    """The 32-byte AES key scrypt derives from a passphrase and the installation's salt."""
    return Scrypt(salt=salt, length=KEY_BYTES, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P).derive(
        passphrase.encode("utf-8")
    )


def _key(derived: bytes) -> _Key:
    return _Key(key_id=hashlib.sha256(derived).hexdigest()[:KEY_ID_HEX_CHARS], aead=AESGCM(derived))


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


class KeyRing:
    """The current key (encrypts) and previous keys (decrypt only), each known by its key id.

    A ring with a passphrase among its master keys needs the installation's salt first: pass ``salt``
    or call :meth:`unlock` (start-up does, in :func:`verify_master_key`).
    """

    def __init__(self, master_key: str, previous: Iterable[str] = (), *, salt: bytes | None = None) -> None:
        if not master_key or not master_key.strip():
            raise MasterKeyError(
                "MASTER_KEY is empty. Set MASTER_KEY to the secret that encrypts tenants' keys: 32 "
                "random bytes in base64 (openssl rand -base64 32) or a passphrase of at least 16 characters."
            )
        self._master = master_key
        self._previous = [old.strip() for old in previous if old and old.strip()]
        self._current: _Key | None = None
        self._keys: dict[str, _Key] = {}
        if salt is not None or not self.needs_salt:
            self.unlock(salt)

    @classmethod
    def from_strings(cls, master_key: str, previous_csv: str = "", *, salt: bytes | None = None) -> KeyRing:
        """From the ``MASTER_KEY`` value and the comma-separated ``MASTER_KEY_PREVIOUS`` value."""
        return cls(master_key, [part.strip() for part in previous_csv.split(",") if part.strip()], salt=salt)

    @property
    def needs_salt(self) -> bool:
        """Whether a master key is a passphrase (scrypt needs the installation's salt)."""
        return not all(is_random_key(secret) for secret in (self._master, *self._previous))

    def unlock(self, salt: bytes | None) -> None:
        """Derive every key; ``salt`` is the installation's (required when :attr:`needs_salt`)."""
        keys: list[_Key] = []
        for secret in (self._master, *self._previous):
            if is_random_key(secret):
                keys.append(_key(derive_key(secret)))
                continue
            if salt is None or len(salt) < SALT_BYTES:
                raise MasterKeyError(
                    f"a passphrase MASTER_KEY needs the installation's salt of {SALT_BYTES} bytes"
                )
            # The scrypt key encrypts; the HKDF one only reads records written before scrypt.
            keys += [_key(stretch_passphrase(secret, salt)), _key(derive_key(secret))]
        self._current = keys[0]
        self._keys = {}
        for key in keys:
            self._keys.setdefault(key.key_id, key)

    def _ready(self) -> _Key:
        if self._current is None:
            raise RuntimeError("KeyRing.unlock(salt) has not been called (MASTER_KEY is a passphrase)")
        return self._current

    @property
    def key_id(self) -> str:
        """Id of the current key (the one :meth:`encrypt` uses)."""
        return self._ready().key_id

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Ids of every key this ring can decrypt with, current first."""
        self._ready()
        return tuple(self._keys)

    def encrypt(self, plaintext: str, scope: SecretScope) -> str:
        """Encrypt for the record ``scope`` with the current key and a fresh random nonce."""
        current = self._ready()
        nonce = os.urandom(NONCE_BYTES)
        sealed = current.aead.encrypt(
            nonce, plaintext.encode("utf-8"), _associated_data(current.key_id, scope)
        )
        return ":".join(
            (
                TOKEN_VERSION,
                current.key_id,
                base64.b64encode(nonce).decode("ascii"),
                base64.b64encode(sealed).decode("ascii"),
            )
        )

    def decrypt(self, token: str, scope: SecretScope) -> str:
        """Decrypt a token of the record ``scope``, made with the current or a previous key.

        A ``v2`` token of another record (a ciphertext copied from another row) fails authentication:
        :class:`SecretError` with :attr:`SecretFailure.NOT_AUTHENTIC`, never the plaintext.
        """
        self._ready()
        version, key_id, nonce, sealed = _parse(token)
        key = self._keys.get(key_id)
        if key is None:
            raise SecretError(
                f"ciphertext was made with key id {key_id}, which is neither MASTER_KEY (key id "
                f"{self.key_id}) nor in MASTER_KEY_PREVIOUS",
                SecretFailure.UNKNOWN_KEY,
                key_id=key_id,
            )
        bound = version == TOKEN_VERSION
        associated = _associated_data(key_id, scope) if bound else key_id.encode("ascii")
        try:
            plaintext = key.aead.decrypt(nonce, sealed, associated)
        except InvalidTag:
            whose = (
                f"was made for another record than {scope.describe()} (copied from another row) or "
                if bound
                else ""
            )
            raise SecretError(
                f"ciphertext under key id {key_id} failed authentication: it {whose}was altered",
                SecretFailure.NOT_AUTHENTIC,
                key_id=key_id,
            ) from None
        return plaintext.decode("utf-8")

    def needs_rotation(self, token: str) -> bool:
        """Whether the token is in an older format or was made with a key other than the current one."""
        version, key_id, _, _ = _parse(token)
        return version != TOKEN_VERSION or key_id != self.key_id

    def reencrypt(self, token: str, scope: SecretScope) -> str:
        """The token as ``v2`` under the current key (unchanged when it already is)."""
        return self.encrypt(self.decrypt(token, scope), scope) if self.needs_rotation(token) else token


def _parse(token: str) -> tuple[str, str, bytes, bytes]:
    parts = token.split(":")
    if len(parts) != 4 or parts[0] not in (TOKEN_VERSION, LEGACY_TOKEN_VERSION):
        raise SecretError(
            f"not a {TOKEN_VERSION} or {LEGACY_TOKEN_VERSION} ciphertext "
            "(expected <version>:<key id>:<nonce>:<data>)",
            SecretFailure.MALFORMED,
        )
    version, key_id, nonce_b64, sealed_b64 = parts
    try:
        nonce, sealed = _b64decode(nonce_b64), _b64decode(sealed_b64)
    except (binascii.Error, ValueError):
        raise SecretError(
            f"ciphertext under key id {key_id} is not valid base64", SecretFailure.MALFORMED, key_id=key_id
        ) from None
    if len(nonce) != NONCE_BYTES:
        raise SecretError(
            f"ciphertext under key id {key_id} has a {len(nonce)}-byte nonce",
            SecretFailure.MALFORMED,
            key_id=key_id,
        )
    return version, key_id, nonce, sealed


def key_id_of(token: str) -> str:
    """The key id a token names (without decrypting it)."""
    return _parse(token)[1]


def version_of(token: str) -> str:
    """The format version of a token (``v2``, or ``v1`` for one written before records were bound)."""
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


# --- settings ------------------------------------------------------------------------------------

MASTER_KEY_FORMS = (
    "32 random bytes in base64 (HKDF-SHA256), or a passphrase of at least 16 characters (scrypt with "
    "the installation's salt)"
)


def master_key_field(prefix: str, purpose: str, *, required: bool) -> Any:
    """The ``master_key`` setting of a service that keeps tenants' secrets: read from ``MASTER_KEY`` (the
    one key every such service shares) or ``<prefix>MASTER_KEY``; ``purpose`` says what it encrypts."""
    return Field(
        default=... if required else None,
        validation_alias=AliasChoices("MASTER_KEY", f"{prefix}MASTER_KEY"),
        min_length=16,
        description=f"encrypts {purpose}: {MASTER_KEY_FORMS}"
        + ("" if required else "; unset: none can be stored"),
    )


def previous_master_keys_field(prefix: str) -> Any:
    """The ``master_key_previous`` setting: earlier master keys still read while rotating."""
    return Field(
        default="",
        validation_alias=AliasChoices("MASTER_KEY_PREVIOUS", f"{prefix}MASTER_KEY_PREVIOUS"),
        description="comma-separated earlier master keys, for rotation",
    )


def key_ring_of(master_key: SecretStr | None, previous: str) -> KeyRing | None:
    """The key ring of a service's settings (None without a master key)."""
    if master_key is None:
        return None
    return KeyRing.from_strings(master_key.get_secret_value(), previous)


# --- start-up check and rotation -----------------------------------------------------------------


class SettingsStore(Protocol):
    """The two settings a service keeps for its key ring: the salt and the check value."""

    async def get_setting(self, key: str) -> str | None: ...

    async def put_setting(self, key: str, value: str) -> None: ...

    async def add_setting(self, key: str, value: str) -> str:
        """Store ``value`` unless the key has one; return the stored value either way."""
        ...


@dataclass(frozen=True)
class RotationReport:
    rotated: int
    # (record id, key id) of secrets no key of the ring can decrypt: MASTER_KEY is wrong; start-up stops.
    undecryptable: list[tuple[str, str]]
    # (record id, why) of secrets that are altered, belong to another record or are not ciphertexts: no
    # MASTER_KEY reads them. They are left as they are (their use fails, naming why).
    rejected: list[tuple[str, str]] = field(default_factory=list)


NOTHING_ROTATED: RotationReport = RotationReport(rotated=0, undecryptable=[])


def mismatch_message(key_id: str, owner: str) -> str:
    return (
        f"MASTER_KEY does not match the key {owner}'s data was encrypted with (key id {key_id}). "
        "Set the original MASTER_KEY, or keep it in MASTER_KEY_PREVIOUS while rotating."
    )


async def installation_salt(store: SettingsStore) -> bytes:
    """The installation's scrypt salt, made (random) and stored on first use.

    Replicas starting together on a new database agree on one: the first stored wins.
    """
    value = await store.get_setting(SALT_SETTING)
    if value is None:
        fresh = base64.b64encode(os.urandom(SALT_BYTES)).decode("ascii")
        value = await store.add_setting(SALT_SETTING, fresh)
    try:
        salt = _b64decode(value)
    except (binascii.Error, ValueError):
        salt = b""
    if len(salt) < SALT_BYTES:
        raise MasterKeyError(
            f"the stored setting {SALT_SETTING} is not {SALT_BYTES} or more bytes in base64; it was altered. "
            "Restore it from a backup: without it a passphrase MASTER_KEY cannot read the stored secrets."
        )
    return salt


async def verify_master_key(
    store: SettingsStore,
    keyring: KeyRing,
    rotate: Callable[[], Awaitable[RotationReport]],
    *,
    owner: str,
) -> RotationReport:
    """Fail fast when MASTER_KEY is wrong; finish a rotation when the data is under a previous key.

    - A passphrase ring is unlocked with the installation's salt (made on first start).
    - First start (no check value): ``rotate`` runs — every stored secret must decrypt (normally there
      are none) — then an encrypted check value is written.
    - Later starts: the check value must decrypt, else :class:`MasterKeyError`. When it was written
      with a key from MASTER_KEY_PREVIOUS or in the ``v1`` format, ``rotate`` rewrites every stored
      secret as ``v2`` under MASTER_KEY, and the check value is written last, so the check moves only
      once everything else has.

    ``rotate`` re-encrypts the service's own records (:meth:`KeyRing.reencrypt` where
    :meth:`KeyRing.needs_rotation`); ``owner`` names the service in messages ("this modelhub").
    """
    if keyring.needs_salt:
        keyring.unlock(await installation_salt(store))
    stored = await store.get_setting(MASTER_KEY_CHECK_SETTING)
    if stored is not None:
        try:
            value = keyring.decrypt(stored, CHECK_SCOPE)
        except SecretError as exc:
            raise MasterKeyError(mismatch_message(exc.key_id or "unknown", owner)) from None
        if value != MASTER_KEY_CHECK_PLAINTEXT:
            raise MasterKeyError(mismatch_message(key_id_of(stored), owner))
        if not keyring.needs_rotation(stored):
            return NOTHING_ROTATED
    report = await rotate()
    if report.undecryptable:
        listed = ", ".join(f"{record_id} (key id {key_id})" for record_id, key_id in report.undecryptable)
        first_key_id = report.undecryptable[0][1]
        raise MasterKeyError(
            f"{mismatch_message(first_key_id, owner)} Secrets that cannot be decrypted: {listed}."
        )
    await store.put_setting(
        MASTER_KEY_CHECK_SETTING, keyring.encrypt(MASTER_KEY_CHECK_PLAINTEXT, CHECK_SCOPE)
    )
    return report
