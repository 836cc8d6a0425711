"""Off-policy spans in the real loop: the Plan B gate (rollback_is_threshold), measuring (rollback_is_measure),
Plan C's behaviour log-probs (rollback_is_correction) and rollback_after_errors.

Real verl ToolAgentLoop machinery, the real Qwen3 tokenizer, the scripted server (which answers scoring prefills,
`prompt_logprobs`, with scripted values). Every gated trajectory is compared token for token with an actual run of
the same script: SAAR off for an append, SAAR without a gate for a replace.
"""

from __future__ import annotations

import math

import pytest

from cleaner.saar.config import SaarConfigError
from cleaner.verl.agent_loop import CleanerToolAgentLoop
from support.saar_script import ANSWER, FAILED, OTHER_FIX, SIMILAR_FIX, assistant, tool_message, tool_text, turn
from support.scripted_llm import (
    ScriptedLLMServer,
    agent_loop_config,
    build_agent_loop,
    render_conversation,
    scripted_python_tool,
    training_sampling_params,
    unsampled_positions,
)

MARKER = "PROBLEM-IS"
PROMPT = [{"role": "user", "content": f"{MARKER}: compute the total of 1..10 with Python."}]
FIRST = turn("I will sum with Python.", FAILED, "Let me run it.\n")
SHALLOW = [FIRST, turn("The name was wrong.", SIMILAR_FIX), ANSWER]
DEEP = [FIRST, turn("A plain loop is simpler.", OTHER_FIX), ANSWER]
FIXES = {"shallow": (SHALLOW, SIMILAR_FIX), "deep": (DEEP, OTHER_FIX)}  # a script and the code of its fix
TOKEN_FIELDS = ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "num_turns")


async def run(tokenizer, script, *, prompt_logprob=None, with_log_probs=True, **multi_turn):
    config = agent_loop_config(**{"enable_tool_rollback": True, **multi_turn})
    config.actor_rollout_ref.rollout.calculate_log_probs = with_log_probs
    server = ScriptedLLMServer(
        tokenizer, {MARKER: script}, with_log_probs=with_log_probs, prompt_logprob=prompt_logprob
    )
    loop = build_agent_loop(CleanerToolAgentLoop, config, server, tokenizer, [scripted_python_tool()])
    params = {**training_sampling_params(config), "logprobs": with_log_probs}
    output = await loop.run(params, raw_prompt=PROMPT, tools_kwargs={}, extra_info={}, index=0)
    return output, server, loop


def assert_same_tokens(output, reference) -> None:
    for name in TOKEN_FIELDS:
        assert getattr(output, name) == getattr(reference, name), name


def behaviour_sum(server, turn_index: int, tokens: int) -> float:
    """The log-probs the server reported for the last `tokens` tokens of generation `turn_index`."""
    return math.fsum(server.requests_for(MARKER)[turn_index].log_probs[-tokens:])


@pytest.mark.parametrize("mode", sorted(FIXES))
async def test_below_the_threshold_the_trajectory_is_exactly_the_saar_off_run(qwen3_tokenizer, mode):
    script, fix = FIXES[mode]
    output, server, loop = await run(qwen3_tokenizer, script, prompt_logprob=-1.0, rollback_is_threshold=0.5)
    saar_off, _, _ = await run(qwen3_tokenizer, script, enable_tool_rollback=False)
    assert_same_tokens(output, saar_off)
    conversation = [assistant(script[0]), tool_message(tool_text(FAILED)), assistant(script[1])]
    conversation += [tool_message(tool_text(fix)), assistant(ANSWER)]
    text = qwen3_tokenizer.decode(output.prompt_ids + output.response_ids)
    assert text == render_conversation(qwen3_tokenizer, loop.tool_schemas, PROMPT + conversation)
    f = output.extra_fields
    assert (f["saar_rollbacks_triggered"], f["saar_rollbacks_recovered"]) == (1, 1)
    assert (f["saar_planb_appends"], f["saar_planb_replaces"], f["saar_is_scored"]) == (1, 0, 1)
    assert (f["saar_rollbacks_shallow"], f["saar_rollbacks_deep"], f["saar_purified_errors"]) == (0, 0, 0)
    assert f["saar_spliced_spans"] == [] and f["saar_spliced_tokens"] == 0
    [event] = f["saar_rollback_events"]
    assert (event["is_decision"], event["mode"]) == ("append", mode)
    # log IS = sum over the scored tokens of (-1.0 in the purified context) - (their sampled log-probs)
    tokens = event["is_tokens"]
    assert event["log_is_ratio"] == pytest.approx(-1.0 * tokens - behaviour_sum(server, 1, tokens))
    assert len(output.response_mask) == len(output.response_logprobs)
    assert (
        unsampled_positions(server, MARKER, output.response_ids, output.response_mask, output.response_logprobs) == []
    )


@pytest.mark.parametrize("mode", sorted(FIXES))
async def test_at_or_above_the_threshold_the_trajectory_is_todays_replacement(qwen3_tokenizer, mode):
    script, _ = FIXES[mode]
    # 0.0 per token in the purified context, above the (negative) sampled log-probs: IS > 1
    output, server, _ = await run(qwen3_tokenizer, script, prompt_logprob=0.0, rollback_is_threshold=1.0)
    paper, _, _ = await run(qwen3_tokenizer, script)
    assert_same_tokens(output, paper)
    assert output.extra_fields["saar_spliced_spans"] == paper.extra_fields["saar_spliced_spans"]
    f = output.extra_fields
    assert (f["saar_planb_appends"], f["saar_planb_replaces"], f["saar_is_scored"]) == (0, 1, 1)
    assert f["saar_rollbacks_recovered"] == f["saar_rollbacks_shallow"] + f["saar_rollbacks_deep"] == 1
    [event] = f["saar_rollback_events"]
    [[start, end, _, kind]] = f["saar_spliced_spans"]
    assert (event["is_decision"], event["is_tokens"], kind, event["mode"]) == ("replace", end - start, mode, mode)
    assert event["log_is_ratio"] == pytest.approx(-behaviour_sum(server, 1, end - start)) and event["log_is_ratio"] > 0


async def test_the_splice_is_scored_in_its_purified_context_on_the_trajectorys_server(qwen3_tokenizer):
    output, server, _ = await run(qwen3_tokenizer, SHALLOW, prompt_logprob=0.0, rollback_is_threshold=1.0)
    [score] = server.score_requests
    first, retry = server.requests_for(MARKER)[:2]
    assert score.request_id == first.request_id == retry.request_id  # sticky: the same server as the trajectory
    assert score.sampling_params["prompt_logprobs"] == 0 and score.sampling_params["max_tokens"] == 1
    assert score.sampling_params["temperature"] == first.sampling_params["temperature"]
    # the prompt is the purified stream: the first prompt, the kept reasoning, then the spliced call (no error)
    [[start, end, _, _]] = output.extra_fields["saar_spliced_spans"]
    prompt_length = len(output.prompt_ids)
    assert score.prompt_ids == first.prompt_ids + output.response_ids[:end]
    assert score.prompt_ids[: prompt_length + end] == (output.prompt_ids + output.response_ids)[: prompt_length + end]
    assert "NameError" not in qwen3_tokenizer.decode(score.prompt_ids)


async def test_measuring_scores_every_splice_and_always_replaces(qwen3_tokenizer):
    output, server, _ = await run(qwen3_tokenizer, DEEP, prompt_logprob=-5.0, rollback_is_measure=True)
    paper, _, _ = await run(qwen3_tokenizer, DEEP)
    assert_same_tokens(output, paper)
    f = output.extra_fields
    assert (f["saar_planb_appends"], f["saar_planb_replaces"], f["saar_is_scored"], f["saar_rollbacks_deep"]) == (
        0,
        0,
        1,
        1,
    )
    [event] = f["saar_rollback_events"]
    assert event["is_decision"] is None and event["log_is_ratio"] < 0


@pytest.mark.parametrize("key", ["rollback_is_threshold", "rollback_is_measure"])
async def test_a_backend_without_prompt_logprobs_fails_at_the_first_rollback_naming_the_key(qwen3_tokenizer, key):
    setting = {key: 0.5 if key == "rollback_is_threshold" else True}
    with pytest.raises(SaarConfigError, match=key):
        await run(qwen3_tokenizer, SHALLOW, prompt_logprob=None, **setting)
    # a trajectory without a rollback never scores, so it runs on that backend
    output, server, _ = await run(
        qwen3_tokenizer, [turn("Sum it.", SIMILAR_FIX), ANSWER], prompt_logprob=None, **setting
    )
    assert server.score_requests == [] and output.extra_fields["saar_is_scored"] == 0


async def test_without_behaviour_logprobs_the_retry_is_scored_in_its_error_context_too(qwen3_tokenizer):
    """calculate_log_probs off: a second prefill of the context the retry was sampled in gives pi_b."""

    def logprob(prompt_ids):  # the error context makes the retry likely; the purified context does not
        return -0.1 if "NameError" in qwen3_tokenizer.decode(prompt_ids) else -2.0

    output, server, _ = await run(
        qwen3_tokenizer, SHALLOW, prompt_logprob=logprob, with_log_probs=False, rollback_is_threshold=0.5
    )
    saar_off, _, _ = await run(qwen3_tokenizer, SHALLOW, with_log_probs=False, enable_tool_rollback=False)
    assert_same_tokens(output, saar_off)
    purified, error_context = server.score_requests
    retry = server.requests_for(MARKER)[1]
    assert error_context.prompt_ids == retry.prompt_ids + retry.token_ids
    assert "NameError" not in qwen3_tokenizer.decode(purified.prompt_ids)
    [event] = output.extra_fields["saar_rollback_events"]
    assert event["is_decision"] == "append"
    assert event["log_is_ratio"] == pytest.approx((-2.0 + 0.1) * event["is_tokens"])


async def test_plan_c_spliced_tokens_keep_the_log_probs_sampled_in_the_error_context(qwen3_tokenizer):
    """rollback_is_correction: the behaviour log-probs verl's rollout IS divides by are those of the sampling."""
    output, server, _ = await run(
        qwen3_tokenizer, SHALLOW, prompt_logprob=-3.0, rollback_is_correction=True, rollback_is_measure=True
    )
    [[start, end, attempt, kind]] = output.extra_fields["saar_spliced_spans"]
    retry = server.requests_for(MARKER)[attempt]
    sampled = retry.log_probs[len(retry.log_probs) - (end - start) :]
    assert output.response_logprobs[start:end] == sampled
    assert -3.0 not in output.response_logprobs  # the scored (purified-context) values never enter the stream
    assert output.response_ids[start:end] == retry.token_ids[len(retry.token_ids) - (end - start) :]
    assert kind == "shallow"


SECOND_FAILURE = "total = sum(range(1, 11))\nprint(totall)\n# outcome: exception NameError"


async def test_rollback_after_two_errors_keeps_the_first_failure_and_replaces_the_second(qwen3_tokenizer):
    second = turn("Still wrong?", SECOND_FAILURE)
    fix = turn("A plain loop is simpler.", OTHER_FIX)
    output, server, loop = await run(qwen3_tokenizer, [FIRST, second, fix, ANSWER], rollback_after_errors=2)
    conversation = [
        assistant(FIRST),
        tool_message(tool_text(FAILED)),  # the first failure and its error stay
        assistant(fix),  # the fix replaced the second failure (deep: its code is far from it)
        tool_message(tool_text(OTHER_FIX)),
        assistant(ANSWER),
    ]
    text = qwen3_tokenizer.decode(output.prompt_ids + output.response_ids)
    assert text == render_conversation(qwen3_tokenizer, loop.tool_schemas, PROMPT + conversation)
    assert "totall" not in qwen3_tokenizer.decode(output.response_ids)
    f = output.extra_fields
    assert (f["saar_rollbacks_triggered"], f["saar_rollbacks_recovered"], f["saar_rollbacks_deep"]) == (1, 1, 1)
    assert f["saar_tolerated_errors"] == 1  # the first failure, left in the trajectory
    [event] = f["saar_rollback_events"]
    assert (event["position"], event["failed_code"]) == (1, SECOND_FAILURE)
    assert output.num_turns == 6  # user, first failure, its error, the fix, its result, the answer
    assert len(output.response_mask) == len(output.response_logprobs)
    assert (
        unsampled_positions(server, MARKER, output.response_ids, output.response_mask, output.response_logprobs) == []
    )


async def test_rollback_after_two_errors_leaves_a_single_failure_exactly_as_without_saar(qwen3_tokenizer):
    script = [FIRST, turn("Fixing.", OTHER_FIX), ANSWER]
    output, _, _ = await run(qwen3_tokenizer, script, rollback_after_errors=2)
    saar_off, _, _ = await run(qwen3_tokenizer, script, enable_tool_rollback=False)
    assert_same_tokens(output, saar_off)
    assert (output.extra_fields["saar_rollbacks_triggered"], output.extra_fields["saar_tolerated_errors"]) == (0, 1)


async def test_the_tolerance_counts_failing_rounds_in_a_row_and_restarts_after_a_success(qwen3_tokenizer):
    """rollback_after_errors counts consecutive failing tool rounds, not failures at one position: a success
    between two failures re-arms it, so neither failure is rolled back; both are counted as tolerated."""
    script = [
        FIRST,
        turn("It ran.", SIMILAR_FIX),
        turn("Once more.", SECOND_FAILURE),
        turn("Fixed.", OTHER_FIX),
        ANSWER,
    ]
    output, _, _ = await run(qwen3_tokenizer, script, rollback_after_errors=2)
    saar_off, _, _ = await run(qwen3_tokenizer, script, enable_tool_rollback=False)
    assert_same_tokens(output, saar_off)
    f = output.extra_fields
    assert (f["saar_rollbacks_triggered"], f["saar_tolerated_errors"], f["saar_fail_exception"]) == (0, 2, 2)


async def test_a_shallow_parse_fallback_is_counted_only_when_the_splice_is_made(qwen3_tokenizer):
    """The fallback to deep is a property of a splice; an appended position splices nothing."""
    from support.scripted_llm import tool_call_text

    drafted = f"<think>\nDraft: {tool_call_text(FAILED)}\n</think>\n\n" + tool_call_text(
        "print(totl)\n# outcome: exception NameError"
    )
    script = [drafted, turn("Typo.", SIMILAR_FIX), ANSWER]
    appended, _, _ = await run(qwen3_tokenizer, script, prompt_logprob=-1.0, rollback_is_threshold=0.5)
    replaced, _, _ = await run(qwen3_tokenizer, script, prompt_logprob=0.0, rollback_is_threshold=0.5)
    assert [output.extra_fields["saar_planb_appends"] for output in (appended, replaced)] == [1, 0]
    assert [output.extra_fields["saar_shallow_parse_fallbacks"] for output in (appended, replaced)] == [0, 1]


async def test_an_append_after_failed_retries_keeps_the_whole_chain_as_without_saar(qwen3_tokenizer):
    retry = turn("Try again.", "print(undefined_name)\n# outcome: exception NameError")
    script = [FIRST, retry, turn("Now properly.", OTHER_FIX), ANSWER]
    output, _, _ = await run(qwen3_tokenizer, script, prompt_logprob=-1.0, rollback_is_threshold=0.5)
    saar_off, _, _ = await run(qwen3_tokenizer, script, enable_tool_rollback=False)
    assert_same_tokens(output, saar_off)
    f = output.extra_fields
    assert (f["saar_retries_used"], f["saar_planb_appends"], f["saar_purified_errors"]) == (2, 1, 0)
    assert f["saar_rollback_events"][0]["retries"] == 2


def test_verl_builds_the_multi_turn_config_with_the_off_policy_keys():
    """verl turns `multi_turn` into its dataclass in every process; the SAAR subclass must accept the new keys."""
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    from cleaner.saar.config import SaarConfig
    from cleaner.verl.multi_turn_config import MULTI_TURN_TARGET

    keys = {
        "rollback_is_threshold": 0.5,
        "rollback_is_measure": True,
        "rollback_is_correction": True,
        "rollback_after_errors": 2,
    }
    built = omega_conf_to_dataclass(OmegaConf.create({"_target_": MULTI_TURN_TARGET, "enable": True, **keys}))
    assert {key: getattr(built, key) for key in keys} == keys
    config = SaarConfig.from_multi_turn(OmegaConf.create(keys))
    assert (config.rollback_is_threshold, config.rollback_after_errors) == (0.5, 2)


async def test_the_trajectory_record_carries_the_scores_and_the_span_kinds(qwen3_tokenizer):
    """What `cleaner rollout` writes (cleaner.trajectory.record): each event's IS fields, each piece's splice kind."""
    from types import SimpleNamespace

    from cleaner.trajectory.record import CallTiming, build_record

    output, _, _ = await run(qwen3_tokenizer, SHALLOW, prompt_logprob=0.0, rollback_is_threshold=1.0)
    record = build_record(
        problem=SimpleNamespace(problem_id="p", data_source="math", ground_truth="55"),
        sample=0,
        saar=True,
        seed=0,
        output=output,
        tokenizer=qwen3_tokenizer,
        reward={"score": 1.0},
        timing=CallTiming(generate_calls=3, generated_tokens=0, generate_s=0.0),
        latency_s=0.0,
    )
    [event] = record["saar_rollback_events"]
    assert event["is_decision"] == "replace" and event["log_is_ratio"] > 0 and event["is_tokens"] > 0
    assert record["saar_planb_replaces"] == 1
    spliced = [piece for piece in record["pieces"] if piece["spliced_attempt"] is not None]
    assert [(piece["spliced_attempt"], piece["spliced_kind"]) for piece in spliced] == [(1, "shallow")]
    assert spliced[0]["text"] == turn("", SIMILAR_FIX).split("</think>\n\n")[1] + "<|im_end|>"


@pytest.mark.parametrize(("prompt_logprob", "negatives"), [(-1.0, 0), (0.0, 1)], ids=["append", "replace"])
async def test_only_a_replaced_failure_becomes_a_negative_sample(qwen3_tokenizer, prompt_logprob, negatives):
    """save_negative_samples: an appended failure stays in the trajectory, so it is no negative sample."""
    outputs, _, _ = await run(
        qwen3_tokenizer,
        SHALLOW,
        prompt_logprob=prompt_logprob,
        rollback_is_threshold=1.0,
        save_negative_samples=True,
        max_negative_samples_per_group=1,
    )
    assert len(outputs) == negatives + 1  # the negatives, then the trajectory itself
