import pytest

from cleaner.saar.boundary import BoundaryFinder, CallMarkers, markers_for_format

CALL = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(1)"}}\n</tool_call>'
FENCE = CallMarkers(start="```python", end="```", reasoning_end="</think>")


@pytest.fixture(scope="module")
def hermes(qwen3_tokenizer):
    return BoundaryFinder(qwen3_tokenizer, markers_for_format("hermes"))


@pytest.fixture(scope="module")
def fence(qwen3_tokenizer):
    return BoundaryFinder(qwen3_tokenizer, FENCE)


def split_at(tokenizer, finder, text):
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    boundary = finder.find(ids)
    if boundary is None:
        return None
    return tokenizer.decode(ids[:boundary]), tokenizer.decode(ids[boundary:])


def test_hermes_splits_reasoning_from_the_call(qwen3_tokenizer, hermes):
    reasoning = "<think>\nAdd them.\n</think>\n\nLet me compute.\n"
    assert split_at(qwen3_tokenizer, hermes, reasoning + CALL) == (reasoning, CALL + "<|im_end|>")


def test_a_marker_inside_the_reasoning_does_not_mis_split(qwen3_tokenizer, hermes):
    reasoning = "<think>\nI must emit <tool_call> ... </tool_call> with JSON.\n</think>\n\n"
    assert split_at(qwen3_tokenizer, hermes, reasoning + CALL) == (reasoning, CALL + "<|im_end|>")


def test_a_marker_mentioned_before_the_real_call_does_not_mis_split(qwen3_tokenizer, hermes):
    prose = "I will now write a <tool_call> block.\n"
    assert split_at(qwen3_tokenizer, hermes, prose + CALL) == (prose, CALL + "<|im_end|>")


def test_no_complete_call_means_no_boundary(qwen3_tokenizer, hermes):
    assert split_at(qwen3_tokenizer, hermes, "The answer is 4.") is None
    assert split_at(qwen3_tokenizer, hermes, '<think>\nx\n</think>\n\n<tool_call>\n{"name": ') is None
    assert hermes.find([]) is None


def test_multi_token_fence_marker(qwen3_tokenizer, fence):
    assert len(qwen3_tokenizer.encode("```python", add_special_tokens=False)) > 1
    text = "<think>\nuse ```python fences\n</think>\n\nRun:\n```python\nprint(1)\n```"
    prefix, call = split_at(qwen3_tokenizer, fence, text)
    # token-granular: the boundary token is the one holding the fence's first character
    assert "```python\nprint(1)" in call and call.startswith(("```", "\n```", ":\n```"))
    assert prefix.startswith("<think>\nuse ```python fences\n</think>") and "print(1)" not in prefix


def test_fence_inside_text_region_without_reasoning(qwen3_tokenizer):
    finder = BoundaryFinder(qwen3_tokenizer, CallMarkers(start="```python", end="```", reasoning_end=None))
    prefix, call = split_at(qwen3_tokenizer, finder, "Compute:\n\n```python\nx = 2\n```\n")
    assert "x = 2" in call and "x = 2" not in prefix


def test_literal_character_markers_are_found_by_the_text_path(qwen3_tokenizer, hermes):
    # "<tool_call>" spelled with ordinary tokens (no special token): the text path still finds it.
    pieces = [
        qwen3_tokenizer.encode(part, add_special_tokens=False)
        for part in ("Ok.\n<", "tool", "_call", ">\n{}\n</", "tool", "_call", ">")
    ]
    ids = [token for piece in pieces for token in piece]
    assert 151657 not in ids
    assert qwen3_tokenizer.decode(ids[: hermes.find(ids)]) == "Ok.\n"


def test_unknown_format_is_a_clear_error():
    with pytest.raises(ValueError, match="multi_turn.format='llama3_json'"):
        markers_for_format("llama3_json")
