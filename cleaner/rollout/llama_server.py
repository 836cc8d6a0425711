"""A llama.cpp server (xllamacpp, CPU) for a GGUF model, run in its own process so it is always reaped.

`python -m cleaner.rollout.llama_server --model M.gguf --port N` serves llama.cpp's HTTP API (native
`/completion` with token-id prompts, `/tokenize`, `/apply-template`, `/props`, `/health`) until SIGTERM.
`LlamaServerProcess` starts that process, waits for `/health`, and stops it on exit.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LlamaServerConfig:
    model_path: Path
    port: int
    host: str = "127.0.0.1"
    n_ctx: int = 4096  # shared by the parallel slots
    n_parallel: int = 2
    # One thread per model call: with other load on the cores, llama.cpp threads stall at a barrier.
    n_threads: int = 1
    startup_timeout_s: float = 120.0


def serve_forever(config: LlamaServerConfig) -> None:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(config.model_path)
    params.n_ctx = config.n_ctx
    params.n_parallel = config.n_parallel
    params.cpuparams.n_threads = config.n_threads
    params.cpuparams_batch.n_threads = config.n_threads
    params.port = config.port
    params.hostnames = [config.host]
    # Keep <|im_end|> and <tool_call> in returned text; token ids are returned either way.
    params.special = True
    params.warmup = False
    server = xllamacpp.Server(params)
    logger.info("llama.cpp server for %s listening on %s", config.model_path, server.listening_address)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()


def _die_with_parent() -> None:
    """In the child before exec (Linux): get SIGTERM when the parent dies, so a killed run leaves no server."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class LlamaServerProcess:
    """Context manager: a `serve_forever` subprocess, ready (healthy) on enter, terminated on exit."""

    def __init__(self, config: LlamaServerConfig, log_path: Path | None = None):
        self.config = config
        self.log_path = log_path
        self.url = f"http://{config.host}:{config.port}"
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> LlamaServerProcess:
        cmd = [
            sys.executable, "-m", "cleaner.rollout.llama_server",
            "--model", str(self.config.model_path), "--host", self.config.host, "--port", str(self.config.port),
            "--n-ctx", str(self.config.n_ctx), "--n-parallel", str(self.config.n_parallel),
            "--threads", str(self.config.n_threads),
        ]  # fmt: skip
        log = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL
        try:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        finally:
            if self.log_path:
                log.close()
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {self._proc.returncode} (log: {self.log_path})")
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(
            f"llama.cpp server not healthy after {self.config.startup_timeout_s} s (log: {self.log_path})"
        )

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server has used so far: model compute, insensitive to other load."""
        if self._proc is None:
            raise RuntimeError("the llama.cpp server is not running")
        fields = Path(f"/proc/{self._proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5), after pid and comm
        return (utime + stime) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a GGUF model with llama.cpp (xllamacpp) on CPU.")
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", required=True, type=int)
    parser.add_argument("--n-ctx", type=int, default=LlamaServerConfig.n_ctx)
    parser.add_argument("--n-parallel", type=int, default=LlamaServerConfig.n_parallel)
    parser.add_argument("--threads", type=int, default=LlamaServerConfig.n_threads)
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"))
    if not args.model.is_file():
        parser.error(f"GGUF model file not found: {args.model}")
    serve_forever(LlamaServerConfig(args.model, args.port, args.host, args.n_ctx, args.n_parallel, args.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
