"""Settings of an inference-server client (kept free of verl imports so the CLI parser loads fast)."""

from __future__ import annotations

from dataclasses import dataclass

BACKENDS = ("sglang", "vllm", "llamacpp")


@dataclass(frozen=True)
class ServerClientConfig:
    backend: str  # one of BACKENDS
    url: str
    # Cap per call; verl sends no max_tokens, so the context budget below bounds each turn.
    max_new_tokens: int = 512
    max_model_len: int = 4096  # prompt + everything generated must fit (prompt_length + response_length)
    request_timeout_s: float = 300.0
    # Base seed when sampling_params has no "seed"; None lets the server pick (not reproducible).
    seed: int | None = None
    model: str = "default"  # vLLM's served model name
    max_connections: int = 32

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown inference backend {self.backend!r}; expected one of {', '.join(BACKENDS)}")
        if self.max_new_tokens <= 0 or self.max_model_len <= 0:
            raise ValueError("max_new_tokens and max_model_len must be positive")
