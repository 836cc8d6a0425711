"""The demo's python-block chat template on the real Qwen2.5 tokenizer and verl's real Qwen token builder."""

from __future__ import annotations

import argparse

import pytest
from verl.utils.tokenizer.continuous_token import QwenContinuousTokenBuilder

from cleaner.models.model_assets import default_cache_dir
from cleaner.models.qwen25_tokenizer import load_qwen25_tokenizer
from cleaner.resources import PYTHON_BLOCK_CHAT_TEMPLATE, resource_path
from cleaner.rollout.chat_template import use_chat_template
from cleaner.rollout.cli import load_tokenizer
from cleaner.verl.code_interpreter_tool import default_tool_schema

pytestmark = pytest.mark.real_model  # the Qwen2.5 tokenizer derived from the demo GGUF

TEMPLATE = resource_path(PYTHON_BLOCK_CHAT_TEMPLATE)
SUCCESS_LINE = "Your code ran. Now write the final answer inside \\boxed{}."
FAILURE_LINE = "Your code failed. Write the whole corrected ```python block."
QUESTION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 2**20? Reply with one ```python code block."},
]


@pytest.fixture(scope="module")
def model_tokenizer(gguf):
    """The Qwen2.5 tokenizer with the model's own (GGUF) chat template."""
    return load_qwen25_tokenizer(gguf, default_cache_dir())


@pytest.fixture(scope="module")
def demo_tokenizer(gguf):
    return use_chat_template(load_qwen25_tokenizer(gguf, default_cache_dir()), TEMPLATE)


def tools() -> list[dict]:
    return [default_tool_schema().model_dump(exclude_unset=True, exclude_none=True)]


def test_first_prompt_is_the_models_own_format_without_the_tool_schema(model_tokenizer, demo_tokenizer):
    demo = demo_tokenizer.apply_chat_template(QUESTION, tools=tools(), add_generation_prompt=True, tokenize=False)
    own = model_tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    assert demo == own
    assert "<tools>" not in demo and "<tool_call>" not in demo


def test_tool_results_are_followed_by_the_next_step(demo_tokenizer):
    def render(tool_text: str) -> str:
        messages = [
            *QUESTION,
            {"role": "assistant", "content": "```python\nprint(2**20)\n```"},
            {"role": "tool", "content": tool_text},
        ]
        return demo_tokenizer.apply_chat_template(messages, tools=tools(), add_generation_prompt=True, tokenize=False)

    ok = render("Tool call success\nstdout: 1048576\n\nstderr: ")
    assert ok.endswith(
        "<|im_start|>user\n<tool_response>\nTool call success\nstdout: 1048576\n\nstderr: \n</tool_response>\n"
        f"{SUCCESS_LINE}<|im_end|>\n<|im_start|>assistant\n"
    )
    failed = render("Tool call failure\nreason: \nstdout: \nstderr: NameError at line 1: name 'x' is not defined")
    assert failed.endswith(f"</tool_response>\n{FAILURE_LINE}<|im_end|>\n<|im_start|>assistant\n")
    assert SUCCESS_LINE not in failed


def test_verl_token_builder_appends_tool_turns_consistently(demo_tokenizer):
    """verl's agent loop appends each tool turn as a suffix diff: it must equal a full render of the conversation."""
    builder = QwenContinuousTokenBuilder(demo_tokenizer)
    assistant = "```python\nprint(2**20)\n```"
    before = [*QUESTION, {"role": "assistant", "content": assistant}]
    after = [*before, {"role": "tool", "content": "Tool call success\nstdout: 1048576\n\nstderr: "}]
    prompt = builder.build_initial_tokens(QUESTION, tools=tools())
    generated = demo_tokenizer.encode(assistant, add_special_tokens=False) + [
        demo_tokenizer.convert_tokens_to_ids("<|im_end|>")
    ]
    stream = builder.merge_assistant_tokens(prompt, generated).token_ids
    merged = builder.merge_context_tokens(before, after, stream, tools=tools()).token_ids
    full = demo_tokenizer.apply_chat_template(
        after, tools=tools(), add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert merged == list(full)


def test_rollout_cli_applies_the_chat_template(gguf):
    args = argparse.Namespace(gguf=gguf, tokenizer=None, chat_template=TEMPLATE)
    assert load_tokenizer(args).chat_template == TEMPLATE.read_text(encoding="utf-8")


def test_bad_templates_are_refused_with_the_file_named(model_tokenizer, tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.jinja"):
        use_chat_template(model_tokenizer, tmp_path / "missing.jinja")
    empty = tmp_path / "empty.jinja"
    empty.write_text("  \n")
    with pytest.raises(ValueError, match="empty.jinja is empty"):
        use_chat_template(model_tokenizer, empty)
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for message in messages %}{{ message.role }")
    with pytest.raises(ValueError, match="broken.jinja does not render"):
        use_chat_template(model_tokenizer, broken)
    assert model_tokenizer.chat_template != broken.read_text()
