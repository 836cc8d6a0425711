"""CleanerToolAgentLoop on the real verl ToolAgentLoop machinery, the real Qwen3 tokenizer and a scripted server."""

from __future__ import annotations

import json

import pytest
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

from cleaner.saar.config import SaarConfigError
from cleaner.saar.stats import EXTRA_FIELD_KEYS
from cleaner.verl import agent_loop as agent_loop_module
from cleaner.verl.agent_loop import AGENT_NAME, CleanerToolAgentLoop, next_occurrence
from cleaner.verl.tool_execution import TOOL_CRASH_TEXT, tool_history
from support.saar_script import ANSWER, FAILED, OTHER_FIX, SIMILAR_FIX, assistant, tool_text, turn
from support.saar_script import tool_message as tool
from support.scripted_llm import (
    INFRA_TEXT,
    ScriptedLLMServer,
    ScriptedTurn,
    agent_loop_config,
    build_agent_loop,
    render_conversation,
    scripted_outcome,
    scripted_python_tool,
    tool_call_text,
    training_sampling_params,
    unsampled_positions,
    validation_sampling_params,
)

MARKER = "PROBLEM-7"
PROMPT = [{"role": "user", "content": f"{MARKER}: compute the total of 1..10 with Python."}]
FIRST = turn("I will sum with Python.", FAILED, "Let me run it.\n")


class Run:
    def __init__(self, output, server, tool, loop):
        self.output, self.server, self.tool, self.loop = output, server, tool, loop
        self.fields = output.extra_fields

    def text(self, tokenizer) -> str:
        return tokenizer.decode(self.output.prompt_ids + self.output.response_ids)

    def response_text(self, tokenizer) -> str:
        return tokenizer.decode(self.output.response_ids)


async def run_loop(
    tokenizer, script, *, loop_cls=CleanerToolAgentLoop, sampling=None, tools=None, prompt=PROMPT, **overrides
):
    run_kwargs = overrides.pop("run_kwargs", {"index": 0})
    config_kwargs = {key: overrides.pop(key) for key in ("response_length", "prompt_length") if key in overrides}
    config = agent_loop_config(**config_kwargs, **{"enable_tool_rollback": True, **overrides})
    server = ScriptedLLMServer(tokenizer, {MARKER: script})
    tools = tools if tools is not None else [scripted_python_tool()]
    loop = build_agent_loop(loop_cls, config, server, tokenizer, tools)
    params = sampling if sampling is not None else training_sampling_params(config)
    output = await loop.run(
        params(config) if callable(params) else params, raw_prompt=prompt, tools_kwargs={}, extra_info={}, **run_kwargs
    )
    return Run(output, server, tools[0], loop)


def assert_consistent(run: Run, tokenizer, conversation: list[dict] | None = None) -> None:
    """Invariants every trajectory must satisfy; with `conversation`, also its exact rendering."""
    out = run.output
    assert len(out.response_mask) == len(out.response_ids) == len(out.response_logprobs)
    assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, out.response_mask) if m == 0)
    assert unsampled_positions(run.server, MARKER, out.response_ids, out.response_mask, out.response_logprobs) == []
    assert set(EXTRA_FIELD_KEYS) <= set(run.fields)
    text = run.response_text(tokenizer)
    # never ends on a tool call without its response
    assert text.rfind("<tool_call>") < text.rfind("<tool_response>") or "<tool_call>" not in text
    if conversation is not None:
        assert run.text(tokenizer) == render_conversation(tokenizer, run.loop.tool_schemas, PROMPT + conversation)


def test_registered_under_its_agent_name():
    assert _agent_loop_registry[AGENT_NAME]["_target_"] == "cleaner.verl.agent_loop.CleanerToolAgentLoop"


async def test_shallow_rollback_keeps_the_reasoning_and_replaces_only_the_call(qwen3_tokenizer):
    retry = turn("The variable name was wrong, fixing.", SIMILAR_FIX)
    run = await run_loop(qwen3_tokenizer, [FIRST, retry, ANSWER])
    purified_turn = turn("I will sum with Python.", SIMILAR_FIX, "Let me run it.\n")
    assert_consistent(run, qwen3_tokenizer, [assistant(purified_turn), tool(tool_text(SIMILAR_FIX)), assistant(ANSWER)])
    text = run.response_text(qwen3_tokenizer)
    assert "NameError" not in text and "totl" not in text and "fixing" not in text
    # the resample was generated in the context of the failed call and its error
    retry_request = run.server.requests_for(MARKER)[1]
    assert qwen3_tokenizer.decode(retry_request.prompt_ids).endswith(
        "<tool_response>\n" + tool_text(FAILED) + "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    f = run.fields
    assert (f["saar_rollbacks_triggered"], f["saar_rollbacks_recovered"], f["saar_rollbacks_shallow"]) == (1, 1, 1)
    assert (f["saar_tool_calls"], f["saar_first_attempt_calls"], f["saar_first_attempt_successes"]) == (2, 1, 0)
    assert f["saar_fail_exception"] == 1 and f["saar_retries_used"] == 1
    assert f["saar_resampled_tokens"] == len(run.server.requests_for(MARKER)[1].token_ids)
    [event] = f["saar_rollback_events"]
    assert event["mode"] == "shallow" and event["failed_code"] == FAILED and event["replacement_code"] == SIMILAR_FIX
    assert event["similarity"] >= 0.5 and event["exception_type"] == "NameError" and event["position"] == 0
    # the spliced span is exactly the new call's tokens
    [[start, end, attempt, kind]] = f["saar_spliced_spans"]
    assert (attempt, kind) == (1, "shallow")
    assert qwen3_tokenizer.decode(run.output.response_ids[start:end]) == tool_call_text(SIMILAR_FIX) + "<|im_end|>"
    assert f["saar_spliced_tokens"] == end - start and f["saar_response_tokens"] == len(run.output.response_ids)
    assert run.output.num_turns == 4  # user + purified call turn + tool + answer
    assert run.tool.calls == [FAILED, SIMILAR_FIX]


async def test_rollback_without_log_probs(qwen3_tokenizer):
    """The paper's recipe runs with calculate_log_probs=False: the server returns no log-probs."""
    config = agent_loop_config(enable_tool_rollback=True)
    server = ScriptedLLMServer(
        qwen3_tokenizer, {MARKER: [FIRST, turn("Fixing.", SIMILAR_FIX), ANSWER]}, with_log_probs=False
    )
    loop = build_agent_loop(CleanerToolAgentLoop, config, server, qwen3_tokenizer, [scripted_python_tool()])
    output = await loop.run(
        training_sampling_params(config), raw_prompt=PROMPT, tools_kwargs={}, extra_info={}, index=0
    )
    assert output.response_logprobs is None and len(output.response_mask) == len(output.response_ids)
    assert output.extra_fields["saar_rollbacks_shallow"] == 1
    purified = turn("I will sum with Python.", SIMILAR_FIX, "Let me run it.\n")
    conversation = PROMPT + [assistant(purified), tool(tool_text(SIMILAR_FIX)), assistant(ANSWER)]
    expected = render_conversation(qwen3_tokenizer, loop.tool_schemas, conversation)
    assert qwen3_tokenizer.decode(output.prompt_ids + output.response_ids) == expected


async def test_deep_rollback_replaces_the_whole_turn(qwen3_tokenizer):
    retry = turn("A plain loop is simpler.", OTHER_FIX)
    run = await run_loop(qwen3_tokenizer, [FIRST, retry, ANSWER])
    assert_consistent(run, qwen3_tokenizer, [assistant(retry), tool(tool_text(OTHER_FIX)), assistant(ANSWER)])
    f = run.fields
    assert (f["saar_rollbacks_deep"], f["saar_rollbacks_shallow"], f["saar_deep_mentions_error"]) == (1, 0, 0)
    [[start, end, _, kind]] = f["saar_spliced_spans"]
    assert kind == "deep" and qwen3_tokenizer.decode(run.output.response_ids[start:end]) == retry + "<|im_end|>"


async def test_deep_replacement_that_mentions_the_hidden_error_is_counted(qwen3_tokenizer):
    retry = turn("The previous attempt raised a NameError, so let me fix it with a loop.", OTHER_FIX)
    run = await run_loop(qwen3_tokenizer, [FIRST, retry, ANSWER])
    assert run.fields["saar_rollbacks_deep"] == 1 and run.fields["saar_deep_mentions_error"] == 1


async def test_similarity_measure_and_threshold_are_configurable(qwen3_tokenizer):
    retry = turn("Fixing.", SIMILAR_FIX)
    run = await run_loop(
        qwen3_tokenizer, [FIRST, retry, ANSWER], rollback_similarity="token", rollback_similarity_threshold=0.99
    )
    assert run.fields["saar_rollbacks_deep"] == 1
    assert_consistent(run, qwen3_tokenizer, [assistant(retry), tool(tool_text(SIMILAR_FIX)), assistant(ANSWER)])


async def test_recovery_after_several_retries_drops_every_failed_attempt(qwen3_tokenizer):
    second = turn("Try again.", "print(undefined_name)\n# outcome: exception NameError")
    third = turn("Once more.", "1/0\n# outcome: exception ZeroDivisionError")
    fix = turn("Now properly.", OTHER_FIX)
    run = await run_loop(qwen3_tokenizer, [FIRST, second, third, fix, ANSWER])
    assert_consistent(run, qwen3_tokenizer, [assistant(fix), tool(tool_text(OTHER_FIX)), assistant(ANSWER)])
    f = run.fields
    assert (f["saar_retries_used"], f["saar_fail_exception"], f["saar_tool_calls"]) == (3, 3, 4)
    assert f["saar_rollback_events"][0]["retries"] == 3 and f["saar_spliced_spans"][0][2] == 3
    assert "Error" not in run.response_text(qwen3_tokenizer)


RETRY_CODES = [f"print(v{i})\n# outcome: exception NameError" for i in range(3)]
RETRIES = [turn(f"Retry {i}.", code) for i, code in enumerate(RETRY_CODES)]
FOLLOW_UP = turn("Let me think without tools.", None, "The total is \\boxed{55}.")


def note(attempts: int) -> str:
    """The reference's wording (its `_handle_max_retry_exceeded`), added after the last error."""
    return (
        f"\n\nNote: This approach has been attempted {attempts} times with the same type of error. "
        "Consider trying a different algorithm, method, or approach to solve this problem."
    )


async def test_k_exhausted_keeps_only_the_last_failed_attempt_and_adds_the_note(qwen3_tokenizer):
    """The reference: earlier failed attempts are rolled back; the last one and its error stay, with a note."""
    run = await run_loop(qwen3_tokenizer, [FIRST, *RETRIES[:2], FOLLOW_UP], max_tool_retries=2)
    kept = [assistant(RETRIES[1]), tool(tool_text(RETRY_CODES[1]) + note(3)), assistant(FOLLOW_UP)]
    assert_consistent(run, qwen3_tokenizer, kept)
    f = run.fields
    assert (f["saar_rollbacks_triggered"], f["saar_rollbacks_failed"], f["saar_rollbacks_recovered"]) == (1, 1, 0)
    [event] = f["saar_rollback_events"]
    assert (event["mode"], event["kept"], event["model_errors"]) == ("failed", "last", 3)
    assert (f["saar_retries_used"], f["saar_purified_errors"], f["saar_fail_exception"]) == (2, 2, 3)
    assert run.output.num_turns == 4  # user + the kept attempt + its tool response + the follow-up
    # the kept attempt was sampled after errors that are gone: it is recorded as spliced; the follow-up was
    # generated after the rollback, in the context it is trained in
    [[start, end, attempt, kind]] = f["saar_spliced_spans"]
    assert (start, attempt, kind) == (0, 2, "exhausted") and f["saar_spliced_tokens"] == end
    assert qwen3_tokenizer.decode(run.output.response_ids[start:end]) == RETRIES[1] + "<|im_end|>"
    # the model read the note before its follow-up
    assert qwen3_tokenizer.decode(run.server.requests_for(MARKER)[-1].prompt_ids).count("Consider trying") == 1


async def test_nothing_of_a_removed_attempt_stays_in_the_kept_context(qwen3_tokenizer):
    """The exhausted note names no error type: the removed attempts' ZeroDivisionError/IndexError stay out."""
    codes = [
        "print(1 / 0)\n# outcome: exception ZeroDivisionError",
        "print([][3])\n# outcome: exception IndexError",
        "print(int('x'))\n# outcome: exception ValueError",
    ]
    script = [turn(f"Attempt {i}.", code) for i, code in enumerate(codes)] + [FOLLOW_UP]
    run = await run_loop(qwen3_tokenizer, script, max_tool_retries=2)
    kept = [assistant(script[2]), tool(tool_text(codes[2]) + note(3)), assistant(FOLLOW_UP)]
    assert_consistent(run, qwen3_tokenizer, kept)
    text = run.text(qwen3_tokenizer)
    for removed in ("ZeroDivisionError", "IndexError", "Attempt 0", "Attempt 1", "[][3]", "1 / 0"):
        assert removed not in text, removed
    # what the model read before answering is the purified context
    last_prompt = qwen3_tokenizer.decode(run.server.requests_for(MARKER)[-1].prompt_ids)
    assert "ZeroDivisionError" not in last_prompt and "IndexError" not in last_prompt


async def test_k_exhausted_with_keep_all_keeps_the_whole_failed_chain(qwen3_tokenizer):
    run = await run_loop(
        qwen3_tokenizer, [FIRST, *RETRIES[:2], FOLLOW_UP], max_tool_retries=2, rollback_exhausted_keep="all"
    )
    conversation = []
    for attempt, code in zip([FIRST, *RETRIES[:2]], [FAILED, *RETRY_CODES[:2]]):
        conversation += [assistant(attempt), tool(tool_text(code))]
    conversation[-1] = tool(tool_text(RETRY_CODES[1]) + note(3))
    assert_consistent(run, qwen3_tokenizer, conversation + [assistant(FOLLOW_UP)])
    f = run.fields
    assert f["saar_rollback_events"][0]["kept"] == "all" and f["saar_purified_errors"] == 0
    assert f["saar_spliced_spans"] == [] and run.output.num_turns == 8


async def test_failure_after_exhaustion_at_a_later_position_gets_its_own_budget(qwen3_tokenizer):
    script = [
        FIRST,
        turn("again", "print(q)\n# outcome: exception NameError"),
        turn("new step", "x = 1\n# outcome: syntax_error SyntaxError"),
        turn("fixed", "x = 1"),
        ANSWER,
    ]
    run = await run_loop(qwen3_tokenizer, script, max_tool_retries=1)
    f = run.fields
    assert (f["saar_rollbacks_triggered"], f["saar_rollbacks_failed"], f["saar_rollbacks_recovered"]) == (2, 1, 1)
    assert_consistent(
        run,
        qwen3_tokenizer,
        [
            assistant(script[1]),
            tool(tool_text("print(q)\n# outcome: exception NameError")),  # one retry: no note
            assistant(script[3]),
            tool(tool_text("x = 1")),
            assistant(ANSWER),
        ],
    )
    assert [event["position"] for event in f["saar_rollback_events"]] == [0, 1]


async def test_resample_without_a_tool_call_ends_the_trajectory_unpurified(qwen3_tokenizer):
    give_up = turn("I cannot fix it.", None, "The total is probably \\boxed{55}.")
    run = await run_loop(qwen3_tokenizer, [FIRST, give_up])
    assert_consistent(run, qwen3_tokenizer, [assistant(FIRST), tool(tool_text(FAILED)), assistant(give_up)])
    assert run.fields["saar_rollbacks_failed"] == 1 and run.fields["saar_retries_used"] == 1


@pytest.mark.parametrize("limit", [{"max_assistant_turns": 2}, {"max_user_turns": 1}])
async def test_no_retry_is_generated_when_a_turn_limit_would_stop_it(qwen3_tokenizer, limit):
    """A retry that could not run is never generated: the model answers as in the SAAR-off baseline."""
    answer = turn("The tool failed; reasoning instead.", None, "The total is \\boxed{55}.")
    run = await run_loop(qwen3_tokenizer, [FIRST, answer], **limit)
    baseline = await run_loop(qwen3_tokenizer, [FIRST, answer], loop_cls=ToolAgentLoop, **limit)
    for name in ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "num_turns"):
        assert getattr(run.output, name) == getattr(baseline.output, name), name
    assert_consistent(run, qwen3_tokenizer, [assistant(FIRST), tool(tool_text(FAILED)), assistant(answer)])
    assert run.fields["saar_rollbacks_triggered"] == 0 and run.tool.calls == [FAILED]


async def test_retries_stop_before_the_turn_limit_and_the_model_answers(qwen3_tokenizer):
    """max_assistant_turns=4 with K=3 (the demo): two retries run, the third could not, so none is generated."""
    script = [FIRST, *RETRIES[:2], ANSWER]
    run = await run_loop(qwen3_tokenizer, script, max_assistant_turns=4)
    assert len(run.server.requests_for(MARKER)) == 4  # no generation is thrown away
    kept = [assistant(RETRIES[1]), tool(tool_text(RETRY_CODES[1]) + note(3)), assistant(ANSWER)]
    assert_consistent(run, qwen3_tokenizer, kept)
    f = run.fields
    assert (f["saar_rollbacks_failed"], f["saar_retries_used"]) == (1, 2)
    assert run.output.num_turns == 4  # the purified conversation: user, kept attempt, its tool response, answer


async def test_a_resample_past_response_length_is_still_run_and_can_recover(qwen3_tokenizer):
    """The reference skipped the response-length check for resamples (verl's ignore_termination)."""
    long_retry = turn("word " * 400, SIMILAR_FIX)
    run = await run_loop(qwen3_tokenizer, [FIRST, long_retry, ANSWER], response_length=300)
    purified = turn("I will sum with Python.", SIMILAR_FIX, "Let me run it.\n")
    assert_consistent(run, qwen3_tokenizer, [assistant(purified), tool(tool_text(SIMILAR_FIX)), assistant(ANSWER)])
    assert run.fields["saar_rollbacks_shallow"] == 1 and run.fields["saar_resampled_tokens"] > 300


@pytest.mark.parametrize("short", [0, 1, 2, 3])
async def test_a_failed_calls_response_that_fills_the_budget_ends_the_trajectory_cleanly(qwen3_tokenizer, short):
    """The response lands at response_length (the next header in or just past it): no empty assistant header at
    the end, and no rollback counted, since no retry could be generated."""
    script = [FIRST, turn("Fixing.", OTHER_FIX), ANSWER]
    full = await run_loop(qwen3_tokenizer, script, enable_tool_rollback=False)
    header = qwen3_tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    ids = full.output.response_ids
    end = next(i for i in range(len(header), len(ids)) if ids[i - len(header) : i] == header)  # after the 1st response
    run = await run_loop(qwen3_tokenizer, script, response_length=end - short)
    assert run.response_text(qwen3_tokenizer).endswith(tool_text(FAILED) + "\n</tool_response><|im_end|>\n")
    assert run.output.response_ids == ids[: end - len(header)]
    assert run.output.response_mask[-1] == 0 and len(run.server.requests_for(MARKER)) == 1
    f = run.fields
    assert (f["saar_rollbacks_triggered"], f["saar_rollbacks_failed"], f["saar_retries_used"]) == (0, 0, 0)
    assert f["saar_rollback_events"] == [] and f["saar_first_attempt_calls"] == 1
    assert_consistent(run, qwen3_tokenizer)


async def test_empty_resample_is_retried_within_the_budget(qwen3_tokenizer):
    empty = ScriptedTurn(token_ids=(), append_eos=False, stop_reason="aborted")
    fix = turn("Fixing.", OTHER_FIX)
    run = await run_loop(qwen3_tokenizer, [FIRST, empty, fix, ANSWER])
    assert_consistent(run, qwen3_tokenizer, [assistant(fix), tool(tool_text(OTHER_FIX)), assistant(ANSWER)])
    assert run.fields["saar_retries_used"] == 2 and run.fields["saar_rollbacks_recovered"] == 1


async def test_empty_resamples_exhausting_the_budget_let_the_model_go_on(qwen3_tokenizer):
    empty = ScriptedTurn(token_ids=(), append_eos=False)
    run = await run_loop(qwen3_tokenizer, [FIRST, empty, empty, ANSWER], max_tool_retries=2)
    assert_consistent(run, qwen3_tokenizer, [assistant(FIRST), tool(tool_text(FAILED)), assistant(ANSWER)])
    assert run.fields["saar_rollbacks_failed"] == 1 and run.output.num_turns == 4


async def test_parallel_calls_with_one_failure_resample_the_whole_turn(qwen3_tokenizer):
    good, bad, fixed = "print(1)", "print(zz)\n# outcome: exception NameError", "print(zz)\n# outcome: ok"
    first = turn("Two things at once.", good) + "\n" + tool_call_text(bad)
    retry = turn("Both again.", good) + "\n" + tool_call_text(fixed)
    run = await run_loop(qwen3_tokenizer, [first, retry, ANSWER], max_parallel_calls=2)
    purified = turn("Two things at once.", good) + "\n" + tool_call_text(fixed)
    assert_consistent(
        run, qwen3_tokenizer, [assistant(purified), tool(tool_text(good)), tool(tool_text(fixed)), assistant(ANSWER)]
    )
    f = run.fields
    assert (f["saar_first_attempt_calls"], f["saar_first_attempt_successes"], f["saar_tool_calls"]) == (2, 1, 4)
    assert f["saar_rollbacks_shallow"] == 1
    assert sorted(run.tool.calls) == sorted([good, bad, good, fixed])


async def test_infra_errors_are_shown_as_the_tools_text_counted_and_never_rolled_back(qwen3_tokenizer):
    infra = "print(1)\n# outcome: infra queue_timeout"
    first = turn("Run it.", infra)
    run = await run_loop(qwen3_tokenizer, [first, ANSWER])
    assert_consistent(run, qwen3_tokenizer, [assistant(first), tool(INFRA_TEXT), assistant(ANSWER)])
    f = run.fields
    assert f["saar_infra_error"] is True and f["saar_infra_errors"] == 1 and f["saar_fail_queue_timeout"] == 1
    assert f["saar_rollbacks_triggered"] == 0


async def test_unparsable_call_is_a_bad_call_and_rolled_back(qwen3_tokenizer):
    broken = '<think>\nGo.\n</think>\n\n<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(1)"\n</tool_call>'
    fix = turn("Go.", "print(1)")
    run = await run_loop(qwen3_tokenizer, [broken, fix, ANSWER])
    assert_consistent(run, qwen3_tokenizer, [assistant(fix), tool(tool_text("print(1)")), assistant(ANSWER)])
    assert run.fields["saar_fail_bad_call"] == 1 and run.fields["saar_rollbacks_recovered"] == 1
    [event] = run.fields["saar_rollback_events"]
    assert "could not be parsed" in event["error_text"]
    # code is compared with code: the broken call's code is the fix's, so the fix is a shallow splice
    assert (event["failed_code"], event["similarity"], event["mode"]) == ("print(1)", 1.0, "shallow")


async def test_a_broken_call_whose_fix_keeps_the_code_keeps_the_original_reasoning(qwen3_tokenizer):
    code = "print(sum(range(11)))"  # short: compared with the raw call text, the wrapper would make it deep
    broken = (
        "<think>\nI will sum the numbers with Python and print the result.\n</think>\n\n<tool_call>\n"
        + json.dumps({"name": "code_interpreter", "arguments": {"code": code}})[:-2]
        + "\n</tool_call>"
    )
    fix = turn("The JSON was cut; same code again.", code)
    run = await run_loop(qwen3_tokenizer, [broken, fix, ANSWER])
    purified = turn("I will sum the numbers with Python and print the result.", code)
    assert_consistent(run, qwen3_tokenizer, [assistant(purified), tool(tool_text(code)), assistant(ANSWER)])
    assert run.fields["saar_rollbacks_shallow"] == 1


async def test_unknown_tool_and_non_object_arguments_are_bad_calls(qwen3_tokenizer):
    unknown = (
        "<think>\nGo.\n</think>\n\n<tool_call>\n"
        + json.dumps({"name": "shell", "arguments": {"cmd": "ls"}})
        + "\n</tool_call>"
    )
    not_object = (
        "<think>\nGo.\n</think>\n\n<tool_call>\n"
        + json.dumps({"name": "code_interpreter", "arguments": "print(1)"})
        + "\n</tool_call>"
    )
    fix = turn("Go.", "print(1)")
    run = await run_loop(qwen3_tokenizer, [unknown, not_object, fix, ANSWER])
    assert run.fields["saar_fail_bad_call"] == 2 and run.fields["saar_rollbacks_recovered"] == 1
    errors = [req for req in run.server.requests_for(MARKER)]
    assert "unknown tool 'shell'" in qwen3_tokenizer.decode(errors[1].prompt_ids)
    assert "must be a JSON object" in qwen3_tokenizer.decode(errors[2].prompt_ids)
    assert_consistent(run, qwen3_tokenizer, [assistant(fix), tool(tool_text("print(1)")), assistant(ANSWER)])


async def test_tool_without_outcome_counts_as_success_and_raising_tool_as_infra(qwen3_tokenizer):
    silent, crashing = scripted_python_tool(), scripted_python_tool()

    async def no_outcome(instance_id, parameters, **kwargs):
        from verl.tools.schemas import ToolResponse

        return ToolResponse(text="done"), 0.0, {}

    async def boom(instance_id, parameters, **kwargs):
        raise RuntimeError("socket closed")

    silent.execute, crashing.execute = no_outcome, boom
    first = turn("Run.", "print(1)")
    run = await run_loop(qwen3_tokenizer, [first, ANSWER], tools=[silent])
    assert run.fields["saar_first_attempt_successes"] == 1 and run.fields["saar_rollbacks_triggered"] == 0
    run = await run_loop(qwen3_tokenizer, [first, ANSWER], tools=[crashing])
    assert run.fields["saar_infra_error"] is True and run.fields["saar_fail_tool_error"] == 1
    assert_consistent(run, qwen3_tokenizer)


@pytest.mark.parametrize("probability", [0.0, 1.0])
async def test_probability_zero_keeps_errors_and_one_purifies(qwen3_tokenizer, probability):
    retry = turn("Fixing.", OTHER_FIX)
    run = await run_loop(qwen3_tokenizer, [FIRST, retry, ANSWER], rollback_probability=probability)
    assert run.fields["saar_rollback_enabled"] == int(probability)
    if probability == 0.0:
        conversation = [
            assistant(FIRST),
            tool(tool_text(FAILED)),
            assistant(retry),
            tool(tool_text(OTHER_FIX)),
            assistant(ANSWER),
        ]
        assert run.fields["saar_rollbacks_triggered"] == 0 and run.fields["saar_first_attempt_calls"] == 2
    else:
        conversation = [assistant(retry), tool(tool_text(OTHER_FIX)), assistant(ANSWER)]
    assert_consistent(run, qwen3_tokenizer, conversation)


async def test_gate_is_drawn_once_per_trajectory_reproducibly(qwen3_tokenizer):
    async def gates(**run_kwargs):
        run = await run_loop(
            qwen3_tokenizer, [ANSWER], rollback_probability=0.5, rollback_seed=11, run_kwargs=run_kwargs
        )
        return run.fields["saar_rollback_enabled"]

    first = [await gates(index=i, session_id=0) for i in range(24)]
    assert first == [await gates(index=i, session_id=0) for i in range(24)]
    assert 0 < sum(first) < 24
    # the legacy worker runs the n samples of one prompt as identical rows: each occurrence draws anew
    assert len({await gates(uid="same-prompt") for _ in range(24)}) == 2


def test_occurrence_counter_counts_per_key_and_stays_bounded(monkeypatch):
    monkeypatch.setattr(agent_loop_module, "_occurrences", type(agent_loop_module._occurrences)())
    monkeypatch.setattr(agent_loop_module, "_OCCURRENCE_KEYS", 3)
    assert [next_occurrence("a"), next_occurrence("a"), next_occurrence("b"), next_occurrence("a")] == [0, 1, 0, 2]
    for key in ("c", "d", "e"):
        next_occurrence(key)
    assert len(agent_loop_module._occurrences) == 3  # a trajectory per key no longer grows the process
    assert next_occurrence("a") == 0  # the least recently used key was forgotten first


async def test_validation_runs_without_rollback_unless_enabled(qwen3_tokenizer):
    retry = turn("Fixing.", OTHER_FIX)
    run = await run_loop(qwen3_tokenizer, [FIRST, retry, ANSWER], sampling=validation_sampling_params)
    assert run.fields["saar_rollback_enabled"] == 0 and run.fields["saar_rollbacks_triggered"] == 0
    run = await run_loop(
        qwen3_tokenizer, [FIRST, retry, ANSWER], sampling=validation_sampling_params, rollback_in_validation=True
    )
    assert run.fields["saar_rollbacks_recovered"] == 1
    run = await run_loop(qwen3_tokenizer, [FIRST, retry, ANSWER], run_kwargs={"index": 0, "validate": True})
    assert run.fields["saar_rollback_enabled"] == 0


async def test_ambiguous_validation_sampling_is_a_config_error(qwen3_tokenizer):
    config = agent_loop_config(enable_tool_rollback=True)
    config.actor_rollout_ref.rollout.val_kwargs.top_p = 1.0
    loop = build_agent_loop(
        CleanerToolAgentLoop,
        config,
        ScriptedLLMServer(qwen3_tokenizer, {MARKER: [ANSWER]}),
        qwen3_tokenizer,
        [scripted_python_tool()],
    )
    with pytest.raises(SaarConfigError, match="cannot tell validation from training"):
        await loop.run(training_sampling_params(config), raw_prompt=PROMPT, tools_kwargs={}, extra_info={}, index=0)


async def test_parser_with_its_own_call_boundary_supports_fenced_python_calls(qwen3_tokenizer):
    import cleaner.verl.tool_parser  # noqa: F401  (registers the cleaner_lenient parser)

    def fenced(reasoning, code, prose):
        return f"<think>\n{reasoning}\n</think>\n\n{prose}\n```python\n{code}\n```"

    first = fenced("I will sum with Python.", FAILED, "Let me run it.")
    retry = fenced("Typo fixed.", SIMILAR_FIX, "Again.")
    run = await run_loop(qwen3_tokenizer, [first, retry, ANSWER], format="cleaner_lenient")
    assert_consistent(run, qwen3_tokenizer)
    assert run.fields["saar_rollbacks_shallow"] == 1
    text = run.response_text(qwen3_tokenizer)
    assert text.startswith("<think>\nI will sum with Python.\n</think>\n\nLet me run it.")
    assert SIMILAR_FIX in text and "totl" not in text and "Typo fixed" not in text and "NameError" not in text


async def test_unsupported_parser_format_with_rollback_fails_loudly(qwen3_tokenizer):
    with pytest.raises(ValueError, match="supported formats"):
        await run_loop(qwen3_tokenizer, [ANSWER], format="gpt-oss")


@pytest.mark.parametrize(("limit", "side"), [(256, "middle"), (24, "middle"), (24, "left"), (24, "right")])
async def test_rollback_off_matches_the_stock_tool_agent_token_for_token(qwen3_tokenizer, limit, side):
    script = [FIRST, turn("Fixing.", OTHER_FIX), ANSWER]
    settings = {"enable_tool_rollback": False, "max_tool_response_length": limit, "tool_response_truncate_side": side}
    ours = await run_loop(qwen3_tokenizer, script, **settings)
    stock = await run_loop(qwen3_tokenizer, script, loop_cls=ToolAgentLoop, **settings)
    for name in ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "num_turns"):
        assert getattr(ours.output, name) == getattr(stock.output, name), name
    f = ours.fields
    assert tuple(key for key in f if key.startswith("saar_")) == EXTRA_FIELD_KEYS
    assert (
        f["saar_rollback_enabled"],
        f["saar_tool_calls"],
        f["saar_first_attempt_successes"],
        f["saar_fail_exception"],
    ) == (0, 2, 1, 1)


# ---- the purified turn parses to the executed calls; markers in the reasoning -------------------------------


async def test_a_tool_call_mention_in_the_reasoning_does_not_turn_a_valid_call_into_a_bad_call(qwen3_tokenizer):
    mention = turn("I will wrap the code in <tool_call> tags.", "print(sum(range(11)))")
    run = await run_loop(qwen3_tokenizer, [mention, ANSWER])
    assert run.tool.calls == ["print(sum(range(11)))"]
    f = run.fields
    assert (f["saar_first_attempt_successes"], f["saar_fail_bad_call"], f["saar_rollbacks_triggered"]) == (1, 0, 0)
    assert_consistent(
        run, qwen3_tokenizer, [assistant(mention), tool(tool_text("print(sum(range(11)))")), assistant(ANSWER)]
    )


async def test_a_shallow_splice_that_would_not_parse_to_the_executed_call_falls_back_to_deep(qwen3_tokenizer):
    """A complete call drafted in the reasoning is what the parser executes first; the call boundary is after
    `</think>`, so a shallow splice would keep the drafted (failing) call in front of the fix."""
    drafted = f"<think>\nDraft: {tool_call_text(FAILED)}\n</think>\n\n" + tool_call_text(
        "print(totl)\n# outcome: exception NameError"
    )
    retry = turn("Typo.", SIMILAR_FIX)
    run = await run_loop(qwen3_tokenizer, [drafted, retry, ANSWER])
    assert run.tool.calls == [FAILED, SIMILAR_FIX]
    assert_consistent(run, qwen3_tokenizer, [assistant(retry), tool(tool_text(SIMILAR_FIX)), assistant(ANSWER)])
    f = run.fields
    assert (f["saar_shallow_parse_fallbacks"], f["saar_rollbacks_deep"], f["saar_rollbacks_shallow"]) == (1, 1, 0)


# ---- stateful tools, leak detection ------------------------------------------------------------------------


class HistoryTool(scripted_python_tool().__class__):
    """A scripted tool that, like code_interpreter's stateful mode, keeps successful cells in the trajectory's history."""

    async def execute(self, instance_id, parameters, **kwargs):
        response, reward, metrics = await super().execute(instance_id, parameters, **kwargs)
        history = tool_history(kwargs["agent_data"])
        self.seen.append(list(history))
        if scripted_outcome(parameters["code"]).is_ok:
            history.append(parameters["code"])
        return response, reward, metrics


async def test_cells_of_a_discarded_attempt_leave_the_stateful_history(qwen3_tokenizer):
    history_tool = HistoryTool({"type": "native"}, scripted_python_tool().tool_schema)
    history_tool.seen = []
    kept, dropped = "secret = 41", "print(zz)\n# outcome: exception NameError"
    first = turn("Two cells.", kept) + "\n" + tool_call_text(dropped)
    retry = turn("Again.", "other = 1") + "\n" + tool_call_text("print(2)")
    later = turn("Use it.", "print(other)")
    run = await run_loop(qwen3_tokenizer, [first, retry, later, ANSWER], tools=[history_tool], max_parallel_calls=2)
    assert run.fields["saar_rollbacks_recovered"] == 1
    # the later cell replays only cells of the purified conversation: not `secret = 41` from the failed attempt
    assert sorted(history_tool.seen[-1]) == ["other = 1", "print(2)"]


async def test_the_leak_check_ignores_the_output_of_a_successful_parallel_call(qwen3_tokenizer):
    good, bad = "print(1)", "print(zz)\n# outcome: exception NameError"
    first = turn("Two things.", good) + "\n" + tool_call_text(bad)
    # the deep replacement quotes the successful call's output, which was never an error
    retry = turn(f"The first printed {tool_text(good)}, so a plain loop now.", OTHER_FIX)
    run = await run_loop(qwen3_tokenizer, [first, retry, ANSWER], max_parallel_calls=2)
    f = run.fields
    assert (f["saar_rollbacks_deep"], f["saar_deep_mentions_error"]) == (1, 0)
    assert "result-" not in f["saar_rollback_events"][0]["error_text"]


# ---- failing at start, bad tool answers, timers ------------------------------------------------------------


async def test_routed_expert_replay_with_rollback_is_rejected_when_the_loop_is_built(qwen3_tokenizer):
    config = agent_loop_config(enable_tool_rollback=True)
    config.actor_rollout_ref.rollout.enable_rollout_routing_replay = True
    with pytest.raises(SaarConfigError, match="enable_rollout_routing_replay"):
        build_agent_loop(
            CleanerToolAgentLoop,
            config,
            ScriptedLLMServer(qwen3_tokenizer, {}),
            qwen3_tokenizer,
            [scripted_python_tool()],
        )


@pytest.mark.parametrize("answer", ["media", "malformed_outcome"])
async def test_an_unusable_tool_answer_is_an_infra_error_of_that_trajectory(qwen3_tokenizer, answer):
    broken = scripted_python_tool()

    async def execute(instance_id, parameters, **kwargs):
        from verl.tools.schemas import ToolResponse

        if answer == "media":
            return ToolResponse(text="a plot", image=["<image>"]), 0.0, {}
        return ToolResponse(text="done"), 0.0, {"tool_outcome": {"kind": "sideways"}}

    broken.execute = execute
    first = turn("Run.", "print(1)")
    run = await run_loop(qwen3_tokenizer, [first, ANSWER], tools=[broken])
    f = run.fields
    assert (f["saar_infra_error"], f["saar_fail_tool_error"], f["saar_rollbacks_triggered"]) == (True, 1, 0)
    assert_consistent(run, qwen3_tokenizer, [assistant(first), tool(TOOL_CRASH_TEXT), assistant(ANSWER)])


async def test_tool_execution_with_rollback_goes_through_verls_tool_calls_timer(qwen3_tokenizer):
    run = await run_loop(qwen3_tokenizer, [FIRST, turn("Fixing.", SIMILAR_FIX), ANSWER])
    assert run.output.metrics.tool_calls > 0 and run.output.metrics.generate_sequences > 0


# ---- SAAR off is the stock loop ------------------------------------------------------------------------------

UNPARSABLE = (
    '<think>\nGo.\n</think>\n\n<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(1)"\n</tool_call>'
)
UNKNOWN_TOOL = '<think>\nGo.\n</think>\n\n<tool_call>\n{"name": "shell", "arguments": {"cmd": "ls"}}\n</tool_call>'
NOT_OBJECT = (
    '<think>\nGo.\n</think>\n\n<tool_call>\n{"name": "code_interpreter", "arguments": "print(1)"}\n</tool_call>'
)
STOCK_PATHS = {  # script, and the saar_fail_* counters SAAR-off statistics must still report
    "unparsable": ([UNPARSABLE, ANSWER], {"bad_call": 1}),
    "unknown_tool": ([UNKNOWN_TOOL, ANSWER], {"bad_call": 1}),
    "not_an_object": ([NOT_OBJECT, ANSWER], {"bad_call": 1}),
    "mention_in_reasoning": ([turn("Use <tool_call> tags.", "print(1)"), ANSWER], {"bad_call": 1}),
    "tool_raises": ([turn("Run.", "print(1)"), ANSWER], {"tool_error": 1}),
    "errors_then_answer": ([FIRST, turn("Fixing.", OTHER_FIX), ANSWER], {"exception": 1}),
}


@pytest.mark.parametrize("path", sorted(STOCK_PATHS))
async def test_rollback_off_is_byte_identical_to_the_stock_tool_agent_on_every_path(qwen3_tokenizer, path):
    script, failures = STOCK_PATHS[path]

    def tools():
        scripted = scripted_python_tool()
        if path == "tool_raises":

            async def boom(instance_id, parameters, **kwargs):
                raise RuntimeError("socket closed")

            scripted.execute = boom
        return [scripted]

    ours = await run_loop(qwen3_tokenizer, script, tools=tools(), enable_tool_rollback=False)
    stock = await run_loop(qwen3_tokenizer, script, tools=tools(), loop_cls=ToolAgentLoop, enable_tool_rollback=False)
    for name in ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "num_turns"):
        assert getattr(ours.output, name) == getattr(stock.output, name), name
    assert ours.text(qwen3_tokenizer) == stock.text(qwen3_tokenizer)
    counted = {key[len("saar_fail_") :]: value for key, value in ours.fields.items() if key.startswith("saar_fail_")}
    assert {key: value for key, value in counted.items() if value} == failures
