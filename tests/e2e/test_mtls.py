"""Mutual TLS over the real stack (``KS_STACK_TLS``): modelhub, retrieval, ingestion and its worker,
each serving and calling with its own certificate of the stack's private CA.

An upload becomes searchable through the project's clients holding the ``local-client`` certificate:
the test process calls ingestion and retrieval, ingestion calls retrieval, the worker calls modelhub
and retrieval, retrieval calls modelhub, all over mTLS. A plaintext caller, and a caller whose
certificate another CA signed, get nothing from the same ports; the health probes answer SERVING over
mTLS; a TLS caller without a signed identity token is still refused.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from knowsphere.ingestion.v1 import ingestion_pb2 as ipb
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_clients import IngestionClient, RetrievalClient
from knowsphere_clients.errors import Unavailable
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import open_channel
from knowsphere_runtime.rpc.certificates import generate_certificates
from knowsphere_runtime.rpc.tls import MutualTls
from knowsphere_stack import Stack, StackConfig
from knowsphere_stack.components import LOCAL_CLIENT_ISSUER
from knowsphere_stack.health import grpc_health_status
from knowsphere_stack.tls import tls_files

pytestmark = pytest.mark.e2e

SERVICES = ["modelhub", "retrieval", "ingestion"]
POLICY = (
    b"# Travel policy\n\n"
    b"Train journeys longer than four hours may be booked in first class.\n\n"
    b"## Hotels\n\n"
    b"Hotel nights are reimbursed up to 140 euros in capital cities.\n"
)


@pytest.fixture(scope="module")
def tls_stack(tmp_path_factory: pytest.TempPathFactory, identity_keys_dir: Path) -> Iterator[Stack]:
    config = StackConfig.with_free_ports(
        data_dir=tmp_path_factory.mktemp("mtls-stack"),
        identity_keys_dir=identity_keys_dir,  # the services trust the test process's identity tokens
        services=SERVICES,
        tls=True,
        temporal_headless=True,
    )
    with Stack(config) as running:
        yield running


def with_clients(
    stack: Stack, tls: MutualTls | None, work: Callable[[IngestionClient, RetrievalClient], Awaitable[Any]]
) -> Any:
    async def main() -> Any:
        async with (
            open_channel(
                stack.grpc_addr("ingestion"), services=[CONTRACTS["ingestion"].descriptor], tls=tls
            ) as i,
            open_channel(
                stack.grpc_addr("retrieval"), services=[CONTRACTS["retrieval"].descriptor], tls=tls
            ) as r,
        ):
            with bound_identity(Identity(f"t{uuid.uuid4().hex[:8]}", "alice")):
                return await work(IngestionClient(i), RetrievalClient(r))

    return asyncio.run(main())


def test_an_upload_becomes_searchable_with_every_hop_over_mutual_tls(tls_stack: Stack) -> None:
    async def work(ingestion: IngestionClient, retrieval: RetrievalClient) -> None:
        kb = await ingestion.create_knowledge_base(ipb.CreateKnowledgeBaseRequest(name="travel"))

        async def upload() -> AsyncIterator[ipb.UploadDocumentRequest]:
            header = ipb.UploadHeader(
                knowledge_base_id=kb.id, file_name="travel.md", declared_size_bytes=len(POLICY)
            )
            yield ipb.UploadDocumentRequest(header=header)
            yield ipb.UploadDocumentRequest(chunk=POLICY)

        uploaded = await ingestion.upload_document(upload())
        async with asyncio.timeout(180):
            async for _ in ingestion.watch_documents([uploaded.document.id]):
                pass
        document = await ingestion.get_document(uploaded.document.id)
        assert document.status == ipb.DOCUMENT_STATUS_READY, document.failure
        found = await retrieval.search("how much is a hotel night in a capital", [kb.id], top_k=3)
        assert "140 euros" in found.results[0].text

    with_clients(tls_stack, tls_stack.local_client_tls(), work)


def test_a_plaintext_caller_gets_nothing_from_the_same_ports(tls_stack: Stack) -> None:
    for name in SERVICES:
        assert grpc_health_status(tls_stack.grpc_addr(name), timeout=5) == "UNAVAILABLE", name

    async def work(ingestion: IngestionClient, retrieval: RetrievalClient) -> None:
        with pytest.raises(Unavailable):
            await retrieval.get_index_stats()
        with pytest.raises(Unavailable):
            await ingestion.list_knowledge_bases(ipb.ListKnowledgeBasesRequest())

    with_clients(tls_stack, None, work)


def test_a_certificate_from_another_ca_gets_nothing(tls_stack: Stack, tmp_path: Path) -> None:
    generate_certificates(tmp_path, [LOCAL_CLIENT_ISSUER])  # same name, another CA
    ours = tls_files(tls_stack.config.tls_dir, LOCAL_CLIENT_ISSUER)
    intruder = tls_files(tmp_path, LOCAL_CLIENT_ISSUER).model_copy(update={"ca_file": ours.ca_file})
    for name in SERVICES:
        assert grpc_health_status(tls_stack.grpc_addr(name), timeout=5, tls=intruder) == "UNAVAILABLE", name


def test_health_probes_report_serving_over_mutual_tls(tls_stack: Stack) -> None:
    probe = tls_files(tls_stack.config.tls_dir, LOCAL_CLIENT_ISSUER)
    for name in SERVICES:
        assert grpc_health_status(tls_stack.grpc_addr(name), timeout=5, tls=probe) == "SERVING", name
    state = tls_stack.state()
    assert state is not None
    assert {c.name: c.status for c in state.components if c.name in SERVICES} == dict.fromkeys(
        SERVICES, "healthy"
    )


def test_a_tls_caller_without_a_signed_identity_is_still_refused(tls_stack: Stack) -> None:
    async def call() -> grpc.StatusCode:
        async with open_channel(
            tls_stack.grpc_addr("retrieval"), tls=tls_stack.local_client_tls()
        ) as channel:
            stub = CONTRACTS["retrieval"].stub(channel)
            try:
                await stub.GetIndexStats(rpb.GetIndexStatsRequest(), timeout=10)
            except grpc.aio.AioRpcError as error:
                return error.code()
        return grpc.StatusCode.OK

    assert asyncio.run(call()) == grpc.StatusCode.UNAUTHENTICATED
