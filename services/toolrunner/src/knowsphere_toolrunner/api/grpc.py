"""The gRPC face of the toolrunner service.

Every method of the contract is bound; the ones not built yet answer UNIMPLEMENTED naming the
capability they belong to.
"""

from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.rpc import ServiceBinding, bind_service

PENDING_CAPABILITY = "the tool catalog, stored tool results and skills"


def build_binding() -> ServiceBinding:
    return bind_service(CONTRACTS["toolrunner"].descriptor, None, pending=PENDING_CAPABILITY)
