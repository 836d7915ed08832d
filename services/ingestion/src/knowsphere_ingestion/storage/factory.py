"""The object store a deployment's settings ask for: a URL, the S3 settings, or files under the data dir."""

from __future__ import annotations

from urllib.parse import urlsplit

from knowsphere_ingestion.settings import Settings
from knowsphere_ingestion.storage.blobs import BlobStore, build_blob_store


def blob_store_for(settings: Settings) -> BlobStore:
    """``blob_store_url`` when set; else S3 when ``s3_endpoint`` is set; else ``<data_dir>/blobs``."""
    if settings.blob_store_url or not settings.s3_endpoint:
        return build_blob_store(settings.blob_store_url or str(settings.data_dir / "blobs"))
    from knowsphere_ingestion.storage.s3 import S3BlobStore  # loads the S3 client library: only here

    endpoint = urlsplit(
        settings.s3_endpoint if "://" in settings.s3_endpoint else f"http://{settings.s3_endpoint}"
    )
    return S3BlobStore(
        endpoint.netloc,
        settings.s3_access_key,
        settings.s3_secret_key,
        settings.s3_bucket,
        secure=endpoint.scheme == "https",
        region=settings.s3_region or None,
    )
