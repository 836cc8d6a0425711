"""A tiny random Qwen2 model with a byte-level tokenizer and a ChatML chat template, built from nothing.

The verl-cpu tests exercise the code path around a causal LM (verl's model config, FSDP, weight sync, batched
decoding, prompt log-probs), not a vocabulary: every byte is a token (no merges, so any text encodes), plus the
three ChatML special tokens. Nothing is downloaded and nothing outside this package and its dependencies is needed.
"""

from __future__ import annotations

from pathlib import Path

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_model(out_dir: Path, seed: int = 0) -> Path:
    """Write the tokenizer and the model (weights from `seed`) into `out_dir` and return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={symbol: index for index, symbol in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=IM_END, pad_token=PAD)
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START]})
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(out_dir)

    pad_id, eos_id = tokenizer.convert_tokens_to_ids([PAD, IM_END])
    config = Qwen2Config(
        vocab_size=len(tokenizer),  # any sampled id decodes
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        architectures=["Qwen2ForCausalLM"],
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    model.save_pretrained(out_dir)
    return Path(out_dir)
