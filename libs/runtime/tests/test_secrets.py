"""The shared key ring as another service than modelhub uses it: its own settings store, its own
records bound by ``<kind>/<id>/<field>``, and rotation of its records when MASTER_KEY changes.

(The ring's cryptography — formats, tampering, derivations — is tested in modelhub's test_secrets.)"""

from __future__ import annotations

import asyncio
import base64
import os

import pytest

from knowsphere_runtime.secrets import (
    KeyRing,
    MasterKeyError,
    RotationReport,
    SecretError,
    SecretScope,
    verify_master_key,
)

OLD = base64.b64encode(os.urandom(32)).decode()
NEW = base64.b64encode(os.urandom(32)).decode()
PASSPHRASE = "a passphrase of some length"


class Settings:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    async def get_setting(self, key: str) -> str | None:
        return self.values.get(key)

    async def put_setting(self, key: str, value: str) -> None:
        self.values[key] = value

    async def add_setting(self, key: str, value: str) -> str:
        return self.values.setdefault(key, value)


class Records:
    """A service's encrypted fields: ciphertext by record id, all of one tenant."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}

    def scope(self, record_id: str) -> SecretScope:
        return SecretScope("tenant-a", record_id)

    async def rotate(self, ring: KeyRing) -> RotationReport:
        rotated = 0
        for record_id, token in list(self.rows.items()):
            if ring.needs_rotation(token):
                self.rows[record_id] = ring.reencrypt(token, self.scope(record_id))
                rotated += 1
        return RotationReport(rotated=rotated, undecryptable=[])


def test_a_secret_is_bound_to_its_record_and_field() -> None:
    ring = KeyRing.from_strings(NEW)
    token = ring.encrypt("app-secret", SecretScope("tenant-a", "application/app_1/secret"))
    assert "app-secret" not in token
    assert ring.decrypt(token, SecretScope("tenant-a", "application/app_1/secret")) == "app-secret"
    for elsewhere in (
        SecretScope("tenant-a", "application/app_1/token"),  # another field of the same record
        SecretScope("tenant-a", "application/app_2/secret"),  # another record
        SecretScope("tenant-b", "application/app_1/secret"),  # another tenant
    ):
        with pytest.raises(SecretError):
            ring.decrypt(token, elsewhere)


def test_a_service_rotates_its_own_records_and_then_refuses_the_old_key() -> None:
    async def run() -> None:
        settings, records = Settings(), Records()
        old = KeyRing.from_strings(OLD)
        await verify_master_key(settings, old, lambda: records.rotate(old), owner="this service")
        records.rows["orchestrator/o1/api_key"] = old.encrypt("k1", records.scope("orchestrator/o1/api_key"))

        rotating = KeyRing.from_strings(NEW, OLD)
        report = await verify_master_key(
            settings, rotating, lambda: records.rotate(rotating), owner="this service"
        )
        assert report.rotated == 1
        new_only = KeyRing.from_strings(NEW)
        assert (
            new_only.decrypt(
                records.rows["orchestrator/o1/api_key"], records.scope("orchestrator/o1/api_key")
            )
            == "k1"
        )
        await verify_master_key(settings, new_only, lambda: records.rotate(new_only), owner="this service")

        with pytest.raises(MasterKeyError, match="this service's data"):
            await verify_master_key(settings, old, lambda: records.rotate(old), owner="this service")

    asyncio.run(run())


def test_a_passphrase_ring_takes_the_services_own_salt() -> None:
    async def run() -> None:
        settings = Settings()
        ring = KeyRing.from_strings(PASSPHRASE)
        assert ring.needs_salt
        await verify_master_key(settings, ring, _nothing, owner="this service")
        token = ring.encrypt("k", SecretScope("t", "r"))
        again = KeyRing.from_strings(PASSPHRASE)
        await verify_master_key(settings, again, _nothing, owner="this service")
        assert again.decrypt(token, SecretScope("t", "r")) == "k"
        # Another service (another settings store) has another salt, so another key.
        other = KeyRing.from_strings(PASSPHRASE)
        await verify_master_key(Settings(), other, _nothing, owner="another service")
        assert other.key_id != again.key_id

    asyncio.run(run())


async def _nothing() -> RotationReport:
    return RotationReport(rotated=0, undecryptable=[])
