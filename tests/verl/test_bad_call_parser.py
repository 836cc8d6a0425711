"""`BadCallAwareParser` around verl's real parsers, with the real Qwen3 tokenizer."""

from __future__ import annotations

import json

import pytest
from verl.experimental.agent_loop.tool_parser import ToolParser

from cleaner.saar.boundary import MARKERS_BY_FORMAT
from cleaner.verl.bad_call_parser import BadCallAwareParser
from support.scripted_llm import tool_call_text

XML_CALL = (
    "<tool_call>\n<function=code_interpreter>\n<parameter=code>\nprint(1)\n</parameter>\n</function>\n</tool_call>"
)
XML_BROKEN = "<tool_call>\n<function=broken\n</tool_call>"  # a header without `>`: qwen3_coder skips it


def parser(tokenizer, fmt: str, surface: bool = True) -> BadCallAwareParser:
    return BadCallAwareParser(ToolParser.get_tool_parser(fmt, tokenizer), MARKERS_BY_FORMAT[fmt], surface=surface)


async def parse(tokenizer, wrapper, text):
    return await wrapper.extract_tool_calls(tokenizer.encode(text, add_special_tokens=False))


async def test_qwen3_coder_reports_the_span_it_dropped_not_a_valid_one(qwen3_tokenizer):
    _, calls = await parse(qwen3_tokenizer, parser(qwen3_tokenizer, "qwen3_coder"), f"{XML_CALL}\n{XML_BROKEN}")
    assert [(call.name, json.loads(call.arguments)) for call in calls[:1]] == [
        ("code_interpreter", {"code": "print(1)"})
    ]
    assert [call.name for call in calls] == ["code_interpreter", ""]
    assert "broken" in calls[1].arguments and "print(1)" not in calls[1].arguments


async def test_a_call_opened_after_a_mention_in_the_reasoning_is_recovered(qwen3_tokenizer):
    text = "<think>\nI will use <tool_call> tags.\n</think>\n\n" + tool_call_text("print(2)")
    stock = ToolParser.get_tool_parser("hermes", qwen3_tokenizer)
    assert (await stock.extract_tool_calls(qwen3_tokenizer.encode(text, add_special_tokens=False)))[1] == []
    _, calls = await parse(qwen3_tokenizer, parser(qwen3_tokenizer, "hermes"), text)
    assert [(call.name, json.loads(call.arguments)) for call in calls] == [("code_interpreter", {"code": "print(2)"})]


@pytest.mark.parametrize("fmt", ["hermes", "qwen3_coder"])
async def test_without_surfacing_the_inner_result_is_returned_and_drops_are_listed(qwen3_tokenizer, fmt):
    text = (
        (XML_CALL + "\n" + XML_BROKEN)
        if fmt == "qwen3_coder"
        else tool_call_text("print(1)") + "\n<tool_call>\n{oops\n</tool_call>"
    )
    ids = qwen3_tokenizer.encode(text, add_special_tokens=False)
    stock = await ToolParser.get_tool_parser(fmt, qwen3_tokenizer).extract_tool_calls(ids)
    wrapper = parser(qwen3_tokenizer, fmt, surface=False)
    assert await wrapper.extract_tool_calls(ids) == stock
    assert [call.name for call in wrapper.dropped] == [""]
