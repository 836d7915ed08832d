"""Storage of the ingestion service's uploaded files: the blob store interface (``blobs``), its backends
(``filesystem``, ``s3``) and the choice among them from settings (``factory``).

``s3`` is not imported here: its client library is loaded only by deployments that use S3.
"""

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

__all__ = [
    "BlobNotFound",
    "BlobStore",
    "BlobStoreError",
    "BlobStream",
    "BlobTooLarge",
    "FilesystemBlobStore",
    "StoredBlob",
    "build_blob_store",
    "validate_key",
    "validate_prefix",
]
