"""Storage of the ingestion service's uploaded files: the blob store interface and its backends."""

from knowsphere_ingestion.storage.blobs import (
    BlobNotFound,
    BlobStore,
    BlobStoreError,
    BlobStream,
    BlobTooLarge,
    FilesystemBlobStore,
    S3BlobStore,
    StoredBlob,
    build_blob_store,
    validate_key,
    validate_prefix,
)

__all__ = [
    "BlobNotFound",
    "BlobStore",
    "BlobStoreError",
    "BlobStream",
    "BlobTooLarge",
    "FilesystemBlobStore",
    "S3BlobStore",
    "StoredBlob",
    "build_blob_store",
    "validate_key",
    "validate_prefix",
]
