"""The local stack's NATS with nkey authentication and each service's permissions.

Every identity of :mod:`knowsphere_runtime.nats_permissions` (the services on the bus, the ingestion
worker, ``local-client``) has an nkey seed in ``<data>/secrets/nats/<identity>.nk`` (mode 0600,
generated once and reused). At every start the nats-server configuration ``<data>/nats/nats-server.conf``
is written anew: loopback client and monitoring ports, JetStream stored in ``<data>/nats``, and the
``authorization`` block admitting exactly those keys with their permissions. Each service process gets
``KS_NATS_NKEY_SEED_FILE`` naming its own seed; a connection without a known key is refused.

``KS_STACK_NATS_AUTH=false`` starts NATS without authentication, as before.
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

CONFIG_FILE_NAME = "nats-server.conf"


def nats_secrets_dir(config: StackConfig) -> Path:
    """Where the identities' nkey seeds are kept."""
    return config.data_dir / "secrets" / "nats"


def nats_auth_on(config: StackConfig) -> bool:
    return config.nats_enabled and config.nats_auth


def server_config(store_dir: Path, port: int, monitor_port: int, authorization: str) -> str:
    """A nats-server configuration: what ``nats_component`` sets on the command line without
    authentication (loopback ports, JetStream in ``store_dir``) plus ``authorization``."""
    return (
        "# Written by ks-stack at every start (knowsphere_stack.nats_auth); edits are overwritten.\n"
        f"host: {json.dumps(LOOPBACK)}\n"
        f"port: {port}\n"
        f"http: {json.dumps(f'{LOOPBACK}:{monitor_port}')}\n"
        "jetstream {\n"
        f"  store_dir: {json.dumps(str(store_dir))}\n"
        "}\n"
        f"{authorization}"
    )


def write_server_config(config: StackConfig, store_dir: Path) -> Path:
    """Generate the missing seeds and write the server configuration admitting every identity; its path."""
    seeds = ensure_seeds(nats_secrets_dir(config), NATS_PERMISSIONS)
    text = server_config(
        store_dir,
        config.nats_port,
        config.nats_monitor_port,
        authorization_block(public_keys_of_seeds(seeds)),
    )
    store_dir.mkdir(parents=True, exist_ok=True)
    path = store_dir / CONFIG_FILE_NAME
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
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
