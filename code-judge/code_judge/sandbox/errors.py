"""Infrastructure failures of the sandbox itself; a program's own behaviour never raises these."""


class SandboxError(RuntimeError):
    """The sandbox could not run the program; the worker should answer `internal_error`."""


class SandboxUnavailable(SandboxError):
    """bubblewrap or user namespaces are unusable here; the message says why and names the insecure flag."""


class SandboxCrashed(SandboxError):
    """The warm interpreter died during a run; the next run starts a fresh one."""
