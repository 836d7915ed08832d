"""The local stack's NATS with nkey authentication and each service's permissions.

Every identity of :mod:`knowsphere_runtime.nats_permissions` (the services on the bus, the ingestion
worker, ``local-client``) has an nkey seed in ``<data>/secrets/nats/<identity>.nk`` (mode 0600,
generated once and reused). At every start the nats-server configuration ``<data>/nats/nats-server.conf``
is written anew: loopback client and monitoring ports, JetStream stored in ``<data>/nats``, and the
``authorization`` block admitting exactly those keys with their permissions. Each service process gets
``KS_NATS_NKEY_SEED_FILE`` naming its own seed; a connection without a known key is refused.

``KS_STACK_NATS_AUTH=false`` starts NATS without authentication, as before.

With a cluster (``KS_STACK_NATS_CLUSTER``) every server gets such a file in its own folder
(``<data>/nats-2/nats-server.conf`` …) with the same ``authorization`` block, its name and the
``cluster`` block of :mod:`knowsphere_stack.nats_cluster`; a cluster always starts from configuration
files, with or without client authentication.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from knowsphere_runtime.nats_auth import NKEY_SEED_FILE_ENV, NatsAuthSettings
from knowsphere_runtime.nats_permissions import (
    LOCAL_CLIENT,
    NATS_PERMISSIONS,
    authorization_block,
    ensure_seeds,
    permissions_of,
    public_keys_of_seeds,
    seed_path,
)
from knowsphere_stack.config import LOOPBACK, StackConfig
from knowsphere_stack.layout import NatsNode, nats_nodes
from knowsphere_stack.nats_cluster import cluster_block, ensure_route_secret

CONFIG_FILE_NAME = "nats-server.conf"


def nats_secrets_dir(config: StackConfig) -> Path:
    """Where the identities' nkey seeds are kept."""
    return config.data_dir / "secrets" / "nats"


def nats_auth_on(config: StackConfig) -> bool:
    return config.nats_enabled and config.nats_auth


def server_config(
    store_dir: Path,
    port: int,
    monitor_port: int,
    authorization: str,
    *,
    server_name: str | None = None,
    cluster: str = "",
) -> str:
    """A nats-server configuration: what ``nats_component`` sets on the command line without
    authentication (loopback ports, JetStream in ``store_dir``) plus ``authorization``; in a cluster,
    the server's name (JetStream needs one per server) and its ``cluster`` block."""
    name = f"server_name: {json.dumps(server_name)}\n" if server_name else ""
    return (
        "# Written by ks-stack at every start (knowsphere_stack.nats_auth); edits are overwritten.\n"
        f"{name}"
        f"host: {json.dumps(LOOPBACK)}\n"
        f"port: {port}\n"
        f"http: {json.dumps(f'{LOOPBACK}:{monitor_port}')}\n"
        "jetstream {\n"
        f"  store_dir: {json.dumps(str(store_dir))}\n"
        "}\n"
        f"{authorization}"
        f"{cluster}"
    )


def write_server_config(config: StackConfig, node: NatsNode | None = None) -> Path:
    """Write the configuration of NATS server ``node`` (by default the first) into its folder: with
    ``KS_STACK_NATS_AUTH``, admitting every identity (missing seeds generated); in a cluster, with its
    routes. Its path. The file is private (0600): it may hold the routes' password."""
    node = node or nats_nodes(config)[0]
    authorization = ""
    if nats_auth_on(config):
        seeds = ensure_seeds(nats_secrets_dir(config), NATS_PERMISSIONS)
        authorization = authorization_block(public_keys_of_seeds(seeds))
    cluster = ""
    if node.cluster_port is not None:
        cluster = cluster_block(node, nats_nodes(config), ensure_route_secret(nats_secrets_dir(config)))
    text = server_config(
        node.jetstream_dir,
        node.port,
        node.monitor_port,
        authorization,
        server_name=node.name if node.cluster_port is not None else None,
        cluster=cluster,
    )
    node.store_dir.mkdir(parents=True, exist_ok=True)
    path = node.store_dir / CONFIG_FILE_NAME
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(temporary, 0o600)  # an older temporary file keeps its mode through O_TRUNC
    os.replace(temporary, path)
    return path


def nats_auth_env(config: StackConfig, identity: str) -> dict[str, str]:
    """``KS_NATS_NKEY_SEED_FILE`` of ``identity`` (a service, or the ingestion worker); nothing when the
    stack's NATS asks for no authentication."""
    if not nats_auth_on(config):
        return {}
    permissions_of(identity)  # an identity without permissions would be refused: fail here instead
    return {NKEY_SEED_FILE_ENV: str(seed_path(nats_secrets_dir(config), identity))}


def client_auth(config: StackConfig, identity: str = LOCAL_CLIENT) -> NatsAuthSettings:
    """How a process outside the stack connects to its NATS as ``identity`` (by default with every
    right): pass it to ``build_broker(auth=…)``, or ``.connect_options()`` to ``nats.connect``."""
    if not nats_auth_on(config):
        return NatsAuthSettings(nkey_seed_file=None, creds_file=None)
    permissions_of(identity)
    return NatsAuthSettings(nkey_seed_file=seed_path(nats_secrets_dir(config), identity), creds_file=None)


__all__ = ["client_auth", "nats_auth_env", "nats_secrets_dir", "server_config", "write_server_config"]
