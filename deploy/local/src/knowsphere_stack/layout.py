"""Where each process of the stack runs: the instances of replicated services and the NATS servers.

A replicated component (``KS_STACK_REPLICAS_<NAME>`` > 1) runs as instances ``<name>``, ``<name>-2`` …
``<name>-N``; a NATS cluster (``KS_STACK_NATS_CLUSTER`` > 1) as servers ``nats``, ``nats-2`` … The first
instance keeps every name, port and folder it had without replicas, so a stack of one of each looks as
before. Instance ``k`` listens on the first one's ports plus ``(k - 1) * KS_STACK_REPLICA_PORT_STEP``
(10 by default: conversation 7411, 7421, 7431 …; the services' default ports are consecutive, so a step
of 1 would collide). :func:`port_uses` lists every port the stack will bind with the settings that move
it, which is how a collision or a busy port is reported before anything starts.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass
from pathlib import Path

from knowsphere_stack.config import INGESTION_WORKER, LOOPBACK, StackConfig

NATS = "nats"
NATS_CLUSTER_NAME = "knowsphere"


def instance_name(component: str, index: int) -> str:
    """``conversation`` for the first instance, ``conversation-2`` for the second …"""
    return component if index == 1 else f"{component}-{index}"


def derived_port(config: StackConfig, base: int, index: int) -> int:
    """The port of instance ``index`` of a component whose first instance listens on ``base``."""
    return base + (index - 1) * config.replica_port_step


@dataclass(frozen=True)
class ServiceInstance:
    """One process of a service (or of the ingestion worker)."""

    service: str
    """What it runs: a service's name, or ``ingestion-worker``."""
    index: int
    """1 for the first instance."""
    name: str
    """Its component name: pid file, log file, ``ks-stack status`` row."""
    grpc_port: int | None
    """None for the worker, which serves no port."""
    data_dir: Path
    """``KS_<NAME>_DATA_DIR``: its own, except the worker's, which is ingestion's (it shares its
    database and blobs)."""


def service_instances(config: StackConfig, service: str) -> list[ServiceInstance]:
    """Every instance of ``service`` (a service name or ``ingestion-worker``), first one first."""
    instances = []
    for index in range(1, config.replicas(service) + 1):
        name = instance_name(service, index)
        if service == INGESTION_WORKER:
            port, data_dir = None, config.service_data_dir("ingestion")
        else:
            port = derived_port(config, config.grpc_port(service), index)
            data_dir = config.service_data_dir(name)
        instances.append(ServiceInstance(service, index, name, port, data_dir))
    return instances


def grpc_addresses(config: StackConfig, service: str) -> str:
    """The address a caller of ``service`` is given: ``host:port``, or the replicas' comma-separated
    (``knowsphere_runtime.rpc.channel.balanced_target`` spreads calls over them)."""
    return ",".join(f"{LOOPBACK}:{i.grpc_port}" for i in service_instances(config, service))


@dataclass(frozen=True)
class NatsNode:
    """One nats-server: the only one, or a server of the cluster."""

    index: int
    name: str
    port: int
    monitor_port: int
    cluster_port: int | None
    """Its route port; None for a single server."""
    store_dir: Path
    """Its folder: the configuration file, and the JetStream store (``cluster/`` below it in a cluster,
    so a store written by a single server is never read as a clustered one)."""

    @property
    def jetstream_dir(self) -> Path:
        return self.store_dir / "cluster" if self.cluster_port is not None else self.store_dir


def nats_nodes(config: StackConfig) -> list[NatsNode]:
    """The NATS servers of ``config``: one, or ``nats_cluster`` of them."""
    clustered = config.nats_cluster > 1
    nodes = []
    for index in range(1, config.nats_cluster + 1):
        name = instance_name(NATS, index)
        nodes.append(
            NatsNode(
                index=index,
                name=name,
                port=derived_port(config, config.nats_port, index),
                monitor_port=derived_port(config, config.nats_monitor_port, index),
                cluster_port=derived_port(config, config.nats_cluster_port, index) if clustered else None,
                store_dir=config.service_data_dir(name),
            )
        )
    return nodes


@dataclass(frozen=True)
class PortUse:
    """A port the stack will bind, whose it is and which settings put it there."""

    port: int
    component: str
    setting: str
    derived: bool = False
    """A further instance's port: the first one's plus steps, no setting of its own."""


def _use(config: StackConfig, component: str, field: str, index: int = 1) -> PortUse:
    variable = StackConfig.env_var(field)
    port = derived_port(config, int(getattr(config, field)), index)
    if index == 1:
        return PortUse(port, component, variable)
    step = StackConfig.env_var("replica_port_step")
    return PortUse(port, component, f"{variable} + {index - 1} * {step}", derived=True)


def port_uses(config: StackConfig) -> list[PortUse]:
    """Every port the components of ``config`` will bind, in start order (the worker binds none)."""
    uses: list[PortUse] = []
    if config.nats_enabled:
        for node in nats_nodes(config):
            uses.append(_use(config, node.name, "nats_port", node.index))
            uses.append(_use(config, node.name, "nats_monitor_port", node.index))
            if node.cluster_port is not None:
                uses.append(_use(config, node.name, "nats_cluster_port", node.index))
    if config.temporal_enabled:
        fields = ["temporal_port", "temporal_http_port", "temporal_metrics_port"]
        if not config.temporal_headless:
            fields.append("temporal_ui_port")
        uses += [_use(config, "temporal", field) for field in fields]
    for service in config.services:
        for instance in service_instances(config, service):
            uses.append(_use(config, instance.name, f"{service}_grpc_port", instance.index))
        if service == "gateway":
            uses.append(_use(config, "gateway", "gateway_http_port"))
    return uses


def layout_problems(config: StackConfig) -> list[str]:
    """Ports that two components would both bind, or that are outside 1–65535; each named with the
    settings that put it there."""
    problems: list[str] = []
    seen: dict[int, PortUse] = {}
    for use in port_uses(config):
        if not 1 <= use.port <= 65535:
            problems.append(f"port {use.port} of {use.component} ({use.setting}) is not a TCP port")
        elif use.port in seen:
            first = seen[use.port]
            problems.append(
                f"port {use.port} is configured twice: {first.component} ({first.setting}) and "
                f"{use.component} ({use.setting})"
            )
        else:
            seen[use.port] = use
    return problems


def derived_ports_free(config: StackConfig) -> bool:
    """True if every port of a further replica or NATS server is free now (the first instances' ports
    are the settings themselves)."""
    return all(port_is_free(use.port) for use in port_uses(config) if use.derived)


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """True if a server could bind ``port`` on ``host`` now."""
    # SO_REUSEADDR as the servers use it: a port only in TIME_WAIT is free for them too.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True
