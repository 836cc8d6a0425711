"""The lenient tool-call parser and its token boundary, with the real Qwen3 tokenizer."""

from __future__ import annotations

import json

import pytest
from verl.experimental.agent_loop.tool_parser import ToolParser

from cleaner.tools.call_parsing import locate_calls
from cleaner.verl.tool_parser import LenientJsonToolParser, LenientToolParser

CALL = {"name": "code_interpreter", "arguments": {"code": "print(sum(range(10)))"}}
CALL_JSON = json.dumps(CALL)


@pytest.fixture(scope="module")
def parser(qwen3_tokenizer):
    return ToolParser.get_tool_parser("cleaner_lenient", qwen3_tokenizer)


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def split_at_boundary(parser, tokenizer, text: str) -> tuple[str, str]:
    ids = encode(tokenizer, text)
    boundary = parser.find_call_start(ids)
    assert boundary is not None
    return tokenizer.decode(ids[:boundary]), tokenizer.decode(ids[boundary:])


@pytest.mark.parametrize(
    ("prefix", "call_text"),
    [
        ("Let me compute.\n", f"<tool_call>\n{CALL_JSON}\n</tool_call>"),
        ("Let me compute.\n", f"```json\n{CALL_JSON}\n```"),
        ("Let me compute.\n", CALL_JSON),
        ("Let me compute.\n", "```python\nprint(sum(range(10)))\n```"),
        (
            "<think>I could write <tool_call> or ```python\nx\n``` here.</think>\n",
            f"<tool_call>\n{CALL_JSON}\n</tool_call>",
        ),
    ],
    ids=["tags", "json-fence", "bare-json", "python-block", "mention-in-reasoning"],
)
async def test_each_form_parses_and_splits_at_the_call(parser, qwen3_tokenizer, prefix, call_text):
    text = prefix + call_text + "<|im_end|>"
    content, calls = await parser.extract_tool_calls(encode(qwen3_tokenizer, text))
    code = "print(sum(range(10)))" + ("\n" if "```python" in call_text else "")
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("code_interpreter", {"code": code})]
    assert content == prefix + "<|im_end|>"
    before, after = split_at_boundary(parser, qwen3_tokenizer, text)
    assert before == prefix and after == call_text + "<|im_end|>"


async def test_forms_are_tried_in_priority_order(parser, qwen3_tokenizer):
    text = f"```python\nprint(1)\n```\n<tool_call>{CALL_JSON}</tool_call>"
    _, calls = await parser.extract_tool_calls(encode(qwen3_tokenizer, text))
    assert [json.loads(c.arguments)["code"] for c in calls] == ["print(sum(range(10)))"]


async def test_unclosed_python_block_at_the_end_is_a_call(parser, qwen3_tokenizer):
    _, calls = await parser.extract_tool_calls(encode(qwen3_tokenizer, "Compute:\n```python\nx = 2\nprint(x)"))
    assert json.loads(calls[0].arguments) == {"code": "x = 2\nprint(x)"}


async def test_json_parser_leaves_python_blocks_as_answers(qwen3_tokenizer):
    parser = ToolParser.get_tool_parser("cleaner_lenient_json", qwen3_tokenizer)
    assert isinstance(parser, LenientJsonToolParser)
    text = "Final answer:\n```python\ndef solve():\n    return 1\n```"
    content, calls = await parser.extract_tool_calls(encode(qwen3_tokenizer, text))
    assert calls == [] and content == text
    assert parser.find_call_start(encode(qwen3_tokenizer, text)) is None


async def test_no_call_and_broken_json(parser, qwen3_tokenizer):
    for text in ["The answer is \\boxed{45}.", '{"name": "code_interpreter", "arguments": {"code": "x}']:
        content, calls = await parser.extract_tool_calls(encode(qwen3_tokenizer, text))
        assert calls == [] and content == text
        assert parser.find_call_start(encode(qwen3_tokenizer, text)) is None


async def test_string_arguments_and_parameters_key_are_accepted(parser, qwen3_tokenizer):
    text = '{"name": "code_interpreter", "parameters": {"code": "1"}} and {"name": "f", "arguments": "{\\"a\\": 1}"}'
    _, calls = await parser.extract_tool_calls(encode(qwen3_tokenizer, text))
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("code_interpreter", {"code": "1"}), ("f", {"a": 1})]


async def test_non_ascii_code_round_trips_and_the_boundary_holds(parser, qwen3_tokenizer):
    call = {"name": "code_interpreter", "arguments": {"code": "print('π ≈ 3.14 — 日本')"}}
    prefix = "Réflexion en français: π…\n"
    text = f"{prefix}```json\n{json.dumps(call, ensure_ascii=False)}\n```"
    _, calls = await parser.extract_tool_calls(encode(qwen3_tokenizer, text))
    assert json.loads(calls[0].arguments) == call["arguments"]
    before, _ = split_at_boundary(parser, qwen3_tokenizer, text)
    assert before == prefix


def test_boundary_on_a_long_turn_is_found(parser, qwen3_tokenizer):
    reasoning = "Step: add the numbers and check the parity again. " * 2000
    ids = encode(qwen3_tokenizer, reasoning + f"<tool_call>{CALL_JSON}</tool_call>")
    boundary = parser.find_call_start(ids)
    assert qwen3_tokenizer.decode(ids[boundary:]).startswith("<tool_call>")


def test_locate_calls_ignores_prose_mentions_of_the_tag():
    text = f"I will now use <tool_call> like this: <tool_call>{CALL_JSON}</tool_call>"
    (call,) = locate_calls(text)
    assert text[call.start :].startswith(f"<tool_call>{CALL_JSON}")


def test_parsers_are_registered_with_verl():
    assert ToolParser._registry["cleaner_lenient"] is LenientToolParser
    assert ToolParser._registry["cleaner_lenient_json"] is LenientJsonToolParser
