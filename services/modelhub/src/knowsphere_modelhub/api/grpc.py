"""The gRPC face of the modelhub service.

Every method of the contract is bound; the ones not built yet answer UNIMPLEMENTED naming the
capability they belong to.
"""

from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.rpc import ServiceBinding, bind_service

PENDING_CAPABILITY = "the model registry and provider calls (chat, decide, embed, rerank, vision, speech)"


def build_binding() -> ServiceBinding:
    return bind_service(CONTRACTS["modelhub"].descriptor, None, pending=PENDING_CAPABILITY)
