"""The per-turn record's format: mask runs, the dict form the loop and the records carry, void turns."""

from __future__ import annotations

from cleaner.purify.turns import Turn, mask_runs, turns_from_field


def test_mask_runs_are_the_turns_model_tokens():
    assert mask_runs([1, 1, 0, 0, 1, 0, 1, 1]) == [(0, 2), (4, 5), (6, 8)]
    assert mask_runs([0, 1, 1]) == [(1, 3)]
    assert mask_runs([0, 0]) == [] and mask_runs([]) == []


def test_the_dict_form_round_trips_and_none_is_no_turns():
    turn = Turn(3, 9, 5, 9, call=True, answer=False, failed=True)
    assert turn.to_dict() == {
        "start": 3,
        "end": 9,
        "code_start": 5,
        "code_end": 9,
        "call": True,
        "answer": False,
        "failed": True,
    }
    assert turns_from_field([turn.to_dict()]) == [turn]
    assert turns_from_field(None) == []


def test_a_turn_is_void_without_a_call_and_without_an_answer():
    assert Turn(0, 1, None, None, call=False, answer=False, failed=False).void
    assert not Turn(0, 1, None, None, call=False, answer=True, failed=False).void
    # a failed call is still a complete code block
    assert not Turn(0, 1, 0, 1, call=True, answer=False, failed=True).void
