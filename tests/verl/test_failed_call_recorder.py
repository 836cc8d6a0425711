"""The failed-call record (`purify_failed_calls`) the agent loop writes: every failed call generated, rolled back
or kept, on verl's real loop machinery with the real Qwen3 tokenizer and the scripted server."""

from __future__ import annotations

from cleaner.purify.failed_calls import FAILED_CALLS_KEY, failed_calls_from_field
from cleaner.purify.turns import TURNS_KEY, turns_from_field
from cleaner.verl.agent_loop import CleanerToolAgentLoop
from support.saar_script import ANSWER, FAILED, OTHER_FIX, SIMILAR_FIX, turn
from support.scripted_llm import (
    ScriptedLLMServer,
    agent_loop_config,
    build_agent_loop,
    scripted_python_tool,
    tool_call_text,
    training_sampling_params,
)

MARKER = "PROBLEM-FAILED-CALLS"
PROMPT = [{"role": "user", "content": f"{MARKER}: compute the total of 1..10 with Python."}]
FIRST = turn("I will sum with Python.", FAILED, "Let me run it.\n")
RETRY = turn("The variable name was wrong, fixing.", SIMILAR_FIX)
SECOND_FAILURE = turn("Trying again.", "print(v)\n# outcome: exception NameError")
SYNTAX = turn("A list.", "x = [1, 2\nprint(x)\n# outcome: syntax_error SyntaxError")


async def run(tokenizer, script, **multi_turn):
    config = agent_loop_config(**multi_turn)
    server = ScriptedLLMServer(tokenizer, {MARKER: script})
    loop = build_agent_loop(CleanerToolAgentLoop, config, server, tokenizer, [scripted_python_tool()])
    result = await loop.run(
        training_sampling_params(config), raw_prompt=PROMPT, tools_kwargs={}, extra_info={}, index=0
    )
    return result, server


def call_tokens(tokenizer, code: str) -> int:
    return len(tokenizer.encode(tool_call_text(code) + "<|im_end|>", add_special_tokens=False))


async def test_a_rolled_back_attempt_is_recorded_as_cut_with_its_generated_tokens(qwen3_tokenizer):
    output, server = await run(qwen3_tokenizer, [FIRST, RETRY, ANSWER], enable_tool_rollback=True)
    [failed] = failed_calls_from_field(output.extra_fields[FAILED_CALLS_KEY])
    first_request = server.requests_for(MARKER)[0]
    assert (failed.fate, failed.attempt, failed.categories) == ("rolled_back", 0, ("exception",))
    assert failed.turn_tokens == len(first_request.token_ids)
    assert failed.call_tokens == call_tokens(qwen3_tokenizer, FAILED)
    assert (failed.start, failed.end, failed.code_start, failed.code_end) == (None, None, None, None)
    # the first attempt of a purified position is what save_negative_samples would train; it is off here
    assert failed.negative_candidate and not failed.negative
    # nothing of it is in the response: the kept turns hold no failure
    assert not any(t.failed for t in turns_from_field(output.extra_fields[TURNS_KEY]))


async def test_saar_off_keeps_the_failed_call_in_the_response_at_its_turns_range(qwen3_tokenizer):
    output, server = await run(qwen3_tokenizer, [FIRST, RETRY, ANSWER])
    [failed] = failed_calls_from_field(output.extra_fields[FAILED_CALLS_KEY])
    [first_turn, *_] = turns_from_field(output.extra_fields[TURNS_KEY])
    assert (failed.fate, failed.attempt, failed.negative_candidate) == ("kept", 0, False)
    assert (failed.start, failed.end) == (first_turn.start, first_turn.end)
    assert (failed.code_start, failed.code_end) == (first_turn.code_start, first_turn.code_end)
    assert failed.turn_tokens == failed.end - failed.start == len(server.requests_for(MARKER)[0].token_ids)
    assert failed.call_tokens == failed.code_end - failed.code_start


async def test_every_attempt_of_a_recovery_after_retries_is_recorded_once(qwen3_tokenizer):
    output, server = await run(
        qwen3_tokenizer,
        [FIRST, SECOND_FAILURE, SYNTAX, turn("Now properly.", OTHER_FIX), ANSWER],
        enable_tool_rollback=True,
    )
    failed = failed_calls_from_field(output.extra_fields[FAILED_CALLS_KEY])
    requests = server.requests_for(MARKER)
    assert [(f.attempt, f.fate, f.categories) for f in failed] == [
        (0, "rolled_back", ("exception",)),
        (1, "rolled_back", ("exception",)),
        (2, "rolled_back", ("syntax_error",)),
    ]
    assert [f.turn_tokens for f in failed] == [len(request.token_ids) for request in requests[:3]]
    # only the first attempt shares the purified trajectory's context: it alone is a negative candidate
    assert [f.negative_candidate for f in failed] == [True, False, False]


async def test_an_exhausted_position_keeps_its_last_attempt_and_cuts_the_earlier_ones(qwen3_tokenizer):
    output, _ = await run(
        qwen3_tokenizer, [FIRST, SECOND_FAILURE, ANSWER], enable_tool_rollback=True, max_tool_retries=1
    )
    first, last = failed_calls_from_field(output.extra_fields[FAILED_CALLS_KEY])
    [kept_turn, _] = turns_from_field(output.extra_fields[TURNS_KEY])
    assert (first.fate, first.negative_candidate) == ("rolled_back", False)  # not recovered: no negative
    assert (last.fate, last.attempt, (last.start, last.end)) == ("kept", 1, (kept_turn.start, kept_turn.end))
    assert kept_turn.failed


async def test_a_kept_negative_sample_is_marked_on_its_attempt(qwen3_tokenizer):
    outputs, _ = await run(
        qwen3_tokenizer,
        [FIRST, RETRY, ANSWER],
        enable_tool_rollback=True,
        save_negative_samples=True,
        max_negative_samples_per_group=1,
    )
    negative, positive = outputs
    [failed] = failed_calls_from_field(positive.extra_fields[FAILED_CALLS_KEY])
    assert (failed.fate, failed.negative_candidate, failed.negative) == ("rolled_back", True, True)
    # the negative trains exactly the failed call's tokens
    assert sum(negative.response_mask) == failed.call_tokens


async def test_a_negative_beyond_the_cap_is_a_candidate_but_not_a_negative(qwen3_tokenizer):
    second = turn("Next step.", "y = [1\n# outcome: syntax_error SyntaxError")
    outputs, _ = await run(
        qwen3_tokenizer,
        [FIRST, RETRY, second, turn("Fixed.", "y = [1]"), ANSWER],
        enable_tool_rollback=True,
        save_negative_samples=True,
        max_negative_samples_per_group=1,
    )
    positive = outputs[-1]
    failed = failed_calls_from_field(positive.extra_fields[FAILED_CALLS_KEY])
    assert [(f.fate, f.negative_candidate, f.negative) for f in failed] == [
        ("rolled_back", True, True),
        ("rolled_back", True, False),
    ]


async def test_a_trajectory_without_failures_records_none(qwen3_tokenizer):
    output, _ = await run(qwen3_tokenizer, [RETRY, ANSWER], enable_tool_rollback=True)
    assert output.extra_fields[FAILED_CALLS_KEY] == []


BROKEN = (
    '<think>\nGo.\n</think>\n\n<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(1)"\n</tool_call>'
)


async def test_an_unparsable_call_the_stock_loop_drops_is_recorded_as_a_kept_bad_call(qwen3_tokenizer):
    output, server = await run(qwen3_tokenizer, [BROKEN, ANSWER])
    [failed] = failed_calls_from_field(output.extra_fields[FAILED_CALLS_KEY])
    [kept_turn] = turns_from_field(output.extra_fields[TURNS_KEY])  # the stock loop stops at a turn without calls
    assert (failed.fate, failed.categories) == ("kept", ("bad_call",))
    assert (failed.start, failed.end) == (kept_turn.start, kept_turn.end)
    assert failed.turn_tokens == len(server.requests_for(MARKER)[0].token_ids)


async def test_an_unparsable_call_rolled_back_by_saar_is_recorded_as_cut(qwen3_tokenizer):
    output, _ = await run(qwen3_tokenizer, [BROKEN, turn("Go.", "print(1)"), ANSWER], enable_tool_rollback=True)
    [failed] = failed_calls_from_field(output.extra_fields[FAILED_CALLS_KEY])
    assert (failed.fate, failed.categories, failed.negative_candidate) == ("rolled_back", ("bad_call",), True)


def test_a_failure_of_a_trajectory_returned_empty_is_lost_not_rolled_back():
    """A trajectory that raised is returned with an empty response: its failed turn's message is still there, but
    no turn of the response holds it."""
    from cleaner.saar.outcome import ErrorCategory, ToolOutcome
    from cleaner.verl.failed_call_recorder import FailedCallRecorder

    recorder = FailedCallRecorder()
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "call"}]
    recorder.on_call(messages, [5, 6, 7], [ToolOutcome.model_error(ErrorCategory.TIMEOUT, detail="slow")])
    [failed] = recorder.failed_calls(messages, turns=[], find_call_start=lambda ids: 1, negative_ids=set())
    assert (failed.fate, failed.categories, failed.turn_tokens, failed.call_tokens) == ("lost", ("timeout",), 3, 2)
