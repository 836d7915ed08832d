"""The whole stack, started once per session by the same launcher as `make up`.

Every port is a free one, the data lives in a temporary folder, and every service exports its
spans over OTLP/HTTP to an in-test receiver.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from knowsphere_stack import Stack, StackConfig, free_port

from .otlp_receiver import OtlpReceiver

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "services" / "modelhub" / "tests"))
from scripted_provider import ScriptedProvider

PROXY_SECRET = "e2e-proxy-secret-" + "0123456789abcdef" * 2


@pytest.fixture(scope="session")
def otlp() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="session")
def model_server() -> Iterator[ScriptedProvider]:
    """The hosted model provider of the session's tests (OpenAI's wire format on a real socket); each
    test scripts it after ``reset()``."""
    server = ScriptedProvider()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def local_llm_port() -> int:
    """The loopback port a local model server of the tests listens on (the stack may call it)."""
    return free_port()


@pytest.fixture(scope="session")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    otlp: OtlpReceiver,
    identity_keys_dir: Path,
    model_server: ScriptedProvider,
    local_llm_port: int,
) -> Iterator[Stack]:
    config = StackConfig.with_free_ports(
        data_dir=tmp_path_factory.mktemp("stack"),
        # The services trust the test process's identity tokens (its calls go to them directly).
        identity_keys_dir=identity_keys_dir,
        temporal_headless=True,
        extra_env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            # A killed ingestion worker's stage moves to another attempt after 5 s, not 30.
            "KS_INGESTION_ACTIVITY_HEARTBEAT_SECONDS": "5",
            # Tests that need a tenant of their own (a chat model set as its default) name it in
            # identity headers, sent with this proxy secret as an authenticating proxy would;
            # requests without them stay the local tenant (make up's local mode).
            "KS_GATEWAY_PROXY_SECRET": PROXY_SECRET,
            # A killed conversation replica's turn is delivered again after 6 s, not 30.
            "KS_CONVERSATION_TURN_ACK_WAIT_SECONDS": "6",
            # Tenants' models point at the scripted provider (or a local model) on loopback, which
            # the operator allows.
            **model_server.modelhub_egress_env(local_llm_port),
            # External orchestrators of the tests call an application the scripted server plays (an
            # n8n webhook) on loopback, which the operator allows for the conversation too.
            "KS_CONVERSATION_EGRESS__ALLOW_NETWORKS": '["127.0.0.1/32"]',
            "KS_CONVERSATION_EGRESS__ALLOWED_PORTS": json.dumps([80, 443, model_server.port]),
        },
    )
    with Stack(config) as running:
        yield running
