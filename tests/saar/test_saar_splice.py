import pytest

from cleaner.saar.splice import GeneratedTurn, StreamLengths, splice

PROMPT = [1, 2, 3]


def stream():
    # prompt, then a kept turn (mask 1), a tool response (mask 0), then the failed turn and its feedback
    kept, tool = [10, 11], [90, 91]
    failed, feedback = [20, 21, 22, 23], [95, 96]
    ids = PROMPT + kept + tool + failed + feedback
    mask = [1, 1, 0, 0, 1, 1, 1, 1, 0, 0]
    logprobs = [-0.1, -0.2, 0.0, 0.0, -1.0, -1.1, -1.2, -1.3, 0.0, 0.0]
    base = StreamLengths(ids=len(PROMPT) + 4, mask=4, logprobs=4)
    return ids, mask, logprobs, base, GeneratedTurn(failed, [-1.0, -1.1, -1.2, -1.3], boundary=2)


def test_deep_replaces_the_whole_turn_and_drops_the_branch():
    ids, mask, logprobs, base, failed = stream()
    new = GeneratedTurn([30, 31, 32], [-3.0, -3.1, -3.2], boundary=1)
    result = splice(ids, mask, logprobs, base, failed, new, "deep")
    assert result.ids == PROMPT + [10, 11, 90, 91, 30, 31, 32]
    assert result.mask == [1, 1, 0, 0, 1, 1, 1]
    assert result.logprobs == [-0.1, -0.2, 0.0, 0.0, -3.0, -3.1, -3.2]
    assert result.turn_ids == [30, 31, 32]
    assert (result.spliced_start, result.spliced_end) == (4, 7)


def test_shallow_keeps_the_old_reasoning_and_grafts_the_new_call():
    ids, mask, logprobs, base, failed = stream()
    new = GeneratedTurn([40, 41, 42, 43, 44], [-4.0, -4.1, -4.2, -4.3, -4.4], boundary=3)
    result = splice(ids, mask, logprobs, base, failed, new, "shallow")
    assert result.turn_ids == [20, 21, 43, 44]
    assert result.ids == PROMPT + [10, 11, 90, 91, 20, 21, 43, 44]
    assert result.logprobs == [-0.1, -0.2, 0.0, 0.0, -1.0, -1.1, -4.3, -4.4]
    assert result.mask == [1] * 2 + [0] * 2 + [1] * 4
    assert (result.spliced_start, result.spliced_end) == (6, 8)


def test_streams_without_logprobs():
    ids, mask, _, base, failed = stream()
    result = splice(
        ids, mask, None, base, GeneratedTurn(failed.ids, None, 2), GeneratedTurn([7, 8], None, 0), "shallow"
    )
    assert result.logprobs is None and result.ids[-4:] == [20, 21, 7, 8]


def test_inputs_are_not_mutated():
    ids, mask, logprobs, base, failed = stream()
    copies = (list(ids), list(mask), list(logprobs))
    splice(ids, mask, logprobs, base, failed, GeneratedTurn([5], [-5.0], 0), "deep")
    assert (ids, mask, logprobs) == copies


def test_misuse_is_rejected():
    ids, mask, logprobs, base, failed = stream()
    with pytest.raises(ValueError, match="boundary"):
        splice(ids, mask, logprobs, base, failed, GeneratedTurn([5], [-5.0], None), "shallow")
    with pytest.raises(ValueError, match="log-probs"):
        splice(ids, mask, logprobs, base, failed, GeneratedTurn([5], None, 0), "deep")
    with pytest.raises(ValueError, match="beyond"):
        splice(ids, mask, logprobs, StreamLengths(99, 4, 4), failed, GeneratedTurn([5], [-5.0], 0), "deep")
    with pytest.raises(ValueError, match="log-probs"):
        GeneratedTurn([1, 2], [-1.0], 0)
