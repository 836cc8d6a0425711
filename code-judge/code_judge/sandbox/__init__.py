"""Run untrusted Python in a warm, bubblewrap-isolated interpreter with limits the program cannot lift."""

from .config import SandboxConfig
from .errors import SandboxCrashed, SandboxError, SandboxUnavailable
from .launcher import check_sandbox_support
from .sandbox import Sandbox

__all__ = [
    "Sandbox",
    "SandboxConfig",
    "SandboxCrashed",
    "SandboxError",
    "SandboxUnavailable",
    "check_sandbox_support",
]
