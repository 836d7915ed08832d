"""The gRPC face of the ingestion service.

Every method of the contract is bound; the ones not built yet answer UNIMPLEMENTED naming the
capability they belong to.
"""

from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.rpc import ServiceBinding, bind_service

PENDING_CAPABILITY = "knowledge bases, uploads and the ingestion workflow"


def build_binding() -> ServiceBinding:
    return bind_service(CONTRACTS["ingestion"].descriptor, None, pending=PENDING_CAPABILITY)
