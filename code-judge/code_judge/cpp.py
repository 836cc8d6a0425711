"""C++ submissions: compiled with g++ in one sandboxed run, the binary executed in a second one.

Both steps are ordinary sandbox runs (same isolation, rlimits, reaping), each driven by a small Python program:

1. The compile run gets the C++ source on stdin, runs `g++ -O2` on it (upstream's command) and writes the
   binary, base64-encoded, to stdout. Its limits are the compile limits: wall and CPU time `compile_time_s`
   (upstream compiles under MAX_EXECUTION_TIME too), address space `compile_memory_bytes` (cc1plus needs far more
   than a program's budget), output large enough for the binary.
2. The execute run writes the binary into its fresh work dir, lowers its address-space limit to the program's
   memory budget plus `runtime_headroom_bytes` (libc and libstdc++ mappings; never above the sandbox's own
   limit, which it cannot raise), and execs it with the user's stdin,
   under the run's own limits. So CPU, wall-clock, memory, process and output limits are those of a Python
   program, and the cost is the run's alone (upstream also leaves the compile out of `cost`).

A failed or overlong compile never runs anything: it is answered like upstream's compile error, `run_success`
false with reason "" and the compiler's messages in stderr, plus `exception_type` "CompileError". An uncaught
`std::bad_alloc` (the program ran out of its memory budget) is reported as the memory limit, like Python's
MemoryError.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, replace

from code_judge.execution import ExecutionResult, LimitHit, Limits, SandboxLike

COMPILE_ERROR = "CompileError"
_BAD_ALLOC = "std::bad_alloc"

# Reads the C++ source from stdin; prints the base64 binary, or the compiler's messages to stderr and exits 1.
_COMPILE_DRIVER = """\
import base64, subprocess, sys
with open("solution.cpp", "wb") as source:
    source.write(sys.stdin.buffer.read())
try:
    done = subprocess.run({command!r}, stdin=subprocess.DEVNULL, capture_output=True, timeout={timeout!r})
except subprocess.TimeoutExpired:
    sys.stderr.write("compilation did not finish within {timeout:g} s\\n")
    sys.exit(1)
if done.returncode != 0:
    sys.stderr.buffer.write(done.stderr or done.stdout)
    sys.exit(1)
with open("solution", "rb") as binary:
    sys.stdout.write(base64.b64encode(binary.read()).decode())
"""

# Writes the binary and becomes it: stdin, stdout and stderr are the run's own descriptors.
_EXECUTE_DRIVER = """\
import base64, os, resource
with open("solution", "wb") as binary:
    binary.write(base64.b64decode({binary!r}))
os.chmod("solution", 0o500)
limit = min({address_space}, resource.getrlimit(resource.RLIMIT_AS)[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
os.execv("./solution", ["./solution"])
"""


@dataclass(frozen=True)
class CppConfig:
    compiler: str = "/usr/bin/g++"
    compile_time_s: float = 10.0
    compile_memory_bytes: int = 1024 * 1024 * 1024
    max_binary_bytes: int = 16 * 1024 * 1024
    runtime_headroom_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if not self.compiler.startswith("/"):
            raise ValueError(f"the C++ compiler must be an absolute path, got {self.compiler!r}")
        for name in ("compile_time_s", "compile_memory_bytes", "max_binary_bytes", "runtime_headroom_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"CppConfig.{name} must be positive, got {getattr(self, name)!r}")


def compile_command(config: CppConfig) -> list[str]:
    return [config.compiler, "-O2", "-o", "solution", "solution.cpp"]


def run_cpp(
    sandbox: SandboxLike,
    config: CppConfig,
    source: str,
    stdin: str,
    limits: Limits,
    on_long: Callable[[], object] | None = None,
) -> ExecutionResult:
    """Compile `source`, then run the binary on `stdin` within `limits`; a compile failure is the result."""
    compile_limits = replace(
        limits,
        wall_time_s=config.compile_time_s,
        cpu_time_s=config.compile_time_s,
        memory_bytes=config.compile_memory_bytes,
        # base64 grows the binary by a third; the cap must never cut it.
        max_output_bytes=config.max_binary_bytes * 4 // 3 + 4,
        max_file_size_bytes=config.max_binary_bytes,
    )
    driver = _COMPILE_DRIVER.format(command=compile_command(config), timeout=config.compile_time_s)
    compiled = sandbox.run(driver, source, compile_limits, on_long=on_long)
    if not compiled.run_success or compiled.stdout_truncated:
        return _compile_failure(compiled)
    address_space = limits.memory_bytes + config.runtime_headroom_bytes
    driver = _EXECUTE_DRIVER.format(binary=compiled.stdout, address_space=address_space)
    result = sandbox.run(driver, stdin, limits, on_long=on_long)
    if result.limit_hit is None and result.signal == signal.SIGABRT and _BAD_ALLOC in result.stderr:
        # The C++ counterpart of Python's uncaught MemoryError (which the sandbox reports as the memory limit).
        return replace(result, limit_hit=LimitHit.MEMORY, exception_type=_BAD_ALLOC)
    return result


def _compile_failure(compiled: ExecutionResult) -> ExecutionResult:
    message = compiled.stderr
    if compiled.limit_hit is not None and compiled.limit_hit is not LimitHit.OUTPUT:
        message += f"\ncompilation stopped by the sandbox's {compiled.limit_hit.value} limit"
    elif compiled.stdout_truncated:
        message += "\nthe compiled binary exceeds the size limit"
    first_line = next((line for line in message.splitlines() if "error" in line), message.strip()[:200])
    return ExecutionResult(
        exit_code=compiled.exit_code if compiled.exit_code else 1,
        signal=None,
        stdout="",
        stderr=message,
        stdout_truncated=False,
        stderr_truncated=compiled.stderr_truncated,
        cost_s=0.0,  # upstream answers a compile error with cost 0: nothing ran
        limit_hit=None,
        exception_type=COMPILE_ERROR,
        exception_message=first_line[:1000],
    )
