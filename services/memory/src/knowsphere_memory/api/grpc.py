"""The gRPC face of the memory service.

Every method of the contract is bound; the ones not built yet answer UNIMPLEMENTED naming the
capability they belong to.
"""

from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.rpc import ServiceBinding, bind_service

PENDING_CAPABILITY = "session summaries, working memory and long-term memory"


def build_binding() -> ServiceBinding:
    return bind_service(CONTRACTS["memory"].descriptor, None, pending=PENDING_CAPABILITY)
