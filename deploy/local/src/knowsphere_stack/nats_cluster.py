"""The NATS cluster of the local stack (``KS_STACK_NATS_CLUSTER=3``): routes between its servers.

Every server gets a ``cluster`` block: the cluster's name, its own route port on loopback, and a route
to each of the other servers. Routes authenticate with a user and password of their own, generated once
into ``<data>/secrets/nats/routes.secret`` (mode 0600) and written into each server's configuration
file: a process that is not one of the stack's servers cannot join the cluster, and the services'
nkeys are never valid on a route port (route credentials are separate from the client ``authorization``
block, which every server has the same). Routes carry every subject: clients connected to different
servers must reach each other, and JetStream replicates its streams over them, so the route
permissions (``import``/``export``) are left open.

Each server runs JetStream in a store of its own; every stream is declared with 3 replicas
(``KS_NATS_STREAM_REPLICAS``, set for the services by :mod:`knowsphere_stack.components`), so one
server of three may go down without losing a message or stopping the streams.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from knowsphere_stack.config import LOOPBACK
from knowsphere_stack.layout import NATS_CLUSTER_NAME, NatsNode

ROUTE_USER = "route"
ROUTE_SECRET_FILE = "routes.secret"
ROUTE_SECRET_BYTES = 24
ROUTE_AUTH_TIMEOUT_SECONDS = 2
CLUSTERED_STREAM_REPLICAS = 3
"""Servers keeping each stream on a cluster: a majority survives one server down (two on five)."""


def ensure_route_secret(secrets_dir: Path) -> str:
    """The routes' password in ``secrets_dir/routes.secret``, generated (mode 0600) on first use."""
    secrets_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(secrets_dir, 0o700)
    path = secrets_dir / ROUTE_SECRET_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass  # generated before (or concurrently by another launcher): keep it
    else:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(ROUTE_SECRET_BYTES) + "\n")
    secret = path.read_text().strip()
    if not secret:
        raise ValueError(f"{path} is empty; delete it to generate a new route password")
    return secret


def cluster_block(node: NatsNode, nodes: list[NatsNode], route_secret: str) -> str:
    """The ``cluster`` block of ``node``: its route port, the routes to the others, their credentials."""
    if node.cluster_port is None:
        raise ValueError(f"{node.name} is not a server of a cluster")
    routes = [
        f"nats-route://{ROUTE_USER}:{route_secret}@{LOOPBACK}:{other.cluster_port}"
        for other in nodes
        if other.index != node.index
    ]
    listed = "".join(f"    {json.dumps(route)},\n" for route in routes)
    return (
        "cluster {\n"
        f"  name: {json.dumps(NATS_CLUSTER_NAME)}\n"
        f"  listen: {json.dumps(f'{LOOPBACK}:{node.cluster_port}')}\n"
        "  authorization {\n"
        f"    user: {json.dumps(ROUTE_USER)}\n"
        f"    password: {json.dumps(route_secret)}\n"
        f"    timeout: {ROUTE_AUTH_TIMEOUT_SECONDS}\n"
        "  }\n"
        f"  routes: [\n{listed}  ]\n"
        "}\n"
    )


__all__ = ["CLUSTERED_STREAM_REPLICAS", "cluster_block", "ensure_route_secret"]
