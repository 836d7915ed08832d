"""Object-store keys: one tenant's prefix is never another's, and every key is a valid blob key."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowsphere_ingestion import artifacts
from knowsphere_ingestion.storage.blobs import build_blob_store, validate_key, validate_prefix

LOOK_ALIKES = [
    "acme:eu",
    "acme@eu",
    "acme_eu",
    "acme.eu",
    "acme-eu",
    "acme.3aeu",
    "acme.2eeu",
    "a..b",
    "租户",
]


def test_look_alike_tenant_ids_get_distinct_prefixes_that_are_valid_keys() -> None:
    prefixes = [artifacts.kb_prefix(tenant, "kb-1") for tenant in LOOK_ALIKES]
    assert len(set(prefixes)) == len(LOOK_ALIKES)
    for tenant, prefix in zip(LOOK_ALIKES, prefixes, strict=True):
        validate_prefix(prefix)
        validate_key(artifacts.file_key(tenant, "kb-1", "doc-1"))
        # No tenant's prefix is the start of another's (deleting one never reaches into another).
        assert not any(p != prefix and p.startswith(prefix) for p in prefixes)
    # Plain ids keep their readable form.
    assert artifacts.kb_prefix("tenant-a_1", "kb-1") == "t/tenant-a_1/kb/kb-1/"


@pytest.mark.parametrize("tenant", ["acme:eu", "acme.eu"])
async def test_deleting_a_knowledge_bases_prefixes_reaches_blobs_written_with_the_legacy_encoding(
    tmp_path: Path, tenant: str
) -> None:
    blobs = build_blob_store(str(tmp_path / "blobs"))
    await blobs.start()

    async def data() -> object:
        yield b"x"

    legacy = "t/acme_eu/kb/kb-1/doc/doc-1/file" if ":" in tenant else "t/acme.eu/kb/kb-1/doc/doc-1/file"
    current = artifacts.file_key(tenant, "kb-1", "doc-2")
    await blobs.put(legacy, data(), max_bytes=10)
    await blobs.put(current, data(), max_bytes=10)
    other = artifacts.file_key("acme_eu", "kb-9", "doc-3")  # another tenant's look-alike, another kb
    await blobs.put(other, data(), max_bytes=10)
    try:
        for prefix in artifacts.kb_prefixes(tenant, "kb-1"):
            await blobs.delete_prefix(prefix)
        stored = sorted(
            str(p.relative_to(tmp_path / "blobs")) for p in (tmp_path / "blobs").rglob("*") if p.is_file()
        )
        assert [s for s in stored if not Path(s).name.startswith(".")] == [other]
    finally:
        await blobs.close()
