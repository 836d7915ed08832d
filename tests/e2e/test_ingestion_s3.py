"""Ingestion on the production object-store path: files and stage outputs in an S3 bucket.

A real S3-protocol server (moto's, over HTTP on a free port) stands in for MinIO; the stack is the
usual launcher with only the services ingestion needs, configured through the same ``KS_INGESTION_S3_*``
variables the Kubernetes backends component sets.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_stack import Stack, StackConfig

from .test_ingestion import LOCAL, POLICY, Api, run

pytestmark = pytest.mark.e2e
BUCKET = "knowsphere-documents"
ACCESS_KEY, SECRET_KEY = "test-access", "test-secret"


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    client = boto3.client(
        "s3",
        endpoint_url=f"http://{host}:{port}",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
    )
    client.endpoint = f"http://{host}:{port}"
    yield client
    server.stop()


@pytest.fixture(scope="module")
def s3_stack(tmp_path_factory: pytest.TempPathFactory, s3: Any, identity_keys_dir: Path) -> Iterator[Stack]:
    config = StackConfig.with_free_ports(
        data_dir=tmp_path_factory.mktemp("s3-stack"),
        identity_keys_dir=identity_keys_dir,  # its services trust the test process's calls
        temporal_headless=True,
        services=["modelhub", "retrieval", "ingestion"],
        extra_env={
            "KS_INGESTION_S3_ENDPOINT": s3.endpoint,
            "KS_INGESTION_S3_BUCKET": BUCKET,
            "KS_INGESTION_S3_ACCESS_KEY": ACCESS_KEY,
            "KS_INGESTION_S3_SECRET_KEY": SECRET_KEY,
            "OTEL_TRACES_EXPORTER": "none",
        },
    )
    with Stack(config) as running:
        yield running


def _keys(s3: Any) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []))


def test_files_and_stage_outputs_live_in_the_bucket_and_go_with_the_document(
    s3_stack: Stack, s3: Any
) -> None:
    async def work(api: Api) -> str:
        kb = await api.kb()
        uploaded = await api.upload(kb.id, "policy.md", POLICY)
        document, _ = await api.wait(uploaded.document.id)
        assert document.status == pb.DOCUMENT_STATUS_READY, document.failure
        found = await api.retrieval.Search(
            rpb.SearchRequest(query="annual leave days", knowledge_base_ids=[kb.id], top_k=1)
        )
        assert "25 days" in found.results[0].text
        keys = _keys(s3)
        prefix = f"t/local/kb/{kb.id}/doc/{document.id}/"
        assert prefix + "file" in keys
        assert s3.get_object(Bucket=BUCKET, Key=prefix + "file")["Body"].read() == POLICY
        assert any(k.startswith(prefix + "run-") and k.endswith("/chunks.json") for k in keys)
        # Nothing of the document is written to the service's own disk.
        local = Path(s3_stack.config.service_data_dir("ingestion"))
        assert not (local / "blobs").exists()

        await api.ingestion.DeleteDocument(pb.DeleteDocumentRequest(document_id=document.id))
        assert not [k for k in _keys(s3) if k.startswith(prefix)]
        return document.id

    run(s3_stack, LOCAL, work)
