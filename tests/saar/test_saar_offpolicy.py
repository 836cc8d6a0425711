import math

import pytest

from cleaner.saar.offpolicy import PromptLogprobsError, gate, prompt_token_logprobs, scoring_params, span_log_prob


def test_scoring_keeps_the_trajectorys_sampling_and_asks_for_prompt_logprobs_and_one_token():
    params = scoring_params({"temperature": 1.0, "top_p": 1.0, "logprobs": True})
    assert params == {"temperature": 1.0, "top_p": 1.0, "logprobs": True, "max_tokens": 1, "prompt_logprobs": 0}


def test_verls_layout_row_i_scores_token_i_plus_one_and_the_last_row_is_a_dummy():
    """vLLM's extract_prompt_logprobs with prompt_logprobs=0: [[lp(t1)], [lp(t2)], ..., [0.0]] for t0..tn."""
    rows = [[-0.5], [-1.0], [-2.0], [0.0]]
    values = prompt_token_logprobs({"prompt_logprobs": rows, "prompt_ids": [[1], [2], [3], [0]]}, 4)
    assert math.isnan(values[0]) and values[1:] == [-0.5, -1.0, -2.0]
    assert span_log_prob(values, 2, 4) == -3.0


@pytest.mark.parametrize(
    ("extra_fields", "message"),
    [
        (None, "no extra_fields"),
        ({"num_cached_tokens": 3}, "no extra_fields"),
        ({"prompt_logprobs": [[-1.0], [0.0]]}, "2 prompt_logprobs rows for 3 tokens"),
        ({"prompt_logprobs": [[None], [-1.0], [0.0]]}, "row 0"),
    ],
)
def test_an_answer_without_usable_prompt_logprobs_is_an_error(extra_fields, message):
    with pytest.raises(PromptLogprobsError, match=message):
        prompt_token_logprobs(extra_fields, 3)


def test_the_first_token_has_no_log_prob_and_cannot_be_scored():
    with pytest.raises(ValueError, match="not scorable"):
        span_log_prob([math.nan, -1.0], 0, 2)


def test_the_gate_appends_below_the_threshold_and_replaces_at_or_above():
    assert gate(math.log(0.49), 0.5) == "append"
    assert gate(math.log(0.5), 0.5) == "replace"
    assert gate(-1000.0, 0.5) == "append" and gate(1000.0, 0.5) == "replace"  # log space: no overflow
