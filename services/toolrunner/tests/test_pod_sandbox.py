"""The production sandbox adapter (``PodSandbox``: one pod per run on a gVisor RuntimeClass) against a
scripted Kubernetes API server.

Kubernetes cannot run here, so the API server is a scripted peer written for this test: a Starlette
app on a real loopback socket that speaks the real REST paths and JSON shapes the adapter uses
(ConfigMaps and pods created, read and deleted under ``/api/v1/namespaces/{ns}/…``, the pod's log, the
``skill-run`` PodTemplate read from the component's own manifest). It stands in for the kubelet too:
a created pod "runs" by starting its container command locally in bubblewrap, with a folder per
volume laid out as the pod's volumes (the ConfigMap's items written where their ``path`` says,
memory-backed emptyDirs as plain folders) and mounted where the pod's ``volumeMounts`` say, its
combined stdout and stderr kept as the container's log and ``activeDeadlineSeconds`` enforced as
``DeadlineExceeded``. So the real wrapper runs the real script; gVisor, scheduling, quotas and RBAC
are not exercised here.
"""

from __future__ import annotations

import asyncio
import base64
import math
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from knowsphere_toolrunner.domain.skill_runs import UnavailableSandbox
from knowsphere_toolrunner.sandbox import SandboxError, SandboxErrorCode, SandboxLimits, SandboxRequest
from knowsphere_toolrunner.sandbox.host import locate_bwrap
from knowsphere_toolrunner.sandbox.pod import RUN_LABEL, PodSandbox
from knowsphere_toolrunner.sandbox.pod_settings import PodSandboxSettings
from knowsphere_toolrunner.settings import Settings
from knowsphere_toolrunner.toolbox import build_sandbox

REPO = Path(__file__).resolve().parents[3]
TEMPLATE = REPO / "deploy" / "k8s" / "components" / "sandbox-gvisor" / "skill-run.yaml"
NAMESPACE = "knowsphere-sandbox"
TOKEN = "test-service-account-token"
BWRAP = locate_bwrap()

pytestmark = pytest.mark.skipif(BWRAP is None, reason="no bwrap to stand in for the pod's container")


def not_found(kind: str, name: str) -> JSONResponse:
    return JSONResponse(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": "NotFound",
            "message": f'{kind} "{name}" not found',
            "code": 404,
        },
        status_code=404,
    )


@dataclass
class ScriptedKubernetes:
    """The API server and kubelet of one test (see the module's docstring)."""

    work: Path
    config_maps: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    logs: dict[str, bytes] = field(default_factory=dict)
    created: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    deleted: list[tuple[str, str]] = field(default_factory=list)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    runs: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    running: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> Starlette:
        base = "/api/v1/namespaces/{ns}"
        return Starlette(
            routes=[
                Route(base + "/podtemplates/{name}", self.get_template, methods=["GET"]),
                Route(base + "/configmaps", self.create_config_map, methods=["POST"]),
                Route(base + "/configmaps/{name}", self.delete_config_map, methods=["DELETE"]),
                Route(base + "/pods", self.create_pod, methods=["POST"]),
                Route(base + "/pods/{name}", self.get_pod, methods=["GET"]),
                Route(base + "/pods/{name}", self.delete_pod, methods=["DELETE"]),
                Route(base + "/pods/{name}/log", self.pod_log, methods=["GET"]),
            ]
        )

    def _seen(self, request: Request) -> None:
        self.requests.append((request.method, request.url.path, request.headers.get("authorization")))
        assert request.path_params["ns"] == NAMESPACE

    async def get_template(self, request: Request) -> Response:
        self._seen(request)
        template = yaml.safe_load(TEMPLATE.read_text())
        if template["metadata"]["name"] != request.path_params["name"]:
            return not_found("podtemplates", request.path_params["name"])
        return JSONResponse(template)

    async def create_config_map(self, request: Request) -> Response:
        self._seen(request)
        body = await request.json()
        self.config_maps[body["metadata"]["name"]] = body
        self.created.append(("configmaps", body))
        return JSONResponse(body, status_code=201)

    async def delete_config_map(self, request: Request) -> Response:
        self._seen(request)
        name = request.path_params["name"]
        if self.config_maps.pop(name, None) is None:
            return not_found("configmaps", name)
        self.deleted.append(("configmaps", name))
        return JSONResponse({"kind": "Status", "status": "Success"})

    async def create_pod(self, request: Request) -> Response:
        self._seen(request)
        body = await request.json()
        name = body["metadata"]["name"]
        body["status"] = {"phase": "Pending"}
        self.pods[name] = body
        self.created.append(("pods", body))
        self.runs[name] = asyncio.create_task(self._kubelet(name))
        return JSONResponse(body, status_code=201)

    async def get_pod(self, request: Request) -> Response:
        self._seen(request)
        name = request.path_params["name"]
        if name not in self.pods:
            return not_found("pods", name)
        return JSONResponse(self.pods[name])

    async def delete_pod(self, request: Request) -> Response:
        self._seen(request)
        name = request.path_params["name"]
        if self.pods.pop(name, None) is None:
            return not_found("pods", name)
        run = self.runs.pop(name, None)
        if run is not None:
            run.cancel()
        self.deleted.append(("pods", name))
        return JSONResponse({"kind": "Status", "status": "Success"})

    async def pod_log(self, request: Request) -> Response:
        self._seen(request)
        name = request.path_params["name"]
        limit = int(request.query_params.get("limitBytes", "0")) or None
        return Response(self.logs.get(name, b"")[:limit], media_type="text/plain")

    async def _kubelet(self, name: str) -> None:
        pod = self.pods[name]
        spec = pod["spec"]
        folder = Path(tempfile.mkdtemp(prefix="pod-", dir=self.work))
        sources: dict[str, Path] = {}
        for volume in spec["volumes"]:
            target = sources[volume["name"]] = folder / volume["name"]
            target.mkdir()
            if "configMap" in volume:
                stored = self.config_maps[volume["configMap"]["name"]]["binaryData"]
                for item in volume["configMap"]["items"]:
                    path = target / item["path"]
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(base64.b64decode(stored[item["key"]]))
        (container,) = spec["containers"]
        argv = [
            str(BWRAP),
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--as-pid-1",
            "--die-with-parent",
        ]
        for path in ("/usr", "/bin", "/lib", "/lib64", "/etc"):
            argv += ["--ro-bind-try", path, path]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        for mount in container["volumeMounts"]:
            flag = "--ro-bind" if mount.get("readOnly") else "--bind"
            argv += [flag, str(sources[mount["name"]]), mount["mountPath"]]
        argv += ["--chdir", container["workingDir"], "--", *container["command"], *container.get("args", [])]
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True
        )
        self.running.set()
        pod["status"] = {
            "phase": "Running",
            "containerStatuses": [{"name": container["name"], "state": {"running": {}}}],
        }
        try:
            async with asyncio.timeout(spec["activeDeadlineSeconds"]):
                log, _ = await process.communicate()
        except TimeoutError:
            process.kill()
            await process.wait()
            pod["status"] = {
                "phase": "Failed",
                "reason": "DeadlineExceeded",
                "message": "Pod was active on the node longer than the specified deadline",
            }
            return
        except asyncio.CancelledError:
            process.kill()
            await process.wait()
            raise
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self.logs[name] = log
        assert process.returncode is not None
        pod["status"] = {
            "phase": "Succeeded" if process.returncode == 0 else "Failed",
            "containerStatuses": [
                {
                    "name": container["name"],
                    "state": {
                        "terminated": {
                            "exitCode": process.returncode,
                            "reason": "Completed" if process.returncode == 0 else "Error",
                        }
                    },
                }
            ],
        }


@dataclass
class Cluster:
    api: ScriptedKubernetes
    sandbox: PodSandbox
    settings: PodSandboxSettings

    def created(self, kind: str) -> list[dict[str, Any]]:
        return [body for k, body in self.api.created if k == kind]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    api = ScriptedKubernetes(work=tmp_path)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(api.app(), host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    settings = PodSandboxSettings(
        api_url=f"http://127.0.0.1:{port}",
        token_path=token,
        ca_path=tmp_path / "absent-ca.crt",
        poll_interval_seconds=0.05,
    )
    try:
        yield Cluster(api, PodSandbox(SandboxLimits(wall_time_seconds=20.0), settings), settings)
    finally:
        for run in api.runs.values():
            run.cancel()
        server.should_exit = True
        await task


SCRIPT = b"""
import pathlib, sys
text = pathlib.Path("/workspace/input/notes/data.txt").read_text()
out = pathlib.Path("/workspace/output/report")
out.mkdir(parents=True)
(out / "upper.txt").write_text(text.upper() + sys.stdin.read())
print("hello from", sys.argv[1])
print("careful", file=sys.stderr)
sys.exit(3)
"""


def request(script: bytes, **overrides: Any) -> SandboxRequest:
    return SandboxRequest(script="run.py", skill_files={"run.py": script}, **overrides)


def assert_cleaned_up(api: ScriptedKubernetes) -> None:
    pods = {body["metadata"]["name"] for kind, body in api.created if kind == "pods"}
    maps = {body["metadata"]["name"] for kind, body in api.created if kind == "configmaps"}
    assert pods and maps
    assert set(api.deleted) == {("pods", n) for n in pods} | {("configmaps", n) for n in maps}
    assert not api.pods and not api.config_maps


async def test_a_run_returns_its_outputs_streams_and_exit_code(cluster: Cluster) -> None:
    result = await cluster.sandbox.run_script(
        request(SCRIPT, inputs={"notes/data.txt": b"quarterly figures"}, args=("acme",), stdin=b"|stdin")
    )
    assert result.exit_code == 3 and not result.timed_out and result.signal is None
    assert result.stdout == b"hello from acme\n"
    assert result.stderr == b"careful\n"
    assert result.outputs == {"report/upper.txt": b"QUARTERLY FIGURES|stdin"}
    assert not (result.stdout_truncated or result.stderr_truncated or result.outputs_truncated)
    assert "runtime-class-gvisor" in result.protections
    assert_cleaned_up(cluster.api)
    assert all(auth == f"Bearer {TOKEN}" for _, _, auth in cluster.api.requests)


async def test_the_run_pod_is_isolated_and_limited(cluster: Cluster) -> None:
    await cluster.sandbox.run_script(request(b"print('ok')", wall_time_seconds=7.5))
    (pod,) = cluster.created("pods")
    (config_map,) = cluster.created("configmaps")
    spec = pod["spec"]
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["activeDeadlineSeconds"] == math.ceil(7.5)
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    (container,) = spec["containers"]
    assert container["image"] == "knowsphere/toolrunner"  # from the component's PodTemplate
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    limits = container["resources"]["limits"]
    assert int(limits["memory"]) == cluster.sandbox.limits.max_run_memory_bytes and limits["cpu"] == "1"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["workspace"]["emptyDir"]["medium"] == "Memory"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/skill"]["readOnly"] and mounts["/sandbox"]["readOnly"]
    assert volumes[mounts["/skill"]["name"]]["configMap"]["name"] == config_map["metadata"]["name"]
    assert pod["metadata"]["labels"][RUN_LABEL] == config_map["metadata"]["labels"][RUN_LABEL]
    assert "ownerReferences" not in config_map["metadata"]


@pytest.mark.parametrize(
    ("wall_time", "stdout"),
    [
        # activeDeadlineSeconds (1) ends the pod before the wrapper's own timer: nothing is reported.
        (1.0, b""),
        # The wrapper's timer (2.2 s) ends the script before the pod's deadline (3 s): what the script
        # printed until then comes back, as from the bwrap sandbox.
        (2.2, b"started\n"),
    ],
)
async def test_a_script_past_its_time_ends_timed_out_and_leaves_nothing(
    cluster: Cluster, wall_time: float, stdout: bytes
) -> None:
    result = await cluster.sandbox.run_script(
        request(b"import time\nprint('started', flush=True)\ntime.sleep(60)", wall_time_seconds=wall_time)
    )
    assert result.timed_out and result.exit_code is None and result.outputs == {}
    assert result.stdout == stdout
    assert not result.ok
    assert_cleaned_up(cluster.api)


async def test_a_caller_that_gives_up_leaves_nothing(cluster: Cluster) -> None:
    run = asyncio.create_task(cluster.sandbox.run_script(request(b"import time\ntime.sleep(60)")))
    await cluster.api.running.wait()
    await asyncio.sleep(0.2)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert_cleaned_up(cluster.api)


async def test_inputs_larger_than_a_config_map_are_refused_before_anything_is_created(
    cluster: Cluster,
) -> None:
    too_big = b"x" * cluster.settings.max_config_map_bytes
    with pytest.raises(SandboxError) as refused:
        await cluster.sandbox.run_script(request(b"print(1)", inputs={"big.bin": too_big}))
    assert refused.value.code == SandboxErrorCode.INVALID_REQUEST and refused.value.field == "inputs"
    assert str(cluster.settings.max_config_map_bytes) in str(refused.value)
    assert cluster.api.requests == []


async def test_a_missing_token_makes_the_sandbox_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SandboxError) as refused:
        PodSandbox(settings=PodSandboxSettings(token_path=tmp_path / "absent"))
    assert refused.value.code == SandboxErrorCode.UNAVAILABLE and "token" in str(refused.value)


def test_the_backend_setting_chooses_the_pod_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    monkeypatch.setenv("KS_TOOLRUNNER_SANDBOX_BACKEND", "pod")
    monkeypatch.setenv("KS_TOOLRUNNER_POD_SANDBOX__TOKEN_PATH", str(token))
    monkeypatch.setenv("KS_TOOLRUNNER_POD_SANDBOX__NAMESPACE", "runs-elsewhere")
    settings = Settings(data_dir=tmp_path, retrieval_addr="unused", modelhub_addr="unused")
    sandbox = build_sandbox(settings)
    assert isinstance(sandbox, PodSandbox) and sandbox.settings.namespace == "runs-elsewhere"
    monkeypatch.setenv("KS_TOOLRUNNER_POD_SANDBOX__TOKEN_PATH", str(tmp_path / "absent"))
    settings = Settings(data_dir=tmp_path, retrieval_addr="unused", modelhub_addr="unused")
    assert isinstance(build_sandbox(settings), UnavailableSandbox)


def test_outputs_are_capped_to_what_one_container_log_can_carry(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    limits = SandboxLimits(max_output_bytes=10 * 1024 * 1024)
    small_log = PodSandbox(limits, PodSandboxSettings(token_path=token, max_log_bytes=4 * 1024 * 1024))
    assert 0 < small_log.limits.max_output_bytes < 3 * 1024 * 1024  # base64 of it fits in 4 MiB
    assert small_log._log_limit_bytes() <= 4 * 1024 * 1024
    roomy = PodSandbox(limits, PodSandboxSettings(token_path=token, max_log_bytes=64 * 1024 * 1024))
    assert roomy.limits.max_output_bytes == limits.max_output_bytes
    with pytest.raises(SandboxError, match="max_log_bytes"):
        PodSandbox(limits, PodSandboxSettings(token_path=token, max_log_bytes=1024))
