"""The gRPC face of the retrieval service.

Every method of the contract is bound; the ones not built yet answer UNIMPLEMENTED naming the
capability they belong to.
"""

from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.rpc import ServiceBinding, bind_service

PENDING_CAPABILITY = (
    "hybrid retrieval (Qdrant vectors + BM25 fused with RRF), the deep-reading tools and graph queries"
)


def build_binding() -> ServiceBinding:
    return bind_service(CONTRACTS["retrieval"].descriptor, None, pending=PENDING_CAPABILITY)
