"""Storage of the ingestion service's uploaded files: the blob store interface (``blobs``), its backends
(``filesystem``, ``s3``) and the choice among them from settings (``factory``)."""

from knowsphere_ingestion.storage.blobs import (
    BlobNotFound,
    BlobStore,
    BlobStoreError,
    BlobStream,
    BlobTooLarge,
    StoredBlob,
    build_blob_store,
    validate_key,
    validate_prefix,
)
from knowsphere_ingestion.storage.filesystem import FilesystemBlobStore
from knowsphere_ingestion.storage.s3 import S3BlobStore

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
