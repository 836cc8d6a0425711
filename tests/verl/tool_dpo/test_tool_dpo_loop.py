"""Negative samples from the real cleaner agent loop (verl's ToolAgentLoop machinery, the Qwen3 tokenizer, a scripted server)."""

from __future__ import annotations

import pytest
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from cleaner.saar.negatives import NEGATIVE_FIELD_KEYS, read_sample_links
from cleaner.saar.stats import EXTRA_FIELD_KEYS
from cleaner.verl.agent_loop import CleanerToolAgentLoop
from support.saar_script import ANSWER, FAILED, OTHER_FIX, SIMILAR_FIX, turn
from support.scripted_llm import (
    ScriptedLLMServer,
    agent_loop_config,
    build_agent_loop,
    scripted_log_prob,
    scripted_python_tool,
    tool_call_text,
    training_sampling_params,
    validation_sampling_params,
)

MARKER = "PROBLEM-NEG"
PROMPT = [{"role": "user", "content": f"{MARKER}: compute two totals with Python."}]
FAILED_2 = "x = [1, 2\nprint(x)\n# outcome: syntax_error"
FIX_2 = "x = [1, 2]\nprint(x)"
NEGATIVES = {"save_negative_samples": True, "max_negative_samples_per_group": 1}


async def run(tokenizer, script, sampling=training_sampling_params, **multi_turn):
    config = agent_loop_config(enable_tool_rollback=True, **multi_turn)
    server = ScriptedLLMServer(tokenizer, {MARKER: script})
    loop = build_agent_loop(CleanerToolAgentLoop, config, server, tokenizer, [scripted_python_tool()])
    result = await loop.run(sampling(config), raw_prompt=PROMPT, tools_kwargs={}, extra_info={}, index=0)
    return result, server


def decode_trained(tokenizer, output: AgentLoopOutput) -> str:
    return tokenizer.decode([t for t, m in zip(output.response_ids, output.response_mask) if m])


def span_text(tokenizer, output: AgentLoopOutput, link: dict) -> str:
    return tokenizer.decode(output.response_ids[link["start"] : link["end"]])


async def test_a_shallow_recovery_gives_one_negative_linked_to_the_replacing_call(qwen3_tokenizer):
    outputs, server = await run(
        qwen3_tokenizer, [turn("Sum it.", FAILED), turn("Fix the name.", SIMILAR_FIX), ANSWER], **NEGATIVES
    )
    negative, positive = outputs
    # the negative: the same prompt, then the failed first attempt; only its call is trained
    assert negative.prompt_ids == positive.prompt_ids
    failed_request = server.requests_for(MARKER)[0]
    assert negative.response_ids == failed_request.token_ids
    assert decode_trained(qwen3_tokenizer, negative) == tool_call_text(FAILED) + "<|im_end|>"
    assert negative.response_logprobs == [scripted_log_prob(0, i) for i in range(len(failed_request.token_ids))]
    assert negative.num_turns == 2  # as verl counts them: the prompt and the failed assistant turn
    # the links: the negative's failed call, the trajectory's successful call that replaced it
    [neg_link] = negative.extra_fields["negative_links"]
    [pos_link] = positive.extra_fields["negative_links"]
    assert neg_link["id"] == pos_link["id"]
    assert span_text(qwen3_tokenizer, negative, neg_link) == tool_call_text(FAILED) + "<|im_end|>"
    assert span_text(qwen3_tokenizer, positive, pos_link) == tool_call_text(SIMILAR_FIX) + "<|im_end|>"
    [[spliced_start, spliced_end, _, _]] = positive.extra_fields["saar_spliced_spans"]
    assert (pos_link["start"], pos_link["end"]) == (spliced_start, spliced_end)
    assert (negative.extra_fields["negative_sample"], positive.extra_fields["negative_sample"]) == (True, False)
    assert positive.extra_fields["negatives_dropped"] == 0
    # the SAAR statistics stay on the trajectory alone; both parse as the estimator reads them
    assert set(EXTRA_FIELD_KEYS) <= set(positive.extra_fields)
    assert not any(key.startswith("saar_") for key in negative.extra_fields)
    assert read_sample_links(negative.extra_fields).negative and not read_sample_links(positive.extra_fields).negative


async def test_a_deep_recovery_links_the_new_turns_call_not_its_reasoning(qwen3_tokenizer):
    outputs, _ = await run(
        qwen3_tokenizer, [turn("Sum it.", FAILED), turn("Another way entirely.", OTHER_FIX), ANSWER], **NEGATIVES
    )
    negative, positive = outputs
    [pos_link] = positive.extra_fields["negative_links"]
    assert positive.extra_fields["saar_rollback_events"][0]["mode"] == "deep"
    assert span_text(qwen3_tokenizer, positive, pos_link) == tool_call_text(OTHER_FIX) + "<|im_end|>"
    assert decode_trained(qwen3_tokenizer, negative) == tool_call_text(FAILED) + "<|im_end|>"


TWO_POSITIONS = [
    turn("Sum it.", FAILED),
    turn("Fix the name.", SIMILAR_FIX),
    turn("Now the list.", FAILED_2),
    turn("Close the bracket.", FIX_2),
    ANSWER,
]


async def test_the_cap_keeps_the_first_negative_and_counts_the_other(qwen3_tokenizer):
    outputs, _ = await run(qwen3_tokenizer, TWO_POSITIONS, **NEGATIVES)
    negative, positive = outputs
    assert positive.extra_fields["negatives_dropped"] == 1
    assert decode_trained(qwen3_tokenizer, negative) == tool_call_text(FAILED) + "<|im_end|>"


async def test_a_later_negative_sits_in_the_purified_context_of_the_earlier_position(qwen3_tokenizer):
    outputs, server = await run(
        qwen3_tokenizer, TWO_POSITIONS, save_negative_samples=True, max_negative_samples_per_group=2
    )
    first, second, positive = outputs
    assert [link["id"] for link in positive.extra_fields["negative_links"]] == [
        first.extra_fields["negative_links"][0]["id"],
        second.extra_fields["negative_links"][0]["id"],
    ]
    assert decode_trained(qwen3_tokenizer, second) == tool_call_text(FAILED_2) + "<|im_end|>"
    # its context is the purified trajectory up to the second position: the fixed first call, no error text
    failed_turn = server.requests_for(MARKER)[2].token_ids
    base = len(second.response_ids) - len(failed_turn)
    assert second.response_ids[base:] == failed_turn
    assert second.response_ids[:base] == positive.response_ids[:base]
    context = qwen3_tokenizer.decode(second.response_ids[:base])
    assert "print(total)" in context and "totl" not in context


async def test_no_recovery_gives_no_negative_but_the_fields(qwen3_tokenizer):
    still_failing = [turn("Sum it.", FAILED)] + [turn("Try again.", FAILED)] * 3 + [ANSWER]
    outputs, _ = await run(qwen3_tokenizer, still_failing, **NEGATIVES)
    [positive] = outputs
    assert positive.extra_fields["negative_links"] == [] and positive.extra_fields["negatives_dropped"] == 0


async def test_validation_and_the_default_give_one_plain_output(qwen3_tokenizer):
    script = [turn("Sum it.", FAILED), turn("Fix the name.", SIMILAR_FIX), ANSWER]
    validated, _ = await run(
        qwen3_tokenizer, script, sampling=validation_sampling_params, rollback_in_validation=True, **NEGATIVES
    )
    default, _ = await run(qwen3_tokenizer, script)
    for output in (validated, default):
        assert isinstance(output, AgentLoopOutput)
        assert output.extra_fields["saar_rollbacks_recovered"] == 1
        assert not set(NEGATIVE_FIELD_KEYS) & set(output.extra_fields)


async def test_a_zero_cap_with_negatives_on_is_refused(qwen3_tokenizer):
    with pytest.raises(ValueError, match="limit >= 1"):
        await run(qwen3_tokenizer, [ANSWER], save_negative_samples=True, max_negative_samples_per_group=0)
