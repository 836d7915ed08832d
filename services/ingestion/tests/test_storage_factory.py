"""The object store chosen from the settings, and the S3 client library loaded only when S3 is chosen."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from knowsphere_ingestion.settings import Settings
from knowsphere_ingestion.storage.factory import blob_store_for
from knowsphere_ingestion.storage.filesystem import FilesystemBlobStore


def settings(tmp_path: Path, **values: Any) -> Settings:
    return Settings(
        temporal_address="t:1",
        nats_url="nats://n:1",
        retrieval_addr="r:1",
        modelhub_addr="m:1",
        data_dir=str(tmp_path),
        **values,
    )


def test_a_file_url_or_nothing_gives_a_filesystem_store(tmp_path: Path) -> None:
    chosen = blob_store_for(settings(tmp_path, blob_store_url=f"file://{tmp_path}/files"))
    assert isinstance(chosen, FilesystemBlobStore) and chosen.root == tmp_path / "files"
    default = blob_store_for(settings(tmp_path))
    assert isinstance(default, FilesystemBlobStore) and default.root == tmp_path / "blobs"


def test_the_s3_settings_give_an_s3_store(tmp_path: Path) -> None:
    from knowsphere_ingestion.storage.s3 import S3BlobStore

    chosen = blob_store_for(
        settings(
            tmp_path,
            s3_endpoint="https://s3.example.com",
            s3_bucket="docs",
            s3_access_key="k",
            s3_secret_key="s",
        )
    )
    assert isinstance(chosen, S3BlobStore) and chosen.bucket == "docs"


def test_the_s3_client_library_is_loaded_only_for_s3() -> None:
    probe = (
        "import sys\n"
        "import knowsphere_ingestion.core, knowsphere_ingestion.storage\n"
        "import knowsphere_ingestion.storage.factory\n"
        "print('minio' in sys.modules)\n"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"
