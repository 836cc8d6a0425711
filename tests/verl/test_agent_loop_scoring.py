"""How SAAR scores what it trains off its sampling context, on a server that behaves like verl's vLLM and SGLang:
prompt log-probs are raw (temperature 1, no truncation) and depend on the context; sampled log-probs are processed
by the request's sampling parameters. One scale for both sides, transient scoring failures, the kept attempt of an
exhausted position under the gate, and the gate's statistic (`rollback_is_statistic`).

Real verl ToolAgentLoop machinery, the real Qwen3 tokenizer, the scripted server (tests/support/scripted_llm.py).
"""

from __future__ import annotations

import math

import pytest

from cleaner.saar.config import SaarConfigError
from cleaner.verl.agent_loop import SCORING_ATTEMPTS, CleanerToolAgentLoop
from support.saar_script import ANSWER, FAILED, OTHER_FIX, SIMILAR_FIX, turn
from support.scripted_llm import (
    ENGINE,
    ScriptedLLMServer,
    agent_loop_config,
    build_agent_loop,
    off_context_positions,
    scripted_python_tool,
    training_sampling_params,
)

MARKER = "PROBLEM-SCORE"
PROMPT = [{"role": "user", "content": f"{MARKER}: compute the total of 1..10 with Python."}]
FIRST = turn("I will sum with Python.", FAILED, "Let me run it.\n")
SHALLOW = [FIRST, turn("The name was wrong.", SIMILAR_FIX), ANSWER]
DEEP = [FIRST, turn("A plain loop is simpler.", OTHER_FIX), ANSWER]
RETRY_CODES = [f"print(v{i})\n# outcome: exception NameError" for i in range(2)]
EXHAUSTED = [FIRST, *(turn(f"Retry {i}.", code) for i, code in enumerate(RETRY_CODES))]
EXHAUSTED += [turn("Let me think without tools.", None, "The total is \\boxed{55}.")]
TOKEN_FIELDS = ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "num_turns")
T07 = {"temperature": 0.7}


async def run(tokenizer, script, *, prompt_logprob=ENGINE, sampling=None, aborts=(), with_log_probs=True, **multi):
    config = agent_loop_config(**{"enable_tool_rollback": True, **multi})
    config.actor_rollout_ref.rollout.calculate_log_probs = with_log_probs
    server = ScriptedLLMServer(
        tokenizer,
        {MARKER: script},
        prompt_logprob=prompt_logprob,
        scoring_aborts=list(aborts),
        with_log_probs=with_log_probs,
    )
    loop = build_agent_loop(CleanerToolAgentLoop, config, server, tokenizer, [scripted_python_tool()])
    params = {**training_sampling_params(config), "logprobs": with_log_probs, **(sampling or {})}
    output = await loop.run(params, raw_prompt=PROMPT, tools_kwargs={}, extra_info={}, index=0)
    return output, server


def assert_same_tokens(output, reference) -> None:
    for name in TOKEN_FIELDS:
        if name != "response_logprobs":  # processed log-probs differ between sampling parameters
            assert getattr(output, name) == getattr(reference, name), name


def spliced_positions(output) -> list[int]:
    return [index for start, end, _, _ in output.extra_fields["saar_spliced_spans"] for index in range(start, end)]


# ---- one scale on every backend --------------------------------------------------------------------------


async def test_at_t07_context_independent_prompt_logprobs_give_log_is_zero_and_the_splice_is_replaced(
    qwen3_tokenizer,
):
    """A vLLM-like backend whose prompt log-probs ignore the context: nothing changed, so IS = 1 and the gate
    replaces; the sampled (processed, temperature-scaled) log-probs never enter the ratio."""
    output, server = await run(qwen3_tokenizer, SHALLOW, prompt_logprob=-1.0, sampling=T07, rollback_is_threshold=0.5)
    [event] = output.extra_fields["saar_rollback_events"]
    assert event["is_decision"] == "replace" and event["log_is_ratio"] == pytest.approx(0.0, abs=1e-9)
    assert output.extra_fields["saar_planb_replaces"] == 1
    purified, error_context = server.score_requests
    retry = server.requests_for(MARKER)[1]
    assert error_context.prompt_ids == retry.prompt_ids + retry.token_ids  # the retry where it was sampled
    assert "NameError" in qwen3_tokenizer.decode(error_context.prompt_ids)
    assert "NameError" not in qwen3_tokenizer.decode(purified.prompt_ids)


@pytest.mark.parametrize(
    ("sampling", "requests"),
    [({}, 1), (T07, 2), ({"top_p": 0.9}, 2), ({"top_k": 20}, 2), ({"temperature": 0.0}, 2)],
    ids=["T=1", "T=0.7", "top_p", "top_k", "greedy"],
)
async def test_the_ratio_is_one_distributions_whatever_the_sampling_and_t1_sends_one_request(
    qwen3_tokenizer, sampling, requests
):
    """On an engine-like server the measured log IS depends on the contexts only, not on how tokens were sampled;
    at T = 1 without truncation the sampled log-probs are the behaviour side (one scoring request per splice)."""
    reference, _ = await run(qwen3_tokenizer, DEEP, rollback_is_measure=True)
    output, server = await run(qwen3_tokenizer, DEEP, sampling=sampling, rollback_is_measure=True)
    assert len(server.score_requests) == requests
    [expected] = reference.extra_fields["saar_rollback_events"]
    [event] = output.extra_fields["saar_rollback_events"]
    assert event["log_is_ratio"] == pytest.approx(expected["log_is_ratio"], abs=1e-9)
    assert event["is_token_log_ratios"] == pytest.approx(expected["is_token_log_ratios"], abs=1e-9)
    assert event["is_tokens"] == len(event["is_token_log_ratios"]) > 0
    assert event["log_is_ratio"] != 0.0  # the spliced tokens' context did change


async def test_without_sampled_log_probs_t1_scores_the_error_context_too(qwen3_tokenizer):
    output, server = await run(qwen3_tokenizer, SHALLOW, with_log_probs=False, rollback_is_measure=True)
    assert len(server.score_requests) == 2 and output.extra_fields["saar_is_scored"] == 1


# ---- transient scoring failures --------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
async def test_an_aborted_scoring_request_is_sent_again(qwen3_tokenizer, engine):
    reference, _ = await run(qwen3_tokenizer, SHALLOW, rollback_is_threshold=0.5)
    output, server = await run(qwen3_tokenizer, SHALLOW, aborts=[engine], rollback_is_threshold=0.5)
    assert (
        len(server.score_requests) == 2 and server.score_requests[0].prompt_ids == server.score_requests[1].prompt_ids
    )
    assert_same_tokens(output, reference)
    assert output.extra_fields["saar_rollback_events"] == reference.extra_fields["saar_rollback_events"]
    assert output.extra_fields["saar_infra_errors"] == 0


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("drop", [False, True], ids=["kept", "dropped"])
async def test_scoring_that_keeps_failing_appends_and_flags_the_trajectory(qwen3_tokenizer, engine, drop):
    """Never a stopped job, never an empty trajectory, never an unscored splice: the SAAR-off trajectory, marked as
    an infrastructure error (masked with drop_infra_error_trajectories)."""
    aborts = [engine] * SCORING_ATTEMPTS
    output, server = await run(
        qwen3_tokenizer, SHALLOW, aborts=aborts, rollback_is_threshold=0.5, drop_infra_error_trajectories=drop
    )
    saar_off, _ = await run(qwen3_tokenizer, SHALLOW, enable_tool_rollback=False)
    for name in ("prompt_ids", "response_ids", "response_logprobs", "num_turns"):
        assert getattr(output, name) == getattr(saar_off, name), name
    assert output.response_mask == ([0] * len(saar_off.response_mask) if drop else saar_off.response_mask)
    f = output.extra_fields
    assert (f["saar_infra_errors"], f["saar_fail_scoring_failed"], f["saar_infra_error"]) == (1, 1, True)
    assert (f["saar_infra_dropped"], f["saar_planb_appends"], f["saar_is_scored"]) == (int(drop), 1, 0)
    [event] = f["saar_rollback_events"]
    assert event["is_decision"] == "append" and event["log_is_ratio"] is None
    assert "aborted" in event["is_error"] or "AssertionError" in event["is_error"]
    assert len(server.score_requests) == SCORING_ATTEMPTS


async def test_measuring_without_a_score_replaces_as_the_run_would_and_flags_it(qwen3_tokenizer):
    output, _ = await run(qwen3_tokenizer, SHALLOW, aborts=["vllm"] * SCORING_ATTEMPTS, rollback_is_measure=True)
    paper, _ = await run(qwen3_tokenizer, SHALLOW)
    assert_same_tokens(output, paper)
    f = output.extra_fields
    assert (f["saar_infra_errors"], f["saar_rollbacks_shallow"], f["saar_is_scored"]) == (1, 1, 0)
    assert f["saar_rollback_events"][0]["is_error"] is not None


async def test_a_completed_answer_without_prompt_logprobs_is_a_config_error(qwen3_tokenizer):
    with pytest.raises(SaarConfigError, match="rollback_is_threshold"):
        await run(qwen3_tokenizer, SHALLOW, prompt_logprob=None, aborts=["vllm"], rollback_is_threshold=0.5)


# ---- the kept attempt of an exhausted position -----------------------------------------------------------


async def test_below_the_threshold_an_exhausted_position_keeps_every_attempt(qwen3_tokenizer):
    output, _ = await run(
        qwen3_tokenizer, EXHAUSTED, prompt_logprob=-1.0, max_tool_retries=2, rollback_is_threshold=0.5
    )
    keep_all, _ = await run(qwen3_tokenizer, EXHAUSTED, max_tool_retries=2, rollback_exhausted_keep="all")
    assert_same_tokens(output, keep_all)
    f = output.extra_fields
    assert (f["saar_planb_exhausted_appends"], f["saar_planb_exhausted_replaces"], f["saar_is_scored"]) == (1, 0, 1)
    assert (f["saar_purified_errors"], f["saar_spliced_spans"]) == (0, [])
    [event] = f["saar_rollback_events"]
    assert (event["mode"], event["kept"], event["is_decision"]) == ("failed", "all", "append")
    assert event["log_is_ratio"] < 0


async def test_at_or_above_the_threshold_only_the_last_attempt_stays_as_without_the_gate(qwen3_tokenizer):
    output, server = await run(
        qwen3_tokenizer, EXHAUSTED, prompt_logprob=0.0, max_tool_retries=2, rollback_is_threshold=0.5
    )
    paper, _ = await run(qwen3_tokenizer, EXHAUSTED, max_tool_retries=2)
    assert_same_tokens(output, paper)
    f = output.extra_fields
    assert (f["saar_planb_exhausted_replaces"], f["saar_purified_errors"]) == (1, 2)
    [event] = f["saar_rollback_events"]
    assert (event["kept"], event["is_decision"]) == ("last", "replace")
    # the scored tokens are the kept attempt's, sampled after the earlier attempts: one score per token of the span
    [[start, end, _, kind]] = f["saar_spliced_spans"]
    assert kind == "exhausted" and event["is_tokens"] == end - start
    [purified] = server.score_requests
    assert "Retry 0" not in qwen3_tokenizer.decode(purified.prompt_ids)
    assert "Retry 1" in qwen3_tokenizer.decode(purified.prompt_ids)


@pytest.mark.parametrize("script", [SHALLOW, DEEP, EXHAUSTED], ids=["shallow", "deep", "exhausted"])
@pytest.mark.parametrize("prompt_logprob", [ENGINE, -1.0, 0.0], ids=["engine", "low", "high"])
async def test_with_the_gate_every_trained_token_was_sampled_in_its_context_unless_a_replace_covers_it(
    qwen3_tokenizer, script, prompt_logprob
):
    output, server = await run(
        qwen3_tokenizer,
        script,
        prompt_logprob=prompt_logprob,
        sampling=T07,
        max_tool_retries=2,
        rollback_is_threshold=0.5,
    )
    [event] = output.extra_fields["saar_rollback_events"]
    off_context = off_context_positions(server, MARKER, output)
    assert off_context == (spliced_positions(output) if event["is_decision"] == "replace" else [])
    assert event["is_decision"] in ("replace", "append")


async def test_the_measurement_scores_an_exhausted_position_without_changing_it(qwen3_tokenizer):
    output, _ = await run(qwen3_tokenizer, EXHAUSTED, prompt_logprob=-1.0, max_tool_retries=2, rollback_is_measure=True)
    paper, _ = await run(qwen3_tokenizer, EXHAUSTED, max_tool_retries=2)
    assert_same_tokens(output, paper)
    [event] = output.extra_fields["saar_rollback_events"]
    assert (event["kept"], event["is_decision"], event["is_statistic"]) == ("last", None, None)
    assert event["log_is_ratio"] < 0 and output.extra_fields["saar_is_scored"] == 1


# ---- the gate's statistic --------------------------------------------------------------------------------


@pytest.mark.parametrize(("statistic", "decision"), [("sequence", "append"), ("token_mean", "replace")])
async def test_the_statistic_decides_a_span_of_small_per_token_gaps(qwen3_tokenizer, statistic, decision):
    """-0.3 per spliced token: the sum is far below log 0.5, the reference code's mean (e^-0.3 = 0.74) is not."""
    output, server = await run(
        qwen3_tokenizer, DEEP, prompt_logprob=-0.3, rollback_is_threshold=0.5, rollback_is_statistic=statistic
    )
    [event] = output.extra_fields["saar_rollback_events"]
    behaviour = server.requests_for(MARKER)[1].log_probs[-event["is_tokens"] :]
    mean = math.fsum(-0.3 - value for value in behaviour) / len(behaviour)
    assert (event["is_decision"], event["is_statistic"]) == (decision, statistic)
    expected = event["log_is_ratio"] if statistic == "sequence" else mean
    assert event["is_statistic_value"] == pytest.approx(expected)
