"""Replicas of a service and a NATS cluster: settings, port layout, wiring, refusals, and a real start.

The real start runs nats-server three times from its wheel and stand-ins for the services; the replicas
of the real services are exercised in ``tests/e2e/test_replicas.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from pydantic import ValidationError
from stack_testing import alive, pids_with_env, standin

from knowsphere_runtime.bus import nats_servers
from knowsphere_runtime.rpc.channel import balanced_target, open_channel
from knowsphere_runtime.rpc.tls import MutualTls
from knowsphere_stack import Stack, StackConfig, StackStartError
from knowsphere_stack.components import LOCAL_CLIENT_ISSUER, ReplicasRefusedError, build_components
from knowsphere_stack.config import MAX_REPLICAS, free_ports
from knowsphere_stack.layout import layout_problems, port_uses
from knowsphere_stack.run_dir import RunDir
from knowsphere_stack.tls import ensure_tls_certificates, tls_files

pytestmark = pytest.mark.usefixtures("clean_env")

SHARED_BACKENDS = {
    "KS_RETRIEVAL_QDRANT_URL": "http://127.0.0.1:6333",
    "KS_RETRIEVAL_OPENSEARCH_URL": "http://127.0.0.1:9200",
    "KS_RETRIEVAL_DATABASE_URL": "postgresql+asyncpg://ks@127.0.0.1:5432/retrieval",
    "KS_RETRIEVAL_NEO4J_URL": "bolt://127.0.0.1:7687",
    "KS_CONVERSATION_DATABASE_URL": "postgresql+asyncpg://ks@127.0.0.1:5432/conversation",
    "KS_CONVERSATION_CHECKPOINT_URL": "postgresql://ks@127.0.0.1:5432/checkpoints",
    "KS_MODELHUB_DATABASE_URL": "postgresql+asyncpg://ks@127.0.0.1:5432/modelhub",
}
"""Server backends for every replicable service (nothing listens there: the wiring is what is tested)."""


# Settings ---------------------------------------------------------------------------------------


def test_replicas_and_cluster_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    config = StackConfig()
    assert [config.replicas(name) for name in ("conversation", "ingestion-worker", "gateway")] == [1, 1, 1]
    assert (config.nats_cluster, config.nats_cluster_port, config.replica_port_step) == (1, 6322, 10)
    monkeypatch.setenv("KS_STACK_REPLICAS_CONVERSATION", "3")
    monkeypatch.setenv("KS_STACK_REPLICAS_INGESTION_WORKER", "2")
    monkeypatch.setenv("KS_STACK_NATS_CLUSTER", "3")
    config = StackConfig()
    assert (config.replicas("conversation"), config.replicas("ingestion-worker")) == (3, 2)
    assert config.replicas("retrieval") == config.replicas("modelhub") == 1
    assert config.nats_cluster == 3


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("KS_STACK_REPLICAS_CONVERSATION", str(MAX_REPLICAS + 1), f"between 1 and {MAX_REPLICAS}"),
        ("KS_STACK_REPLICAS_INGESTION_WORKER", "0", f"between 1 and {MAX_REPLICAS}"),
        ("KS_STACK_NATS_CLUSTER", "2", "a cluster of 3 or 5"),
        (
            "KS_STACK_REPLICAS_GATEWAY",
            "2",
            "replicates only modelhub, retrieval, ingestion-worker, conversation",
        ),
        ("KS_STACK_REPLICAS_CONVERSTION", "2", "KS_STACK_REPLICAS_CONVERSATION"),  # the misspelling named too
    ],
)
def test_a_replica_setting_out_of_bounds_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, named: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as raised:
        StackConfig()
    assert variable in str(raised.value) and named in str(raised.value)


def test_ks_stack_reports_a_bad_replica_setting_as_a_usage_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KS_STACK_")}
    env["KS_STACK_REPLICAS_RETRIEVAL"] = "20"
    done = subprocess.run(
        [sys.executable, "-m", "knowsphere_stack.cli", "--data-dir", str(tmp_path), "status"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "KS_STACK_REPLICAS_RETRIEVAL=20: between 1 and 8" in done.stderr


# Port layout ------------------------------------------------------------------------------------


def _most(tmp_path: Path, **values: object) -> StackConfig:
    """Every replicable service at its maximum and the largest NATS cluster."""
    return StackConfig(
        data_dir=tmp_path,
        nats_cluster=5,
        **{f"replicas_{name}": MAX_REPLICAS for name in ("modelhub", "retrieval", "ingestion_worker")},
        replicas_conversation=MAX_REPLICAS,
        **values,  # type: ignore[arg-type]
    )


def test_replicas_and_servers_get_ports_of_their_own_clear_of_every_other(tmp_path: Path) -> None:
    config = _most(tmp_path)
    uses = port_uses(config)
    assert layout_problems(config) == []
    assert len({use.port for use in uses}) == len(uses)
    by_component = {(use.component, use.setting.split(" ")[0]): use.port for use in uses}
    assert by_component[("conversation", "KS_STACK_CONVERSATION_GRPC_PORT")] == 7411
    assert by_component[("conversation-2", "KS_STACK_CONVERSATION_GRPC_PORT")] == 7421
    assert by_component[("modelhub-8", "KS_STACK_MODELHUB_GRPC_PORT")] == 7486
    assert [by_component[(f"nats{s}", "KS_STACK_NATS_PORT")] for s in ("", "-2", "-3")] == [4322, 4332, 4342]
    assert by_component[("nats-5", "KS_STACK_NATS_CLUSTER_PORT")] == 6362
    assert by_component[("nats-2", "KS_STACK_NATS_MONITOR_PORT")] == 8332
    # The worker binds no port, however many run.
    assert not any(use.component.startswith("ingestion-worker") for use in uses)
    # A single server has no route port.
    assert "KS_STACK_NATS_CLUSTER_PORT" not in {
        use.setting for use in port_uses(StackConfig(data_dir=tmp_path))
    }


def test_a_replica_landing_on_another_port_is_named_with_the_settings_that_put_it_there(
    tmp_path: Path,
) -> None:
    config = StackConfig(data_dir=tmp_path, replicas_conversation=2, conversation_grpc_port=7402)
    [problem] = layout_problems(config)
    assert problem == (
        "port 7412 is configured twice: retrieval (KS_STACK_RETRIEVAL_GRPC_PORT) and conversation-2 "
        "(KS_STACK_CONVERSATION_GRPC_PORT + 1 * KS_STACK_REPLICA_PORT_STEP)"
    )
    clash = StackConfig(
        data_dir=tmp_path, replicas_conversation=2, conversation_grpc_port=7402, extra_env=SHARED_BACKENDS
    )
    with pytest.raises(StackStartError) as raised:
        Stack(clash).start()
    assert "configured twice" in str(raised.value) and "KS_STACK_REPLICA_PORT_STEP" in str(raised.value)
    assert RunDir(config.run_dir).pid_names() == []


def test_with_free_ports_gives_replicas_and_servers_ports_that_collide_with_nothing(tmp_path: Path) -> None:
    config = StackConfig.with_free_ports(data_dir=tmp_path, nats_cluster=3, replicas_conversation=4)
    uses = port_uses(config)
    assert layout_problems(config) == [] and len({u.port for u in uses}) == len(uses)
    assert sum(use.component.startswith("nats") for use in uses) == 9


# Wiring -----------------------------------------------------------------------------------------


def test_each_replica_has_its_name_port_data_dir_and_its_services_identity(tmp_path: Path) -> None:
    config = StackConfig(
        data_dir=tmp_path,
        ingestion_worker=True,
        replicas_conversation=2,
        replicas_ingestion_worker=2,
        replicas_modelhub=2,
        tls=True,
        extra_env=SHARED_BACKENDS,
    )
    specs = {spec.name: spec for spec in build_components(config)}
    assert list(specs) == [
        "nats",
        "temporal",
        "modelhub",
        "modelhub-2",
        "retrieval",
        "memory",
        "toolrunner",
        "ingestion",
        "ingestion-worker",
        "ingestion-worker-2",
        "conversation",
        "conversation-2",
        "gateway",
    ]
    first, second = specs["conversation"], specs["conversation-2"]
    assert (first.env["KS_CONVERSATION_GRPC_PORT"], second.env["KS_CONVERSATION_GRPC_PORT"]) == (
        "7411",
        "7421",
    )
    assert first.env["KS_CONVERSATION_DATA_DIR"] == str(tmp_path / "conversation")
    assert second.env["KS_CONVERSATION_DATA_DIR"] == str(tmp_path / "conversation-2")
    assert (first.log_path.name, second.log_path.name) == ("conversation.log", "conversation-2.log")
    assert second.ports == {"grpc": 7421} and second.health[0].address == "127.0.0.1:7421"  # type: ignore[union-attr]
    # One service: the same identity key, NATS nkey, certificate, master key and service name.
    same = (
        "KS_IDENTITY_SIGNING_KEY_FILE",
        "KS_NATS_NKEY_SEED_FILE",
        "KS_TLS_CERT_FILE",
        "KS_TLS_KEY_FILE",
        "MASTER_KEY",
        "OTEL_SERVICE_NAME",
        "KS_CONVERSATION_RETRIEVAL_ADDR",
        "KS_CONVERSATION_NATS_URL",
    )
    assert {k: second.env[k] for k in same} == {k: first.env[k] for k in same}
    assert first.env["KS_IDENTITY_SIGNING_KEY_FILE"].endswith("/conversation.key")
    assert first.env["KS_TLS_CERT_FILE"].endswith("/conversation.crt")
    assert first.env["OTEL_RESOURCE_ATTRIBUTES"] == "service.instance.id=conversation"
    assert second.env["OTEL_RESOURCE_ATTRIBUTES"] == "service.instance.id=conversation-2"
    # The second starts once the first is healthy (it creates the tables they share).
    assert "conversation" in second.depends_on and "conversation" not in first.depends_on

    # Callers reach every replica.
    gateway = specs["gateway"].env
    assert gateway["KS_GATEWAY_CONVERSATION_ADDR"] == "127.0.0.1:7411,127.0.0.1:7421"
    assert gateway["KS_GATEWAY_MODELHUB_ADDR"] == "127.0.0.1:7416,127.0.0.1:7426"
    assert gateway["KS_GATEWAY_RETRIEVAL_ADDR"] == "127.0.0.1:7412"
    assert specs["retrieval"].env["KS_RETRIEVAL_MODELHUB_ADDR"] == "127.0.0.1:7416,127.0.0.1:7426"
    assert "OTEL_RESOURCE_ATTRIBUTES" not in specs["retrieval"].env  # not replicated, as before

    # The workers share ingestion's data dir and the worker's identity; each has its own log.
    workers = [specs["ingestion-worker"], specs["ingestion-worker-2"]]
    for worker in workers:
        assert worker.env["KS_INGESTION_DATA_DIR"] == str(tmp_path / "ingestion")
        assert worker.env["KS_NATS_NKEY_SEED_FILE"].endswith("/ingestion-worker.nk")
        assert worker.env["KS_TLS_CERT_FILE"].endswith("/ingestion-worker.crt")
        assert worker.env["OTEL_SERVICE_NAME"] == "ingestion-worker"
    assert [w.log_path.name for w in workers] == ["ingestion-worker.log", "ingestion-worker-2.log"]
    assert workers[1].depends_on[-1] == "ingestion-worker"

    # A further modelhub shares the first one's model cache instead of preparing its own.
    assert "KS_MODELHUB_MODEL_CACHE_DIR" not in specs["modelhub"].env
    assert specs["modelhub-2"].env["KS_MODELHUB_MODEL_CACHE_DIR"] == str(tmp_path / "modelhub" / "models")
    assert specs["modelhub-2"].env["KS_MODELHUB_DATA_DIR"] == str(tmp_path / "modelhub-2")

    # No certificate, key or NATS identity is made per replica.
    assert not list((tmp_path / "secrets").rglob("*-2.*"))


def test_a_cluster_gives_every_service_all_servers_and_three_stream_replicas(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path, nats_cluster=3, ingestion_worker=True)
    specs = {spec.name: spec for spec in build_components(config)}
    urls = "nats://127.0.0.1:4322,nats://127.0.0.1:4332,nats://127.0.0.1:4342"
    assert config.nats_url == urls and nats_servers(urls) == config.nats_urls
    for name in (
        "gateway",
        "conversation",
        "ingestion",
        "ingestion-worker",
        "memory",
        "modelhub",
        "retrieval",
    ):
        env = specs[name].env
        assert env[f"KS_{name.split('-')[0].upper()}_NATS_URL"] == urls
        assert env["KS_NATS_STREAM_REPLICAS"] == "3"
        assert {"nats", "nats-2", "nats-3"} <= set(specs[name].depends_on)
    assert "KS_NATS_STREAM_REPLICAS" not in specs["toolrunner"].env
    single = {spec.name: spec for spec in build_components(StackConfig(data_dir=tmp_path / "one"))}
    assert "KS_NATS_STREAM_REPLICAS" not in single["gateway"].env


def test_each_nats_server_has_a_valid_configuration_with_routes_to_the_others(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path, nats_cluster=3)
    servers = [spec for spec in build_components(config) if spec.name.startswith("nats")]
    assert [s.name for s in servers] == ["nats", "nats-2", "nats-3"]
    secret_file = tmp_path / "secrets" / "nats" / "routes.secret"
    secret = secret_file.read_text().strip()
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600 and len(secret) >= 32
    for index, server in enumerate(servers, start=1):
        conf = Path(server.argv[2])
        assert conf == tmp_path / server.name / "nats-server.conf"
        assert stat.S_IMODE(conf.stat().st_mode) == 0o600  # it holds the routes' password
        text = conf.read_text()
        checked = subprocess.run([*server.argv, "-t"], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr + checked.stdout
        assert f'server_name: "{server.name}"' in text and 'name: "knowsphere"' in text
        assert f'store_dir: "{tmp_path / server.name / "cluster"}"' in text
        assert f'listen: "127.0.0.1:{6322 + 10 * (index - 1)}"' in text
        routes = sorted(6322 + 10 * (other - 1) for other in range(1, 4) if other != index)
        assert [f"route:{secret}@127.0.0.1:{port}" in text for port in routes] == [True, True]
        assert "authorization {\n  users = [" in text  # the services' nkeys, the same on each
        assert server.health[1].url.endswith("/healthz")  # type: ignore[union-attr]  # a meta leader
    # Without client authentication a cluster still starts from its files, routes authenticated.
    without_auth = build_components(StackConfig(data_dir=tmp_path, nats_cluster=3, nats_auth=False))
    text = Path(without_auth[0].argv[2]).read_text()
    assert "users = [" not in text and f"route:{secret}@" in text


# Refusals ---------------------------------------------------------------------------------------


def test_retrieval_replicas_on_embedded_backends_are_refused_naming_the_settings(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path, replicas_retrieval=2)
    with pytest.raises(ReplicasRefusedError) as raised:
        build_components(config)
    message = str(raised.value)
    assert message.startswith(
        "KS_STACK_REPLICAS_RETRIEVAL=2: retrieval's embedded stores belong to one process"
    )
    for variable in (
        "KS_RETRIEVAL_QDRANT_URL",
        "KS_RETRIEVAL_OPENSEARCH_URL",
        "KS_RETRIEVAL_DATABASE_URL",
        "KS_RETRIEVAL_NEO4J_URL (Neo4j for the graph) (or KS_RETRIEVAL_GRAPH_ENABLED=false)",
        "KS_STACK_REPLICAS_RETRIEVAL=1",
    ):
        assert variable in message
    # Nothing was written: no keys, no NATS configuration.
    assert not (tmp_path / "secrets").exists() and not (tmp_path / "nats").exists()

    servers = {k: v for k, v in SHARED_BACKENDS.items() if k.startswith("KS_RETRIEVAL_")}
    build_components(StackConfig(data_dir=tmp_path, replicas_retrieval=2, extra_env=servers))
    # The graph turned off instead of a Neo4j server will do too; a chunk store in SQLite will not.
    without_graph = {**servers, "KS_RETRIEVAL_GRAPH_ENABLED": "false"}
    del without_graph["KS_RETRIEVAL_NEO4J_URL"]
    build_components(StackConfig(data_dir=tmp_path, replicas_retrieval=2, extra_env=without_graph))
    sqlite = {**servers, "KS_RETRIEVAL_DATABASE_URL": "sqlite+aiosqlite:////tmp/chunks.db"}
    with pytest.raises(
        ReplicasRefusedError, match=r"KS_RETRIEVAL_DATABASE_URL .* names no PostgreSQL database"
    ):
        build_components(StackConfig(data_dir=tmp_path, replicas_retrieval=2, extra_env=sqlite))


def test_conversation_and_modelhub_replicas_need_postgresql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = StackConfig(data_dir=tmp_path, replicas_conversation=2, replicas_modelhub=3)
    with pytest.raises(StackStartError) as raised:
        Stack(config).start()
    assert raised.value.component == "conversation"
    message = str(raised.value)
    assert "KS_STACK_REPLICAS_MODELHUB=3" in message and "KS_MODELHUB_DATABASE_URL" in message
    assert "KS_STACK_REPLICAS_CONVERSATION=2" in message
    assert "KS_CONVERSATION_DATABASE_URL" in message and "KS_CONVERSATION_CHECKPOINT_URL" in message
    assert RunDir(config.run_dir).pid_names() == []
    # Inherited from the environment counts as set (that is where the services read it).
    for variable in (
        "KS_CONVERSATION_DATABASE_URL",
        "KS_CONVERSATION_CHECKPOINT_URL",
        "KS_MODELHUB_DATABASE_URL",
    ):
        monkeypatch.setenv(variable, SHARED_BACKENDS[variable])
    build_components(config)


def test_ingestion_workers_and_services_left_out_need_nothing(tmp_path: Path) -> None:
    build_components(StackConfig(data_dir=tmp_path, replicas_ingestion_worker=MAX_REPLICAS))
    # A replica count for a service that does not run is not a reason to refuse.
    build_components(StackConfig(data_dir=tmp_path, services=["gateway"], replicas_retrieval=2))


# A real start -----------------------------------------------------------------------------------


async def _answers_as(
    address: str, instance: str, calls: int, tls: MutualTls | None = None
) -> dict[str, int]:
    """Asking every call through one channel to ``address`` whether it reached ``instance``: how
    many were answered by it ("yes") and by another instance ("no")."""
    answers = {"yes": 0, "no": 0}
    channel = open_channel(address, tls=tls)
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        for _ in range(calls):
            try:
                await stub.Check(health_pb2.HealthCheckRequest(service=f"instance/{instance}"), timeout=5)
                answers["yes"] += 1
            except grpc.aio.AioRpcError as error:
                assert error.code() == grpc.StatusCode.NOT_FOUND, error
                answers["no"] += 1
    finally:
        await channel.close()
    return answers


def test_up_status_and_down_with_replicas_on_a_nats_cluster(tmp_path: Path) -> None:
    data = tmp_path / "data"
    services = ["ingestion", "conversation", "gateway"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KS_STACK_") and k != "MASTER_KEY"}
    fields = StackConfig.port_fields()
    env.update({StackConfig.env_var(f): str(p) for f, p in zip(fields, free_ports(len(fields)), strict=True)})
    commands = {name: standin(name) for name in services}
    commands["ingestion-worker"] = standin("ingestion-worker", "--no-grpc")
    env.update(
        KS_STACK_DATA_DIR=str(data),
        KS_STACK_SERVICES=",".join(services),
        KS_STACK_SERVICE_COMMAND=json.dumps(commands),
        KS_STACK_TEMPORAL_ENABLED="false",
        KS_STACK_INGESTION_WORKER="true",
        KS_STACK_NATS_CLUSTER="3",
        KS_STACK_REPLICAS_CONVERSATION="2",
        KS_STACK_REPLICAS_INGESTION_WORKER="2",
        KS_STACK_HEALTH_TIMEOUT="60",
        KS_STACK_STOP_GRACE="5",
        KS_CONVERSATION_DATABASE_URL=SHARED_BACKENDS["KS_CONVERSATION_DATABASE_URL"],
        KS_CONVERSATION_CHECKPOINT_URL=SHARED_BACKENDS["KS_CONVERSATION_CHECKPOINT_URL"],
    )

    def ks(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "knowsphere_stack.cli", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    expected = ["nats", "nats-2", "nats-3", "ingestion", "ingestion-worker", "ingestion-worker-2"]
    expected += ["conversation", "conversation-2", "gateway"]
    try:
        up = ks("up")
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"({len(expected)} components healthy)" in up.stdout

        status = ks("status")
        assert status.returncode == 0, status.stdout + status.stderr
        rows = [line.split() for line in status.stdout.splitlines()[2:]]
        assert [row[0] for row in rows] == expected
        run_dir = RunDir(data / "run")
        for row in rows:
            recorded = run_dir.read_pid(row[0])
            assert recorded is not None and recorded.is_running()
            assert (row[1], row[2], row[-1]) == ("healthy", str(recorded.pid), "healthy"), row
        assert len({row[2] for row in rows}) == len(expected)

        # The gateway's one channel to conversation reaches both replicas.
        gateway = json.loads((data / "gateway" / "standin-gateway.json").read_text())["env"]
        address = gateway["KS_GATEWAY_CONVERSATION_ADDR"]
        assert balanced_target(address)[0].startswith("ipv4:127.0.0.1:")
        answers = asyncio.run(_answers_as(address, "conversation-2", calls=20))
        assert answers["yes"] >= 5 and answers["no"] >= 5, answers
        second = json.loads((data / "conversation-2" / "standin-conversation.json").read_text())["env"]
        assert second["KS_CONVERSATION_NATS_URL"].count("nats://127.0.0.1:") == 3

        pids = [int(row[2]) for row in rows]
        down = ks("down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert not any(alive(pid) for pid in pids)
        assert pids_with_env("KS_STACK_DATA_DIR", str(data)) == [] and run_dir.pid_names() == []
    finally:
        ks("down")


def test_replicas_serving_their_services_certificate_are_reached_over_mutual_tls(tmp_path: Path) -> None:
    # As with KS_STACK_TLS: every replica serves with its service's certificate (valid for 127.0.0.1),
    # the caller presents its own; the list's first address is the name the certificates are checked for.
    ensure_tls_certificates(tmp_path, ["conversation", LOCAL_CLIENT_ISSUER])
    server_files = tls_files(tmp_path, "conversation")
    credentials = grpc.ssl_server_credentials(
        [(server_files.key_file.read_bytes(), server_files.cert_file.read_bytes())],
        root_certificates=server_files.ca_file.read_bytes(),
        require_client_auth=True,
    )
    servers, addresses = [], []
    for name in ("conversation", "conversation-2"):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        servicer = health.HealthServicer()
        servicer.set(f"instance/{name}", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        addresses.append(f"127.0.0.1:{server.add_secure_port('127.0.0.1:0', credentials)}")
        server.start()
        servers.append(server)
    try:
        client = tls_files(tmp_path, LOCAL_CLIENT_ISSUER).load()
        answers = asyncio.run(_answers_as(",".join(addresses), "conversation-2", calls=20, tls=client))
        assert answers["yes"] >= 5 and answers["no"] >= 5, answers
    finally:
        for server in servers:
            server.stop(0)


def test_a_list_of_addresses_is_balanced_and_a_list_of_names_refused() -> None:
    assert balanced_target("127.0.0.1:7411") == ("127.0.0.1:7411", [])
    assert balanced_target("retrieval:7412") == ("retrieval:7412", [])
    target, options = balanced_target("127.0.0.1:7411, 127.0.0.1:7421")
    assert target == "ipv4:127.0.0.1:7411,127.0.0.1:7421"
    assert dict(options) == {"grpc.lb_policy_name": "round_robin", "grpc.default_authority": "127.0.0.1:7411"}
    assert balanced_target("ipv4:127.0.0.1:7411")[0] == "ipv4:127.0.0.1:7411"
    with pytest.raises(ValueError, match="'retrieval-2:7412' is not an IPv4 host:port"):
        balanced_target("127.0.0.1:7412,retrieval-2:7412")
    assert nats_servers("nats://a:4222") == ["nats://a:4222"]
    assert nats_servers(" nats://a:4222, nats://b:4222 ,") == ["nats://a:4222", "nats://b:4222"]
    with pytest.raises(ValueError, match="names no server"):
        nats_servers(" , ")
