"""How SAAR scores what it trains off its sampling context, on a server that behaves like verl's vLLM and SGLang:
prompt log-probs are raw (temperature 1, no truncation) and depend on the context; sampled log-probs are processed
by the request's sampling parameters. One scale for both sides, transient scoring failures, the kept attempt of an
exhausted position under the gate, and the gate's statistic (`rollback_is_statistic`).

Real verl ToolAgentLoop machinery, the real Qwen3 tokenizer, the scripted server (tests/support/scripted_llm.py).
"""

from __future__ import annotations

import asyncio
import math

import pytest

from cleaner.saar.config import SaarConfigError
from cleaner.verl import scoring
from cleaner.verl.agent_loop import CleanerToolAgentLoop
from cleaner.verl.scoring import SCORING_ATTEMPTS, SCORING_RETRY_PAUSE_S
from support.saar_script import ANSWER, FAILED, OTHER_FIX, SIMILAR_FIX, turn
from support.scripted_llm import (
    ENGINE,
    ScriptedLLMServer,
    ScriptedTurn,
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


@pytest.fixture(autouse=True)
def pauses(monkeypatch):
    """The pauses between scoring attempts, recorded instead of waited."""
    waited: list[float] = []

    async def pause(seconds: float) -> None:
        waited.append(seconds)

    monkeypatch.setattr(scoring, "pause", pause)
    return waited


async def run(
    tokenizer, script, *, prompt_logprob=ENGINE, sampling=None, aborts=(), with_log_probs=True, engine="vllm", **multi
):
    config = agent_loop_config(engine=engine, **{"enable_tool_rollback": True, **multi})
    config.actor_rollout_ref.rollout.calculate_log_probs = with_log_probs
    server = ScriptedLLMServer(
        tokenizer,
        {MARKER: script},
        prompt_logprob=prompt_logprob,
        scoring_aborts=list(aborts),
        with_log_probs=with_log_probs,
        imitates=engine,
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
    ("engine", "sampling", "requests"),
    [
        ("vllm", {}, 1),
        ("vllm", T07, 2),
        ("vllm", {"top_p": 0.9}, 2),
        ("vllm", {"top_k": 20}, 2),
        ("vllm", {"temperature": 0.0}, 1),
        ("vllm", {"temperature": 0.0, "top_p": 0.9}, 2),
        ("sglang", {}, 1),
        ("sglang", {"top_p": 0.9}, 1),
        ("sglang", {"top_k": 20}, 1),
        ("sglang", {"temperature": 0.0, "top_p": 0.9}, 1),
        ("sglang", T07, 2),
    ],
    ids=[
        "vllm-T=1",
        "vllm-T=0.7",
        "vllm-top_p",
        "vllm-top_k",
        "vllm-greedy",
        "vllm-greedy-top_p",
        "sglang-T=1",
        "sglang-top_p",
        "sglang-top_k",
        "sglang-greedy-top_p",
        "sglang-T=0.7",
    ],
)
async def test_the_ratio_is_one_distributions_and_one_request_wherever_sampled_log_probs_are_raw(
    qwen3_tokenizer, engine, sampling, requests
):
    """On an engine-like server the measured log IS depends on the contexts only, not on how tokens were sampled.
    Where the engine reports sampled log-probs on the prompt scale (vLLM: T = 1 or greedy without top-k/top-p;
    SGLang: T = 1 with any top-k/top-p, greedy) they are the behaviour side: one scoring request per splice."""
    reference, _ = await run(qwen3_tokenizer, DEEP, rollback_is_measure=True)
    output, server = await run(qwen3_tokenizer, DEEP, sampling=sampling, engine=engine, rollback_is_measure=True)
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


@pytest.mark.parametrize("span", ["call", "turn"])
async def test_a_shallow_splice_scores_its_call_or_the_whole_new_turn_as_the_reference(qwen3_tokenizer, span):
    """`turn` scores the retry's reasoning and call where a deep splice would put them (the reference's gate, always
    deep); the splice made is the shallow one either way."""
    output, server = await run(qwen3_tokenizer, SHALLOW, rollback_is_measure=True, rollback_is_shallow_span=span)
    paper, _ = await run(qwen3_tokenizer, SHALLOW)
    assert_same_tokens(output, paper)
    [event] = output.extra_fields["saar_rollback_events"]
    [[start, end, _, kind]] = output.extra_fields["saar_spliced_spans"]
    retry = server.requests_for(MARKER)[1]
    assert kind == "shallow" and event["mode"] == "shallow"
    assert event["is_tokens"] == (end - start if span == "call" else len(retry.token_ids))
    [purified] = server.score_requests
    assert ("The name was wrong." in qwen3_tokenizer.decode(purified.prompt_ids)) is (span == "turn")


# ---- scoring failures ------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "abort", "sglang"])
async def test_an_aborted_scoring_request_is_sent_again_after_a_pause(qwen3_tokenizer, pauses, engine):
    """vLLM's "aborted", SGLang's "abort", and the exception of SGLang's adapter: sent again after verl's 1 s."""
    reference, _ = await run(qwen3_tokenizer, SHALLOW, rollback_is_threshold=0.5)
    output, server = await run(qwen3_tokenizer, SHALLOW, aborts=[engine], rollback_is_threshold=0.5)
    assert (
        len(server.score_requests) == 2 and server.score_requests[0].prompt_ids == server.score_requests[1].prompt_ids
    )
    assert pauses == [SCORING_RETRY_PAUSE_S]
    assert_same_tokens(output, reference)
    assert output.extra_fields["saar_rollback_events"] == reference.extra_fields["saar_rollback_events"]
    assert output.extra_fields["saar_fail_scoring_failed"] == 0


@pytest.mark.parametrize(
    ("aborts", "kind", "requests"),
    [
        (["vllm"] * SCORING_ATTEMPTS, "aborted", SCORING_ATTEMPTS),
        (["abort"] * SCORING_ATTEMPTS, "aborted", SCORING_ATTEMPTS),
        (["sglang"] * SCORING_ATTEMPTS, "aborted", SCORING_ATTEMPTS),
        (["refuse"], "refused", 1),
        (["nan"], "non_finite", 1),
    ],
    ids=["vllm-aborts", "sglang-abort-spelling", "sglang-raises", "context-length", "nan-prompt-log-probs"],
)
@pytest.mark.parametrize("drop", [False, True], ids=["kept", "drop-infra-errors"])
async def test_a_splice_the_gate_cannot_score_is_appended_and_the_trajectory_trains(
    qwen3_tokenizer, aborts, kind, requests, drop
):
    """Never a stopped job, never an empty or masked trajectory, never an unscored splice: the SAAR-off trajectory,
    trained, with the failure counted (not an infrastructure error). A refusal is not sent again."""
    output, server = await run(
        qwen3_tokenizer, SHALLOW, aborts=aborts, rollback_is_threshold=0.5, drop_infra_error_trajectories=drop
    )
    saar_off, _ = await run(qwen3_tokenizer, SHALLOW, enable_tool_rollback=False)
    for name in ("prompt_ids", "response_ids", "response_logprobs", "response_mask", "num_turns"):
        assert getattr(output, name) == getattr(saar_off, name), name
    f = output.extra_fields
    assert (f["saar_fail_scoring_failed"], f["saar_infra_errors"], f["saar_infra_error"]) == (1, 0, False)
    assert (f["saar_infra_dropped"], f["saar_planb_appends"], f["saar_is_scored"]) == (0, 1, 0)
    [event] = f["saar_rollback_events"]
    assert (event["is_decision"], event["is_failure"], event["log_is_ratio"]) == ("append", kind, None)
    assert event["is_error"]
    assert len(server.score_requests) == requests


async def test_a_nan_sampled_log_prob_is_a_scoring_failure_never_a_decision(qwen3_tokenizer):
    """At T = 1 the sampled log-probs are the behaviour side; one NaN among them (a float16 overflow) makes the score
    not exist: the gate appends, `scoring_failed` counts it, and the trajectory trains."""
    nan_retry = ScriptedTurn(text=SHALLOW[1], log_prob=math.nan)
    script = [SHALLOW[0], nan_retry, *SHALLOW[2:]]
    output, server = await run(qwen3_tokenizer, script, rollback_is_threshold=0.5, drop_infra_error_trajectories=True)
    f = output.extra_fields
    assert (f["saar_fail_scoring_failed"], f["saar_planb_appends"], f["saar_infra_errors"]) == (1, 1, 0)
    [event] = f["saar_rollback_events"]
    assert (event["is_decision"], event["is_failure"]) == ("append", "non_finite")
    assert "behaviour" in event["is_error"]
    assert sum(output.response_mask) > 0 and f["saar_infra_dropped"] == 0
    assert len(server.score_requests) == 1


async def test_measuring_with_three_aborts_purifies_as_unmeasured_and_trains_the_trajectory(qwen3_tokenizer):
    """drop_infra_error_trajectories masks trajectories with an infrastructure error; a failed measurement is not
    one: the mask is the one the unmeasured run gives."""
    output, _ = await run(
        qwen3_tokenizer,
        SHALLOW,
        aborts=["vllm"] * SCORING_ATTEMPTS,
        rollback_is_measure=True,
        drop_infra_error_trajectories=True,
    )
    paper, _ = await run(qwen3_tokenizer, SHALLOW, drop_infra_error_trajectories=True)
    assert_same_tokens(output, paper)
    assert output.response_mask == paper.response_mask and sum(output.response_mask) > 0
    f = output.extra_fields
    assert (f["saar_fail_scoring_failed"], f["saar_infra_errors"], f["saar_infra_dropped"]) == (1, 0, 0)
    assert (f["saar_rollbacks_shallow"], f["saar_is_scored"]) == (1, 0)
    [event] = f["saar_rollback_events"]
    assert (event["is_failure"], event["is_decision"]) == ("aborted", None)


@pytest.mark.parametrize(("limit", "bounded"), [(1, True), (8, False)])
async def test_scoring_requests_in_flight_are_bounded_per_worker(qwen3_tokenizer, limit, bounded):
    """Four trajectories recover in lockstep on a slow server: with rollback_is_max_concurrent_scoring=1 their
    scoring prefills go one at a time, and every splice is still scored."""
    config = agent_loop_config(
        enable_tool_rollback=True, rollback_is_measure=True, rollback_is_max_concurrent_scoring=limit
    )
    markers = [f"{MARKER}-{index}" for index in range(4)]
    server = ScriptedLLMServer(qwen3_tokenizer, {marker: SHALLOW for marker in markers}, delay_s=0.01)
    params = training_sampling_params(config)

    async def trajectory(index: int, marker: str):
        loop = build_agent_loop(CleanerToolAgentLoop, config, server, qwen3_tokenizer, [scripted_python_tool()])
        prompt = [{"role": "user", "content": f"{marker}: compute the total of 1..10 with Python."}]
        return await loop.run(params, raw_prompt=prompt, tools_kwargs={}, extra_info={}, index=index)

    outputs = await asyncio.gather(*(trajectory(index, marker) for index, marker in enumerate(markers)))
    assert [output.extra_fields["saar_is_scored"] for output in outputs] == [1] * len(markers)
    assert (server.max_scoring_in_flight == 1) is bounded and server.max_scoring_in_flight <= limit


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
