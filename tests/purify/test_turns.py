"""The per-turn record's format: mask runs, the dict form the loop and the records carry, void turns."""

from __future__ import annotations

import pytest

from cleaner.purify.turns import Turn, is_void_text, mask_runs, turns_from_field

CALL = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(1)"}}\n</tool_call>'


def test_mask_runs_are_the_turns_model_tokens():
    assert mask_runs([1, 1, 0, 0, 1, 0, 1, 1]) == [(0, 2), (4, 5), (6, 8)]
    assert mask_runs([0, 1, 1]) == [(1, 3)]
    assert mask_runs([0, 0]) == [] and mask_runs([]) == []


def test_the_dict_form_round_trips_and_none_is_no_turns():
    turn = Turn(3, 9, 5, 9, call=True, answer=False, failed=True, void=False)
    assert turn.to_dict() == {
        "start": 3,
        "end": 9,
        "code_start": 5,
        "code_end": 9,
        "call": True,
        "answer": False,
        "failed": True,
        "void": False,
    }
    assert turns_from_field([turn.to_dict()]) == [turn]
    assert turns_from_field(None) == []


@pytest.mark.parametrize(
    ("text", "void"),
    [
        ("Let me compute.\n" + CALL, False),  # a complete call, whether or not the loop ran it
        ("Let me compute.\n" + CALL[:-20], True),  # cut inside the call by a length limit
        ("Run:\n```python\nprint(1)\n```\nthen see.", False),  # SimpleTIR's own fenced block
        ("Run:\n```py\nprint(1)\n```", False),
        ("Run:\n```python\nprint(1)", True),  # a fence cut before its end
        ("<think>\nhmm\n</think>\n\nThe total is \\boxed{55}.", False),
        ("The total is \\boxed{55", False),  # SimpleTIR tests for `\boxed{` only
        ("I am not sure what to do next.", True),
    ],
)
def test_simpletirs_void_rule_on_a_turns_text(text, void):
    assert is_void_text(text) is void
