"""The production sandbox: each skill-script run is one short-lived pod on a gVisor RuntimeClass (the
design of kubernetes-sigs/agent-sandbox: a single-use, isolated workload per run, created from a
template and deleted afterwards), in the namespace of the ``sandbox-gvisor`` Kustomize component.

For each run, after the same checks as the bwrap sandbox (``checks.py``):
1. a ConfigMap (``binaryData``) holds the wrapper (``pod_wrapper.py``), the run's description, stdin,
   the skill's files and the inputs; a run that does not fit one ConfigMap is refused before anything
   is created;
2. the pod copies the component's ``skill-run`` PodTemplate, read through the API for every run (the
   operator's image, scheduling, requests and environment stay in the one manifest), and this module
   then sets what isolates and limits the run whatever the template says: the RuntimeClass, no
   service-account token, no service links or host namespaces, non-root, a read-only root, no
   privilege escalation or capabilities, the memory limit and memory-backed ``/workspace`` and
   ``/tmp`` of ``SandboxLimits``, ``activeDeadlineSeconds`` = the run's time limit, the ConfigMap
   read-only at ``/sandbox``, ``/skill`` and ``/workspace/input``;
3. the pod is polled until it ends; the container's log is the wrapper's report (stdout, stderr,
   status and a tar of ``/workspace/output``), parsed and capped again here;
4. the pod and the ConfigMap are deleted, also when the run fails or the caller gives up. They carry
   no owner reference; their labels name the run (``knowsphere.io/skill-run``).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import io
import json
import math
import secrets
import signal
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from knowsphere_telemetry import attributes
from knowsphere_toolrunner.sandbox.checks import (
    INPUT_DIR,
    OUTPUT_DIR,
    SKILL_ROOT,
    WORKSPACE,
    check_request,
    safe_relative_path,
)
from knowsphere_toolrunner.sandbox.kubernetes_api import KubernetesApi, KubernetesApiError
from knowsphere_toolrunner.sandbox.limits import SandboxLimits
from knowsphere_toolrunner.sandbox.model import SandboxError, SandboxErrorCode, SandboxRequest, SandboxResult
from knowsphere_toolrunner.sandbox.pod_settings import PodSandboxSettings

log = structlog.get_logger(__name__)
_tracer = trace.get_tracer("knowsphere.toolrunner")

# OpenTelemetry semantic-convention attribute names (k8s.*).
K8S_NAMESPACE = "k8s.namespace.name"
K8S_POD_NAME = "k8s.pod.name"

RUN_LABEL = "knowsphere.io/skill-run"
SANDBOX_DIR = "/sandbox"
WRAPPER_KEY = "wrapper.py"
SPEC_KEY = "run.json"
STDIN_KEY = "stdin"
_READ_ONLY_MODE = 0o444
_TAR_BYTES_PER_FILE = 3 * 512 + 1024
_LOG_SLACK_BYTES = 64 * 1024
_LOG_TAIL_CHARS = 500
_WAITING_FAILURES = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
_WRAPPER_SOURCE = (Path(__file__).parent / "pod_wrapper.py").read_bytes()


@dataclass
class _Report:
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    duration: float | None = None
    sections: dict[str, tuple[bool, bytes]] = field(default_factory=dict)


class PodSandbox:
    """Runs skill scripts one pod each; one instance per service, shared by concurrent calls."""

    def __init__(
        self, limits: SandboxLimits | None = None, settings: PodSandboxSettings | None = None
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.settings = settings or PodSandboxSettings()
        if not self.settings.token_path.is_file():
            raise SandboxError(
                SandboxErrorCode.UNAVAILABLE,
                f"no Kubernetes API token at {self.settings.token_path} (pod_sandbox.token_path)",
            )
        self.limits = self._fitted_to_log(self.limits)
        self._slots = asyncio.Semaphore(self.limits.max_concurrent_runs)

    def _fitted_to_log(self, limits: SandboxLimits) -> SandboxLimits:
        """``limits`` with the outputs' cap lowered until the report fits in one container log."""
        room = self.settings.max_log_bytes
        if self._log_limit_bytes(limits) <= room:
            return limits
        fixed = self._log_limit_bytes(limits.model_copy(update={"max_output_bytes": 0}))
        fitting = int((room - fixed) * 3 / 4 / 1.01)
        if fitting <= 0:
            raise SandboxError(
                SandboxErrorCode.UNAVAILABLE,
                f"stdout and stderr caps alone need {fixed} bytes of container log; "
                f"pod_sandbox.max_log_bytes is {room}",
            )
        return limits.model_copy(update={"max_output_bytes": fitting})

    @property
    def protections(self) -> tuple[str, ...]:
        return ("pod-per-run", f"runtime-class-{self.settings.runtime_class}", "rlimits", "no-network")

    async def run_script(self, request: SandboxRequest) -> SandboxResult:
        command, env = check_request(request, self.limits)
        wall_time = self.limits.wall_time_seconds
        if request.wall_time_seconds is not None:
            wall_time = min(wall_time, request.wall_time_seconds)
        name = f"ks-skill-run-{secrets.token_hex(6)}"
        nonce = secrets.token_hex(16)
        config_map, skill_items, input_items = self._config_map(name, request, command, env, wall_time, nonce)
        async with self._slots:
            with _tracer.start_as_current_span("toolrunner.sandbox.pod_run") as span:
                span.set_attribute(K8S_NAMESPACE, self.settings.namespace)
                span.set_attribute(K8S_POD_NAME, name)
                try:
                    return await self._run(name, config_map, skill_items, input_items, wall_time, nonce)
                except SandboxError as error:
                    span.set_status(Status(StatusCode.ERROR, str(error)))
                    span.set_attribute(attributes.ERROR_CODE, error.code.value)
                    raise

    async def _run(
        self,
        name: str,
        config_map: dict[str, Any],
        skill_items: list[dict[str, str]],
        input_items: list[dict[str, str]],
        wall_time: float,
        nonce: str,
    ) -> SandboxResult:
        namespace = f"/api/v1/namespaces/{self.settings.namespace}"
        pod_path = f"{namespace}/pods/{name}"
        try:
            async with KubernetesApi(self.settings) as api:
                try:
                    started = time.monotonic()
                    with _tracer.start_as_current_span("toolrunner.sandbox.pod_create"):
                        template = await api.get(f"{namespace}/podtemplates/{self.settings.pod_template}")
                        pod = self._pod(name, template, skill_items, input_items, wall_time)
                        await api.create(f"{namespace}/configmaps", config_map)
                        await api.create(f"{namespace}/pods", pod)
                    with _tracer.start_as_current_span("toolrunner.sandbox.pod_wait"):
                        finished = await self._wait(api, pod_path, wall_time)
                    observed = time.monotonic() - started
                    if finished is None:
                        return self._timed_out(observed)
                    with _tracer.start_as_current_span("toolrunner.sandbox.pod_collect"):
                        return await self._collect(api, pod_path, finished, nonce, observed)
                finally:
                    cleanup = asyncio.ensure_future(self._delete(api, namespace, name))
                    try:
                        await asyncio.shield(cleanup)
                    except asyncio.CancelledError:
                        await cleanup
                        raise
        except KubernetesApiError as error:
            raise SandboxError(SandboxErrorCode.UNAVAILABLE, f"the run's pod failed: {error}") from error

    def _config_map(
        self,
        name: str,
        request: SandboxRequest,
        command: list[str],
        env: dict[str, str],
        wall_time: float,
        nonce: str,
    ) -> tuple[dict[str, Any], list[dict[str, str]], list[dict[str, str]]]:
        """The run's ConfigMap and the items that place its keys in /skill and /workspace/input; refuses a
        run larger than one ConfigMap may be."""
        limits = self.limits
        spec = {
            "command": command,
            "env": env,
            "cwd": WORKSPACE,
            "stdin": f"{SANDBOX_DIR}/{STDIN_KEY}",
            "input_dir": INPUT_DIR,
            "output_dir": OUTPUT_DIR,
            "wall_time_seconds": wall_time,
            "rlimits": [
                ["RLIMIT_AS", limits.memory_bytes, limits.memory_bytes],
                ["RLIMIT_CPU", limits.cpu_seconds, limits.cpu_seconds + 1],
                ["RLIMIT_NPROC", limits.max_processes, limits.max_processes],
                ["RLIMIT_FSIZE", limits.max_file_bytes, limits.max_file_bytes],
                ["RLIMIT_NOFILE", limits.max_open_files, limits.max_open_files],
                ["RLIMIT_CORE", 0, 0],
            ],
            "max_stdout_bytes": limits.max_stdout_bytes,
            "max_stderr_bytes": limits.max_stderr_bytes,
            "max_output_bytes": limits.max_output_bytes,
            "max_output_files": limits.max_output_files,
            "nonce": nonce,
        }
        data = {WRAPPER_KEY: _WRAPPER_SOURCE, SPEC_KEY: json.dumps(spec).encode(), STDIN_KEY: request.stdin}
        skill_items: list[dict[str, str]] = []
        input_items: list[dict[str, str]] = []
        for prefix, files, items in (
            ("skill", request.skill_files, skill_items),
            ("input", request.inputs, input_items),
        ):
            for index, path in enumerate(sorted(files)):
                key = f"{prefix}-{index}"
                data[key] = files[path]
                items.append({"key": key, "path": str(safe_relative_path(path, f"{prefix}s"))})
        size = sum(len(key) + len(value) for key, value in data.items())
        if size > self.settings.max_config_map_bytes:
            raise SandboxError(
                SandboxErrorCode.INVALID_REQUEST,
                f"inputs: the script, skill files, inputs and stdin come to {size} bytes, over the limit of "
                f"{self.settings.max_config_map_bytes} bytes of one run's ConfigMap "
                "(pod_sandbox.max_config_map_bytes)",
                field="inputs",
            )
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": self.settings.namespace, "labels": self._labels(name)},
            "immutable": True,
            "binaryData": {key: base64.b64encode(value).decode() for key, value in data.items()},
        }
        return body, skill_items, input_items

    def _labels(self, name: str) -> dict[str, str]:
        return {
            "app.kubernetes.io/part-of": "knowsphere",
            "app.kubernetes.io/component": "skill-run",
            "app.kubernetes.io/managed-by": "knowsphere-toolrunner",
            RUN_LABEL: name,
        }

    def _pod(
        self,
        name: str,
        template: dict[str, Any],
        skill_items: list[dict[str, str]],
        input_items: list[dict[str, str]],
        wall_time: float,
    ) -> dict[str, Any]:
        """The run's pod: the template's, with every isolation and limit set here."""
        settings, limits = self.settings, self.limits
        body = copy.deepcopy(template.get("template") or {})
        spec: dict[str, Any] = body.get("spec") or {}
        containers = [c for c in spec.get("containers", []) if c.get("name") == settings.container]
        if not containers:
            raise SandboxError(
                SandboxErrorCode.UNAVAILABLE,
                f"the PodTemplate {settings.pod_template} has no container {settings.container!r}",
            )
        container = containers[0]
        for key in ("initContainers", "ephemeralContainers", "serviceAccountName", "nodeName"):
            spec.pop(key, None)
        spec.update(
            containers=[container],
            runtimeClassName=settings.runtime_class,
            restartPolicy="Never",
            activeDeadlineSeconds=max(1, math.ceil(wall_time)),
            automountServiceAccountToken=False,
            enableServiceLinks=False,
            hostNetwork=False,
            hostPID=False,
            hostIPC=False,
            shareProcessNamespace=False,
        )
        security = spec.setdefault("securityContext", {})
        security["runAsNonRoot"] = True
        if not security.get("runAsUser"):
            security["runAsUser"] = 65534
        security.setdefault("runAsGroup", security["runAsUser"])
        security.setdefault("seccompProfile", {"type": "RuntimeDefault"})
        container.update(
            command=[
                limits.python_executable,
                "-I",
                "-S",
                "-B",
                f"{SANDBOX_DIR}/{WRAPPER_KEY}",
                f"{SANDBOX_DIR}/{SPEC_KEY}",
            ],
            workingDir=WORKSPACE,
            stdin=False,
            stdinOnce=False,
            tty=False,
            securityContext={
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "privileged": False,
                "runAsNonRoot": True,
                "capabilities": {"drop": ["ALL"]},
            },
        )
        container.pop("args", None)
        resources = container.setdefault("resources", {})
        resources.setdefault("limits", {})
        resources["limits"]["memory"] = str(limits.max_run_memory_bytes)
        resources["limits"].setdefault("cpu", settings.cpu_limit)
        config_map: dict[str, Any] = {"name": name, "defaultMode": _READ_ONLY_MODE}
        ours: dict[str, tuple[dict[str, Any], str]] = {
            "workspace": (
                {"emptyDir": {"medium": "Memory", "sizeLimit": str(limits.workspace_bytes)}},
                WORKSPACE,
            ),
            "tmp": ({"emptyDir": {"medium": "Memory", "sizeLimit": str(limits.tmp_bytes)}}, "/tmp"),
            "sandbox": (
                {
                    "configMap": {
                        **config_map,
                        "items": [{"key": k, "path": k} for k in (WRAPPER_KEY, SPEC_KEY, STDIN_KEY)],
                    }
                },
                SANDBOX_DIR,
            ),
            "skill": ({"configMap": {**config_map, "items": skill_items}}, SKILL_ROOT),
        }
        if input_items:
            ours["input"] = ({"configMap": {**config_map, "items": input_items}}, INPUT_DIR)
        paths = {path for _, path in ours.values()}
        spec["volumes"] = [v for v in spec.get("volumes", []) if v.get("name") not in ours] + [
            {"name": volume, **source} for volume, (source, _) in ours.items()
        ]
        container["volumeMounts"] = [
            m
            for m in container.get("volumeMounts", [])
            if m.get("name") not in ours and m.get("mountPath") not in paths
        ] + [
            {"name": volume, "mountPath": path, "readOnly": volume not in ("workspace", "tmp")}
            for volume, (_, path) in ours.items()
        ]
        metadata = body.setdefault("metadata", {})
        metadata.pop("generateName", None)
        metadata.update(name=name, namespace=settings.namespace)
        metadata["labels"] = {**metadata.get("labels", {}), **self._labels(name)}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    async def _wait(self, api: KubernetesApi, pod_path: str, wall_time: float) -> dict[str, Any] | None:
        """The pod once it has ended; None when it ran past its time without ending."""
        deadline = time.monotonic() + wall_time + self.settings.start_timeout_seconds
        running = False
        while True:
            pod = await api.get(pod_path)
            status = pod.get("status") or {}
            phase = status.get("phase", "Pending")
            if phase in ("Succeeded", "Failed"):
                return pod
            running = running or phase == "Running"
            for container in status.get("containerStatuses") or []:
                waiting = (container.get("state") or {}).get("waiting") or {}
                if waiting.get("reason") in _WAITING_FAILURES:
                    reason = f"{waiting['reason']} {waiting.get('message', '')}".strip()
                    raise SandboxError(SandboxErrorCode.UNAVAILABLE, f"the run's pod cannot start: {reason}")
            if time.monotonic() >= deadline:
                if running:
                    return None
                raise SandboxError(
                    SandboxErrorCode.UNAVAILABLE,
                    f"the run's pod did not start within {self.settings.start_timeout_seconds:g} s "
                    f"(pod_sandbox.start_timeout_seconds); it is {phase}",
                )
            await asyncio.sleep(self.settings.poll_interval_seconds)

    async def _collect(
        self, api: KubernetesApi, pod_path: str, pod: dict[str, Any], nonce: str, observed: float
    ) -> SandboxResult:
        status = pod.get("status") or {}
        if status.get("reason") == "DeadlineExceeded":
            return self._timed_out(observed)
        terminated: dict[str, Any] = {}
        for container in status.get("containerStatuses") or []:
            if container.get("name") == self.settings.container:
                terminated = (container.get("state") or {}).get("terminated") or {}
        if terminated.get("reason") == "OOMKilled":
            return self._result(_Report(signal=signal.SIGKILL, duration=observed), memory_exceeded=True)
        text = await api.log(pod_path, self.settings.container, self._log_limit_bytes())
        report = _parse_report(text, nonce)
        if report is None:
            raise SandboxError(
                SandboxErrorCode.UNAVAILABLE,
                f"the run's pod ended without a report ({status.get('phase')}, "
                f"{terminated.get('reason', 'no reason')}): "
                + text.decode("utf-8", "replace").strip()[-_LOG_TAIL_CHARS:],
            )
        if report.duration is None:
            report.duration = observed
        return self._result(report)

    def _log_limit_bytes(self, limits: SandboxLimits | None = None) -> int:
        limits = limits or self.limits
        payload = (
            limits.max_stdout_bytes
            + limits.max_stderr_bytes
            + limits.max_output_bytes
            + (limits.max_output_files + 2) * _TAR_BYTES_PER_FILE
        )
        return math.ceil(payload * 4 / 3 * 1.01) + _LOG_SLACK_BYTES

    def _timed_out(self, duration: float) -> SandboxResult:
        return self._result(_Report(signal=signal.SIGKILL, timed_out=True, duration=duration))

    def _result(self, report: _Report, *, memory_exceeded: bool = False) -> SandboxResult:
        limits = self.limits
        stdout_cut, stdout = report.sections.get("stdout", (False, b""))
        stderr_cut, stderr = report.sections.get("stderr", (False, b""))
        outputs_cut, archive = report.sections.get("outputs", (False, b""))
        outputs: dict[str, bytes] = {}
        if not (report.timed_out or memory_exceeded) and archive:
            outputs, cut = _read_outputs(archive, limits.max_output_bytes, limits.max_output_files)
            outputs_cut = outputs_cut or cut
        return SandboxResult(
            exit_code=None if report.timed_out else report.exit_code,
            signal=signal.SIGKILL if report.timed_out else report.signal,
            timed_out=report.timed_out,
            stdout=stdout[: limits.max_stdout_bytes],
            stderr=stderr[: limits.max_stderr_bytes],
            stdout_truncated=stdout_cut or len(stdout) > limits.max_stdout_bytes,
            stderr_truncated=stderr_cut or len(stderr) > limits.max_stderr_bytes,
            outputs=outputs,
            outputs_truncated=outputs_cut,
            duration_seconds=report.duration or 0.0,
            memory_exceeded=memory_exceeded,
            protections=self.protections,
        )

    async def _delete(self, api: KubernetesApi, namespace: str, name: str) -> None:
        with _tracer.start_as_current_span("toolrunner.sandbox.pod_delete") as span:
            for kind in ("pods", "configmaps"):
                try:
                    await api.delete(f"{namespace}/{kind}/{name}")
                except KubernetesApiError as error:
                    span.set_status(Status(StatusCode.ERROR, str(error)))
                    log.warning("sandbox_pod_cleanup_failed", kind=kind, name=name, error=str(error))


def _parse_report(text: bytes, nonce: str) -> _Report | None:
    """The wrapper's report in the container's log (the last one with this run's nonce), or None."""
    lines = text.split(b"\n")
    begin = f"#ks-sandbox-report {nonce}".encode()
    starts = [i for i, line in enumerate(lines) if line.rstrip(b"\r") == begin]
    if not starts:
        return None
    report = _Report()
    current: str | None = None
    chunks: list[bytes] = []
    flags: dict[str, bool] = {}
    ended = False
    try:
        for raw in lines[starts[-1] + 1 :]:
            line = raw.rstrip(b"\r")
            if not line.startswith(b"#"):
                chunks.append(line)
                continue
            if current is not None:
                report.sections[current] = (flags[current], base64.b64decode(b"".join(chunks), validate=True))
            current, chunks = None, []
            words = line[1:].decode("ascii").split()
            if words[0] == "status":
                code, sig, timed_out, duration = words[1:5]
                report.exit_code = None if code == "-" else int(code)
                report.signal = None if sig == "-" else int(sig)
                report.timed_out = timed_out == "1"
                report.duration = float(duration)
            elif words[0] in ("stdout", "stderr", "outputs"):
                current = words[0]
                flags[current] = words[1] == "1"
            elif words == ["end", nonce]:
                ended = True
                break
            else:
                return None
    except (ValueError, IndexError, UnicodeDecodeError):
        return None
    return report if ended else None


def _read_outputs(archive: bytes, max_bytes: int, max_files: int) -> tuple[dict[str, bytes], bool]:
    """The regular files of the wrapper's tar, read in memory (nothing is extracted to disk); only
    relative, harmless names, within the output caps."""
    outputs: dict[str, bytes] = {}
    total, truncated = 0, False
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            for member in tar:
                if not member.isreg():
                    continue
                try:
                    path = str(safe_relative_path(member.name, "output"))
                except SandboxError:
                    continue
                if len(outputs) >= max_files or total + member.size > max_bytes:
                    truncated = True
                    continue
                content = tar.extractfile(member)
                if content is None:
                    continue
                outputs[path] = content.read(member.size)
                total += len(outputs[path])
    except tarfile.TarError:
        truncated = True
    return outputs, truncated
