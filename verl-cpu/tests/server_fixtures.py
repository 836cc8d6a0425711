"""What the rollout server reads of verl's configs, for tests that build a server without verl's trainer."""

from __future__ import annotations


class RolloutConfig:
    """The fields of verl's rollout config the server reads; keywords become `engine_kwargs.cpu`."""

    prompt_length = 64
    seed = 0

    def __init__(self, response_length: int = 8, max_new_tokens: int = 6, dtype: str = "float32", **engine_options):
        self.dtype = dtype
        self.response_length = response_length
        self.engine_kwargs = {"cpu": {"max_new_tokens": max_new_tokens, **engine_options}}


class ModelConfig:
    def __init__(self, path, tokenizer):
        self.local_path = str(path)
        self.tokenizer = tokenizer


GREEDY = {"temperature": 0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}
SAMPLED = {**GREEDY, "temperature": 1.0}
