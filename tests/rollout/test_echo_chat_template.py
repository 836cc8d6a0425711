"""make train-cpu's python-block template that echoes the printed value, on the real Qwen2.5 tokenizer."""

from __future__ import annotations

import pytest

from cleaner.models.model_assets import default_cache_dir
from cleaner.models.qwen25_tokenizer import load_qwen25_tokenizer
from cleaner.resources import PYTHON_BLOCK_CHAT_TEMPLATE, PYTHON_BLOCK_ECHO_CHAT_TEMPLATE, resource_path
from cleaner.verl.code_interpreter_tool import default_tool_schema

pytestmark = pytest.mark.real_model  # the Qwen2.5 tokenizer derived from the demo GGUF

ECHO = resource_path(PYTHON_BLOCK_ECHO_CHAT_TEMPLATE).read_text(encoding="utf-8")
DEMO = resource_path(PYTHON_BLOCK_CHAT_TEMPLATE).read_text(encoding="utf-8")
QUESTION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 2**20? Reply with one ```python code block."},
]
CODE = {"role": "assistant", "content": "```python\nprint(2**20)\n```"}
SUCCESS = "Tool call success\nstdout: 1048576\n\nstderr: "
FAILURE = "Tool call failure\nreason: \nstdout: \nstderr: NameError at line 1: name 'x' is not defined"


@pytest.fixture(scope="module")
def tokenizer(gguf):
    return load_qwen25_tokenizer(gguf, default_cache_dir())


def render(tokenizer, messages: list[dict], template: str) -> str:
    tools = [default_tool_schema().model_dump(exclude_unset=True, exclude_none=True)]
    return tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=False, chat_template=template
    )


def test_everything_but_the_line_after_a_successful_run_is_the_demo_template(tokenizer):
    for messages in (QUESTION, [*QUESTION, CODE, {"role": "tool", "content": FAILURE}]):
        assert render(tokenizer, messages, ECHO) == render(tokenizer, messages, DEMO)


def test_the_line_after_a_successful_run_repeats_the_last_printed_line(tokenizer):
    def after_success(tool_text: str) -> str:
        return render(tokenizer, [*QUESTION, CODE, {"role": "tool", "content": tool_text}], ECHO)

    assert after_success(SUCCESS).endswith(
        f"<tool_response>\n{SUCCESS}\n</tool_response>\n"
        "Your code printed 1048576. Now write the final answer inside \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    )
    several_lines = after_success("Tool call success\nstdout: step 1\n  42  \n\nstderr: warning")
    assert "\nYour code printed 42. Now write" in several_lines
    # Nothing printed: the demo template's line (there is nothing to echo).
    silent = after_success("Tool call success\nstdout: \nstderr: ")
    assert silent.endswith(
        "\nYour code ran. Now write the final answer inside \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_the_one_line_hydra_value_renders_the_same(tokenizer):
    """recipe/cleaner/train_cpu.sh passes the file named by CHAT_TEMPLATE with its newlines made spaces, in single quotes."""
    one_line = ECHO.rstrip("\n").replace("\n", " ")
    assert "'" not in ECHO
    for tool_text in (SUCCESS, FAILURE):
        messages = [*QUESTION, CODE, {"role": "tool", "content": tool_text}, {"role": "assistant", "content": "x"}]
        assert render(tokenizer, messages, one_line) == render(tokenizer, messages, ECHO)
