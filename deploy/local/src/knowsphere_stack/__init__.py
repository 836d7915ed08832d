"""Local-stack launcher of KnowSphere.

Starts NATS (JetStream), the Temporal dev server and the KnowSphere services as supervised
subprocesses on the loopback interface, with no accounts or system services. ``ks-stack up`` and the
end-to-end tests use the same building blocks: :class:`~knowsphere_stack.stack.Stack`,
:class:`~knowsphere_stack.config.StackConfig` and the process starters in
:mod:`knowsphere_stack.processes`.
"""

from knowsphere_stack.components import ComponentSpec
from knowsphere_stack.config import SERVICE_NAMES, StackConfig, free_port, free_ports
from knowsphere_stack.processes import (
    ComponentStartError,
    ManagedProcess,
    nats_binary,
    start_nats,
    start_temporal,
    temporal_binary,
)
from knowsphere_stack.stack import Stack, StackStartError
from knowsphere_stack.supervisor import RestartPolicy, Supervisor

__all__ = [
    "SERVICE_NAMES",
    "ComponentSpec",
    "ComponentStartError",
    "ManagedProcess",
    "RestartPolicy",
    "Stack",
    "StackConfig",
    "StackStartError",
    "Supervisor",
    "free_port",
    "free_ports",
    "nats_binary",
    "start_nats",
    "start_temporal",
    "temporal_binary",
]
