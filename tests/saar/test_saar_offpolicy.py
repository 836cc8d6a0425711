import math

import pytest

from cleaner.saar.offpolicy import (
    IsScore,
    PromptLogprobsError,
    gate,
    logprobs_at,
    prompt_token_logprobs,
    sampled_logprobs_are_raw,
    scoring_params,
    token_log_ratios,
)


def test_scoring_keeps_the_trajectorys_sampling_and_asks_for_prompt_logprobs_and_one_token():
    params = scoring_params({"temperature": 1.0, "top_p": 1.0, "logprobs": True})
    assert params == {"temperature": 1.0, "top_p": 1.0, "logprobs": True, "max_tokens": 1, "prompt_logprobs": 0}


def test_verls_layout_row_i_scores_token_i_plus_one_and_the_last_row_is_a_dummy():
    """vLLM's extract_prompt_logprobs with prompt_logprobs=0: [[lp(t1)], [lp(t2)], ..., [0.0]] for t0..tn."""
    rows = [[-0.5], [-1.0], [-2.0], [0.0]]
    values = prompt_token_logprobs({"prompt_logprobs": rows, "prompt_ids": [[1], [2], [3], [0]]}, 4)
    assert math.isnan(values[0]) and values[1:] == [-0.5, -1.0, -2.0]
    assert logprobs_at(values, [2, 3]) == [-1.0, -2.0]


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
        logprobs_at([math.nan, -1.0], [0, 1])


def test_the_gate_appends_below_the_threshold_and_replaces_at_or_above():
    assert gate(IsScore((math.log(0.49),)), 0.5) == "append"
    assert gate(IsScore((math.log(0.5),)), 0.5) == "replace"
    # log space: no overflow
    assert gate(IsScore((-1000.0,)), 0.5) == "append" and gate(IsScore((1000.0,)), 0.5) == "replace"


def test_per_token_log_ratios_are_target_minus_behaviour():
    score = token_log_ratios([-1.0, -0.5], [-0.25, -0.5])
    assert score.token_log_ratios == (-0.75, 0.0) and score.log_ratio == -0.75 and score.tokens == 2


@pytest.mark.parametrize(
    ("params", "raw"),
    [
        ({}, True),
        ({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0}, True),
        ({"temperature": 1.0, "top_k": 0, "min_p": 0.0}, True),
        ({"temperature": 0.7}, False),
        ({"temperature": 0.0}, False),
        ({"temperature": 1.0, "top_p": 0.6}, False),
        ({"temperature": 1.0, "top_k": 20}, False),
        ({"temperature": 1.0, "min_p": 0.05}, False),
        ({"temperature": 1.0, "repetition_penalty": 1.1}, False),
    ],
)
def test_sampled_log_probs_are_raw_only_at_t1_without_anything_reshaping_the_logits(params, raw):
    """vLLM (processed_logprobs) and SGLang report sampled log-probs after temperature (vLLM also after top-k/top-p);
    prompt log-probs are raw, so only at T = 1 without truncation are the two on one scale."""
    assert sampled_logprobs_are_raw(params) is raw


def reference_decision(purified: list[float], behaviour: list[float], tau: float) -> str:
    """The reference authors' development-code rule, written as they compute it: the per-token log IS over the new
    turn, clamped to [-3, 3], and append when its exponential falls below τ."""
    log_is_per_token = (sum(purified) - sum(behaviour)) / len(purified)
    log_is_per_token = max(-3.0, min(3.0, log_is_per_token))
    return "append" if math.exp(log_is_per_token) < tau else "replace"


@pytest.mark.parametrize(
    ("purified", "behaviour", "tau"),
    [
        ([-0.41] * 63, [0.0] * 63, 0.5),  # the demo's measured spans: mean d -0.41 (e^-0.41 = 0.66)
        ([-0.8] * 10, [-0.1] * 10, 0.5),  # mean -0.7: e^-0.7 = 0.497 < 0.5
        ([-12.0, 0.0, 0.0], [0.0, 0.0, 0.0], 0.5),  # -4 per token, clamped to -3
        ([-12.0, 0.0, 0.0], [0.0, 0.0, 0.0], 0.04),  # clamped -3: e^-3 = 0.0498 >= 0.04 replaces
        ([0.0] * 4, [-9.0] * 4, 30.0),  # +9 clamped to +3: e^3 = 20.1 < 30
        ([-0.2, -0.3], [-0.1, -0.1], 0.8),
        ([-10.3, 0.0, -0.004, 0.0, -1.1], [0.0] * 5, 0.5),
    ],
)
def test_token_mean_reproduces_the_reference_codes_decisions(purified, behaviour, tau):
    score = token_log_ratios(purified, behaviour)
    assert gate(score, tau, "token_mean") == reference_decision(purified, behaviour, tau)


def test_on_the_demos_spans_the_two_statistics_disagree():
    """63 tokens at mean d -0.41: the sequence sum (-25.8) appends, the reference code's mean replaces."""
    score = IsScore((-0.41,) * 63)
    assert (gate(score, 0.5, "sequence"), gate(score, 0.5, "token_mean")) == ("append", "replace")
    assert score.statistic("token_mean") == pytest.approx(-0.41)
    assert IsScore((-12.0, 0.0)).statistic("token_mean") == -3.0
