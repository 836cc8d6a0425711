"""The per-turn record (`purify_turns`, `purify_generated_tokens`, `purify_roc_counts`) the agent loop writes, on
verl's real loop machinery with the real Qwen3 tokenizer and the scripted server."""

from __future__ import annotations

from cleaner.purify.roc import RocCounts, roc_penalty
from cleaner.purify.turns import GENERATED_TOKENS_KEY, ROC_COUNTS_KEY, TURNS_KEY, turns_from_field
from cleaner.verl.agent_loop import CleanerToolAgentLoop
from support.saar_script import ANSWER, FAILED, SIMILAR_FIX, turn
from support.scripted_llm import (
    ScriptedLLMServer,
    ScriptedTurn,
    agent_loop_config,
    build_agent_loop,
    scripted_python_tool,
    tool_call_text,
    training_sampling_params,
)

MARKER = "PROBLEM-29"
PROMPT = [{"role": "user", "content": f"{MARKER}: compute the total of 1..10 with Python."}]
FIRST = turn("I will sum with Python.", FAILED, "Let me run it.\n")
RETRY = turn("The variable name was wrong, fixing.", SIMILAR_FIX)
VOID = turn("I am not sure what to do next.", None, "Maybe later.")


async def run(tokenizer, script, **multi_turn):
    config = agent_loop_config(**multi_turn)
    server = ScriptedLLMServer(tokenizer, {MARKER: script})
    loop = build_agent_loop(CleanerToolAgentLoop, config, server, tokenizer, [scripted_python_tool()])
    output = await loop.run(
        training_sampling_params(config), raw_prompt=PROMPT, tools_kwargs={}, extra_info={}, index=0
    )
    return output, server


def generated(server) -> int:
    return sum(len(request.token_ids) for request in server.requests_for(MARKER))


def text(tokenizer, output, start, end) -> str:
    return tokenizer.decode(output.response_ids[start:end])


async def test_saar_off_records_every_turn_with_its_failed_call(qwen3_tokenizer):
    output, server = await run(qwen3_tokenizer, [FIRST, RETRY, ANSWER])
    turns = turns_from_field(output.extra_fields[TURNS_KEY])
    assert [(t.call, t.answer, t.failed) for t in turns] == [
        (True, False, True),
        (True, False, False),
        (False, True, False),
    ]
    assert [text(qwen3_tokenizer, output, t.start, t.end) for t in turns] == [
        FIRST + "<|im_end|>",
        RETRY + "<|im_end|>",
        ANSWER + "<|im_end|>",
    ]
    assert (
        text(qwen3_tokenizer, output, turns[0].code_start, turns[0].code_end) == tool_call_text(FAILED) + "<|im_end|>"
    )
    assert (turns[2].code_start, turns[2].code_end) == (None, None)
    assert output.extra_fields[GENERATED_TOKENS_KEY] == generated(server) == sum(output.response_mask)


async def test_a_recovered_position_leaves_no_failed_turn_but_its_tokens_count_as_generated(qwen3_tokenizer):
    output, server = await run(qwen3_tokenizer, [FIRST, RETRY, ANSWER], enable_tool_rollback=True)
    turns = turns_from_field(output.extra_fields[TURNS_KEY])
    assert [(t.call, t.answer, t.failed) for t in turns] == [(True, False, False), (False, True, False)]
    assert text(qwen3_tokenizer, output, turns[0].code_start, turns[0].code_end) == (
        tool_call_text(SIMILAR_FIX) + "<|im_end|>"
    )
    assert output.extra_fields[GENERATED_TOKENS_KEY] == generated(server) > sum(output.response_mask)


async def test_an_exhausted_position_keeps_its_last_attempt_as_a_failed_turn(qwen3_tokenizer):
    second = turn("Trying again.", FAILED + "\n")
    output, server = await run(qwen3_tokenizer, [FIRST, second, ANSWER], enable_tool_rollback=True, max_tool_retries=1)
    turns = turns_from_field(output.extra_fields[TURNS_KEY])
    assert [(t.call, t.answer, t.failed) for t in turns] == [(True, False, True), (False, True, False)]
    assert text(qwen3_tokenizer, output, turns[0].start, turns[0].end) == second + "<|im_end|>"
    assert output.extra_fields[GENERATED_TOKENS_KEY] == generated(server)


async def test_a_turn_without_call_or_answer_is_void(qwen3_tokenizer):
    output, _ = await run(qwen3_tokenizer, [FIRST, VOID])
    turns = turns_from_field(output.extra_fields[TURNS_KEY])
    assert [t.void for t in turns] == [False, True]
    assert [t.failed for t in turns] == [True, False]


async def test_a_final_turn_stopped_by_the_turn_limit_with_a_complete_call_is_not_void(qwen3_tokenizer):
    """verl stops on the turn limit before it parses the call: the turn has no call that ran, but SimpleTIR's rule
    reads its text, which holds a complete block."""
    output, _ = await run(qwen3_tokenizer, [FIRST, RETRY], max_assistant_turns=2)
    turns = turns_from_field(output.extra_fields[TURNS_KEY])
    assert [(t.call, t.void) for t in turns] == [(True, False), (False, False)]


async def test_a_final_turn_cut_inside_its_call_is_void(qwen3_tokenizer):
    cut = ScriptedTurn(text=RETRY[: RETRY.index("print")], append_eos=False, stop_reason="length")
    output, _ = await run(qwen3_tokenizer, [FIRST, cut], max_assistant_turns=2)
    turns = turns_from_field(output.extra_fields[TURNS_KEY])
    assert [(t.call, t.void) for t in turns] == [(True, False), (False, True)]


async def test_rstars_counts_are_taken_on_the_decoded_response(qwen3_tokenizer):
    output, _ = await run(qwen3_tokenizer, [FIRST, RETRY, ANSWER])
    counts = RocCounts.from_dict(output.extra_fields[ROC_COUNTS_KEY])
    # two tool responses, the first a NameError; one boxed answer; 3 turns, so 2 assistant headers
    assert counts == RocCounts(tool_responses=2, error_responses=1, answer_opens=1, answers=1, assistant_turns=2)
    assert roc_penalty(counts) == 0.5


async def test_a_failure_saar_tolerates_stays_a_failed_turn(qwen3_tokenizer):
    """rollback_after_errors=2: the first failure stays in the open; the second is rolled back by the retry."""
    second = turn("Trying again.", FAILED + "\n")
    output, server = await run(
        qwen3_tokenizer, [FIRST, second, RETRY, ANSWER], enable_tool_rollback=True, rollback_after_errors=2
    )
    turns = turns_from_field(output.extra_fields[TURNS_KEY])
    assert [(t.call, t.answer, t.failed) for t in turns] == [
        (True, False, True),
        (True, False, False),
        (False, True, False),
    ]
    assert text(qwen3_tokenizer, output, turns[0].start, turns[0].end) == FIRST + "<|im_end|>"
    assert output.extra_fields[GENERATED_TOKENS_KEY] == generated(server)


async def test_fenced_python_calls_get_their_code_range_from_the_parser_boundary(qwen3_tokenizer):
    """SAAR off with the cleaner_lenient parser (```python fences, the CPU recipes' format)."""
    import cleaner.verl.tool_parser  # noqa: F401  (registers the cleaner_lenient parser)

    first = f"<think>\nI will sum with Python.\n</think>\n\nLet me run it.\n```python\n{FAILED}\n```"
    retry = f"<think>\nTypo fixed.\n</think>\n\nAgain.\n```python\n{SIMILAR_FIX}\n```"
    output, _ = await run(qwen3_tokenizer, [first, retry, ANSWER], format="cleaner_lenient")
    turns = turns_from_field(output.extra_fields[TURNS_KEY])
    assert [(t.call, t.answer, t.failed) for t in turns] == [
        (True, False, True),
        (True, False, False),
        (False, True, False),
    ]
    code = text(qwen3_tokenizer, output, turns[0].code_start, turns[0].code_end)
    assert code.startswith("```python") and FAILED in code and "Let me run it" not in code
