"""Where the final answer is read from: the last assistant turn, outside reasoning and tool calls."""

from __future__ import annotations

import json

from cleaner.rewards.final_answer import final_turn, last_boxed, last_python_block


def _tool_call(code: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "code_interpreter", "arguments": {"code": code}}) + "\n</tool_call>"


def decoded_response(tokenizer, assistant_turns: list[str], tool_outputs: list[str]) -> str:
    """The response text exactly as verl's reward manager sees it: decoded with skip_special_tokens=True."""
    messages = [{"role": "user", "content": "What is the answer?"}]
    for index, turn in enumerate(assistant_turns):
        messages.append({"role": "assistant", "content": turn})
        if index < len(tool_outputs):
            messages.append({"role": "tool", "content": tool_outputs[index]})
    prompt = tokenizer.apply_chat_template(messages[:1], tokenize=True, add_generation_prompt=True, return_dict=False)
    full = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)
    return tokenizer.decode(full[len(prompt) :], skip_special_tokens=True)


def test_answer_comes_from_the_final_turn_of_a_real_qwen3_decoded_trajectory(qwen3_tokenizer):
    response = decoded_response(
        qwen3_tokenizer,
        [
            "<think>\nMaybe \\boxed{7}?\n</think>\n\nLet me check.\n" + _tool_call("print('\\\\boxed{9}')"),
            "<think>\nThe tool says 9, but I try again\n</think>\n\n" + _tool_call("print(12)"),
            "<think>\nso it is 12\n</think>\n\nThe answer is \\boxed{12}.",
        ],
        ["Tool call success\nstdout: \\boxed{9}", "Tool call success\nstdout: 12"],
    )
    assert "\\boxed{9}" in response and "\\boxed{7}" in response  # earlier boxes really are in the text
    assert last_boxed(final_turn(response)) == "12"


def test_boxes_printed_by_a_tool_or_written_in_a_call_are_not_answers(qwen3_tokenizer):
    tool_printed = decoded_response(
        qwen3_tokenizer,
        [_tool_call("print('\\\\boxed{9}')"), "I could not finish."],
        ["Tool call success\nstdout: \\boxed{9}"],
    )
    assert last_boxed(final_turn(tool_printed)) is None
    in_call = "The result:\n" + _tool_call("x = '\\\\boxed{5}'")
    assert last_boxed(final_turn(in_call)) is None


def test_reasoning_is_not_an_answer():
    assert final_turn("<think>\nit is \\boxed{3}\n</think>\n\nDone: \\boxed{4}") == "\n\nDone: \\boxed{4}"
    # cut off while still thinking: whatever is boxed inside the open reasoning is no answer
    assert final_turn("<think>\nit is \\boxed{3} or so") == ""
    # several think blocks in one turn (the reference's split('</think>')[1] picked the middle text)
    assert last_boxed(final_turn("<think>a</think>\\boxed{1}<think>b</think>\\boxed{2}")) == "2"


def test_plain_single_turn_answers_without_tags():
    assert last_boxed(final_turn("So $x = \\boxed{\\frac{1}{2}}$.")) == "\\frac{1}{2}"


def test_last_boxed_balances_nested_braces_and_takes_the_last_box():
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{\\sqrt{3}}{2}}") == "\\frac{\\sqrt{3}}{2}"
    assert last_boxed("\\boxed{\\{1, 2\\}}") == "\\{1, 2\\}"
    assert last_boxed("\\fbox{42}") == "42"
    assert last_boxed("so \\boxed 5 and done") == "5"
    assert last_boxed("\\boxed{unclosed") is None
    assert last_boxed("no box at all") is None


def test_last_python_block():
    text = "Try:\n```python\nprint(1)\n```\nFinal:\n```python\nprint(2)\n```\nand ```text\nx\n```"
    assert last_python_block(text) == "print(2)\n"
    assert last_python_block("```py\nx = 1\n```") == "x = 1\n"
    assert last_python_block("```python\n   \n```") is None
    assert last_python_block("no code here") is None
