"""Test support for verl's agent-loop workers built in-process (no Ray): the model directory verl's
`HFModelConfig` reads, and the plain-object client in front of the scripted server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.scripted_llm import ScriptedLLMServer


def write_model_dir(path: Path, tokenizer) -> Path:
    """What HFModelConfig needs from `actor_rollout_ref.model.path`: tokenizer files and a one-architecture config."""
    from transformers import Qwen3Config

    tokenizer.save_pretrained(path)
    Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        architectures=["Qwen3ForCausalLM"],
    ).save_pretrained(path)
    return path


class LLMClient:
    """Plain-object front for the scripted server, like verl's real client.

    The worker passes its client through `hydra.utils.instantiate(..., server_manager=client)`, which would
    try to turn a dataclass (ScriptedLLMServer is one) into config nodes.
    """

    def __init__(self, server: ScriptedLLMServer):
        self.server = server

    async def generate(self, request_id: str, **kwargs: Any):
        return await self.server.generate(request_id, **kwargs)
