import math

import pytest

from cleaner.saar.offpolicy import (
    IsScore,
    NonFiniteLogprob,
    PromptLogprobsError,
    gate,
    logprobs_at,
    prompt_token_logprobs,
    sampled_logprobs_on_prompt_scale,
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
        ({"temperature": 0.0}, True),
        ({"temperature": 0.7}, False),
        ({"temperature": 0.0, "top_p": 0.9}, False),
        ({"temperature": 1.0, "top_p": 0.6}, False),
        ({"temperature": 1.0, "top_k": 20}, False),
        ({"temperature": 1.0, "min_p": 0.05}, False),
        ({"temperature": 1.0, "repetition_penalty": 1.1}, False),
    ],
)
@pytest.mark.parametrize("engine", ["vllm", "cpu", None])
def test_processed_sampled_log_probs_are_raw_at_t1_or_greedy_without_anything_reshaping_the_logits(engine, params, raw):
    """vLLM's processed_logprobs (and the cpu rollout) take sampled log-probs after temperature and top-k/top-p;
    greedy rows skip the temperature but, in a mixed batch, not their own truncation."""
    assert sampled_logprobs_on_prompt_scale(params, engine, "processed_logprobs") is raw


@pytest.mark.parametrize(
    ("params", "raw"),
    [
        ({}, True),
        ({"temperature": 1.0, "top_p": 0.9}, True),
        ({"temperature": 1.0, "top_k": 20, "min_p": 0.05}, True),
        ({"temperature": 0.0, "top_p": 0.6}, True),
        ({"temperature": 0.7}, False),
        ({"temperature": 0.7, "top_p": 0.9}, False),
        ({"temperature": 1.0, "repetition_penalty": 1.1}, False),
        ({"temperature": 1.0, "frequency_penalty": 0.5}, False),
    ],
)
def test_sglang_sampled_log_probs_are_raw_at_t1_whatever_the_truncation_and_when_greedy(params, raw):
    """SGLang's sampler takes log(softmax(logits / T)) before top-k/top-p/min-p; greedy is rewritten to T = 1."""
    assert sampled_logprobs_on_prompt_scale(params, "sglang") is raw


def test_vllm_raw_logprobs_mode_is_always_on_the_prompt_scale():
    assert sampled_logprobs_on_prompt_scale({"temperature": 0.6, "top_p": 0.9}, "vllm", "raw_logprobs") is True
    assert sampled_logprobs_on_prompt_scale({"temperature": 0.6}, "sglang", "raw_logprobs") is False


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("side", ["target", "behaviour"])
def test_a_non_finite_log_prob_on_either_side_is_no_score(bad, side):
    target, behaviour = [-1.0, -0.5], [-0.25, -0.5]
    (target if side == "target" else behaviour)[1] = bad
    with pytest.raises(NonFiniteLogprob, match=side):
        token_log_ratios(target, behaviour)


def test_a_score_of_non_finite_ratios_does_not_exist_so_the_gate_never_decides_on_nan():
    """Python's min/max pass NaN through the clamp and exp(nan) < τ is false: a NaN would have replaced."""
    with pytest.raises(NonFiniteLogprob):
        gate(IsScore((math.nan, -0.1)), 0.5, "token_mean")


def test_a_nan_prompt_log_prob_row_is_returned_for_the_score_to_refuse_not_a_config_error():
    values = prompt_token_logprobs({"prompt_logprobs": [[-0.5], [math.nan], [0.0]]}, 3)
    assert values[1] == -0.5 and math.isnan(values[2])
