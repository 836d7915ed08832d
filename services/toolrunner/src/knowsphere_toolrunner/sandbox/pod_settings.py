"""Settings of the production sandbox: one pod per run on a gVisor RuntimeClass.

The service's ``Settings`` nests it (``pod_sandbox: PodSandboxSettings``), so each value is an
environment variable such as ``KS_TOOLRUNNER_POD_SANDBOX__NAMESPACE``. The run's own limits (time,
memory, output caps …) stay those of ``SandboxLimits``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

MIB = 1024 * 1024
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class PodSandboxSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    # Where and how to reach the Kubernetes API (in-cluster service account by default).
    api_url: str = Field(
        default="https://kubernetes.default.svc", description="base URL of the Kubernetes API server"
    )
    token_path: Path = Field(
        default=SERVICE_ACCOUNT_DIR / "token", description="bearer token file (re-read for every run)"
    )
    ca_path: Path = Field(
        default=SERVICE_ACCOUNT_DIR / "ca.crt", description="CA bundle that signs the API server (https)"
    )
    request_timeout_seconds: float = Field(default=10.0, gt=0, description="time limit of one API request")
    # The component's objects (deploy/k8s/components/sandbox-gvisor).
    namespace: str = Field(default="knowsphere-sandbox", min_length=1, description="namespace of the runs")
    pod_template: str = Field(default="skill-run", min_length=1, description="PodTemplate a run's pod copies")
    container: str = Field(default="run", min_length=1, description="the template's container that runs")
    runtime_class: str = Field(default="gvisor", min_length=1, description="RuntimeClass of every run's pod")
    # Sizes and times.
    max_config_map_bytes: int = Field(
        default=1 * MIB,
        gt=0,
        description="Kubernetes' limit on one ConfigMap: script, skill files, inputs and stdin together",
    )
    max_log_bytes: int = Field(
        default=10 * MIB,
        gt=0,
        description="the kubelet's containerLogMaxSize: a run's whole report (stdout, stderr, base64 "
        "outputs) travels in its container log, so the outputs are capped to fit",
    )
    start_timeout_seconds: float = Field(
        default=60.0, gt=0, description="time for a pod to be scheduled and started, beyond its run time"
    )
    poll_interval_seconds: float = Field(default=0.5, gt=0, description="how often a run's pod is looked at")
    cpu_limit: str = Field(default="1", min_length=1, description="CPU limit when the template sets none")
