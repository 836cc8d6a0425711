"""Properties of CleanerToolAgentLoop over many random scripted trajectories.

Each example scripts 1-3 tool positions; position p fails `failures[p]` times before a success. An
independent text-level oracle says what the purified conversation must be:
- no failure: the turn and its result;
- 1..K failures: the first attempt's reasoning with the successful call (shallow, when the codes'
  difflib ratio is >= 0.5) or the whole successful turn (deep), then its result;
- more than K failures: only the last attempt and its error stay (`rollback_exhausted_keep: last`), with the
  "failed N times" note from 2 retries on;
- a first attempt with an infrastructure error: kept as is, never rolled back;
- a retry that answers instead of calling: the last failed attempt, its error and the answer stay, and the
  trajectory ends.
"""

from __future__ import annotations

import asyncio
import difflib
import json
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cleaner.saar.policy import exhausted_note
from cleaner.saar.stats import EXTRA_FIELD_KEYS
from cleaner.verl.agent_loop import CleanerToolAgentLoop
from support.saar_script import assistant as _assistant
from support.saar_script import tool_message as _tool
from support.saar_script import tool_text, turn
from support.scripted_llm import (
    INFRA_TEXT,
    ScriptedLLMServer,
    agent_loop_config,
    build_agent_loop,
    render_conversation,
    scripted_python_tool,
    training_sampling_params,
    unsampled_positions,
)

MARKER = "RANDOM-PROBLEM"
PROMPT = [{"role": "user", "content": f"{MARKER}: solve it with Python."}]
ANSWER = "<think>\nDone.\n</think>\n\nThe answer is \\boxed{42}."
WORDS = ["compute", "the", "sum", "first", "check", "value", "list", "loop", "prime", "factor", "print"]
STATEMENTS = [
    "x = 3",
    "y = x * 7",
    "print(x + y)",
    "import math",
    "z = math.gcd(12, 18)",
    "items = [1, 2, 3]",
    "print(sum(items))",
]
FAILURES = [
    "exception NameError",
    "exception ZeroDivisionError",
    "syntax_error SyntaxError",
    "timeout",
    "nonzero_exit",
    "bad_call",
]


@dataclass(frozen=True)
class Position:
    reasonings: tuple[str, ...]  # one per attempt
    base_code: str
    failures: int
    failure_kinds: tuple[str, ...]
    similar_fix: bool
    ending: str  # "fix", "give_up" (the last retry answers without a call) or "infra" (first attempt only)


positions = st.builds(
    Position,
    reasonings=st.lists(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join), min_size=6, max_size=6
    ).map(tuple),
    base_code=st.lists(st.sampled_from(STATEMENTS), min_size=1, max_size=4).map("\n".join),
    failures=st.integers(0, 4),
    failure_kinds=st.lists(st.sampled_from(FAILURES), min_size=5, max_size=5).map(tuple),
    similar_fix=st.booleans(),
    ending=st.sampled_from(["fix", "fix", "fix", "give_up", "infra"]),
)


def plan(position_specs: list[Position], retries: int):
    """The server script, the expected purified conversation and the expected counters."""
    script, conversation, hidden = [], [], []
    expected = {"triggered": 0, "recovered": 0, "failed": 0, "retries": 0, "infra": 0, "positions": 0}
    for index, spec in enumerate(position_specs):
        expected["positions"] += 1
        if spec.ending == "infra":
            code = f"{spec.base_code}\ninfra_{index} = 1\n# outcome: infra judge_unreachable"
            script.append(turn(spec.reasonings[0], code))
            conversation += [_assistant(turn(spec.reasonings[0], code)), _tool(INFRA_TEXT)]
            expected["infra"] += 1
            continue
        if spec.ending == "give_up" and 1 <= spec.failures <= retries:
            failed = [
                f"{spec.base_code}\nmarker_{index}_{j} = 1\n# outcome: {spec.failure_kinds[j]}"
                for j in range(spec.failures)
            ]
            for j, code in enumerate(failed):
                script.append(turn(spec.reasonings[j], code))
            last = spec.failures - 1
            conversation += [_assistant(turn(spec.reasonings[last], failed[last])), _tool(tool_text(failed[last]))]
            hidden += [(code, tool_text(code)) for code in failed[:last]]
            answer = f"<think>\n{spec.reasonings[spec.failures]}\n</think>\n\nI give up: \\boxed{{0}}."
            script.append(answer)
            conversation.append(_assistant(answer))
            expected["triggered"] += 1
            expected["failed"] += 1
            expected["retries"] += spec.failures
            return script, conversation, hidden, expected  # the answer ends the trajectory
        executed_failures = min(spec.failures, retries + 1)
        failed = [
            f"{spec.base_code}\nmarker_{index}_{j} = 1\n# outcome: {spec.failure_kinds[j]}"
            for j in range(executed_failures)
        ]
        attempts = [(spec.reasonings[j], code) for j, code in enumerate(failed)]
        recovered = spec.failures <= retries
        if recovered:
            fix = spec.base_code if spec.similar_fix else f"answer_{index} = 6 * 7\nprint(answer_{index})"
            attempts.append((spec.reasonings[executed_failures], fix))
        script += [turn(reasoning, code) for reasoning, code in attempts]
        if spec.failures == 0:
            conversation += [_assistant(turn(*attempts[0])), _tool(tool_text(attempts[0][1]))]
        elif recovered:
            first_reasoning, first_code = attempts[0]
            fix_reasoning, fix_code = attempts[-1]
            shallow = difflib.SequenceMatcher(None, first_code, fix_code).ratio() >= 0.5
            kept = turn(first_reasoning if shallow else fix_reasoning, fix_code)
            conversation += [_assistant(kept), _tool(tool_text(fix_code))]
            hidden += [(code, tool_text(code)) for code in failed]
            expected["triggered"] += 1
            expected["recovered"] += 1
            expected["retries"] += spec.failures
        else:
            reasoning, code = attempts[-1]
            feedback = tool_text(code) + (exhausted_note(retries + 1) if retries >= 2 else "")
            conversation += [_assistant(turn(reasoning, code)), _tool(feedback)]
            hidden += [(code, tool_text(code)) for code in failed[:-1]]
            expected["triggered"] += 1
            expected["failed"] += 1
            expected["retries"] += retries
    script.append(ANSWER)
    conversation.append(_assistant(ANSWER))
    return script, conversation, hidden, expected


async def run_script(tokenizer, script, retries, prompt_logprob=None, **multi_turn):
    config = agent_loop_config(
        **{"enable_tool_rollback": True, "max_tool_retries": retries, "max_tool_response_length": 4096, **multi_turn}
    )
    server = ScriptedLLMServer(tokenizer, {MARKER: script}, prompt_logprob=prompt_logprob)
    tool = scripted_python_tool()
    loop = build_agent_loop(CleanerToolAgentLoop, config, server, tokenizer, [tool])
    output = await loop.run(
        training_sampling_params(config), raw_prompt=PROMPT, tools_kwargs={}, extra_info={}, index=0
    )
    return output, server, tool, loop


@settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(position_specs=st.lists(positions, min_size=1, max_size=3), retries=st.integers(1, 3))
def test_random_trajectories_are_purified_exactly(qwen3_tokenizer, position_specs, retries):
    script, conversation, hidden, expected = plan(position_specs, retries)
    output, server, tool, loop = asyncio.run(run_script(qwen3_tokenizer, script, retries))
    fields = output.extra_fields

    # token bookkeeping: one mask and one log-prob per response token; context tokens carry no log-prob
    assert len(output.response_mask) == len(output.response_ids) == len(output.response_logprobs)
    assert all(lp == 0.0 for lp, mask in zip(output.response_logprobs, output.response_mask) if mask == 0)
    # every trainable token is one the server sampled, with the log-prob it reported
    assert (
        unsampled_positions(server, MARKER, output.response_ids, output.response_mask, output.response_logprobs) == []
    )
    # the stream is exactly the chat template of the purified conversation (no decode/re-encode drift)
    text = qwen3_tokenizer.decode(output.prompt_ids + output.response_ids)
    assert text == render_conversation(qwen3_tokenizer, loop.tool_schemas, PROMPT + conversation)
    # recovered failures leave no trace: neither their code nor their error
    response = qwen3_tokenizer.decode(output.response_ids)
    for code, error in hidden:
        assert json.dumps(code)[1:-1] not in response and error not in response

    assert tuple(key for key in fields if key.startswith("saar_")) == EXTRA_FIELD_KEYS
    assert fields["saar_rollbacks_triggered"] == expected["triggered"]
    assert fields["saar_rollbacks_recovered"] == expected["recovered"]
    assert fields["saar_rollbacks_failed"] == expected["failed"]
    assert fields["saar_rollbacks_shallow"] + fields["saar_rollbacks_deep"] == expected["recovered"]
    assert fields["saar_retries_used"] == expected["retries"]
    assert fields["saar_tool_calls"] == len(tool.calls)
    assert fields["saar_first_attempt_calls"] == expected["positions"]
    assert fields["saar_infra_errors"] == expected["infra"] and fields["saar_infra_error"] == (expected["infra"] > 0)
    spans = fields["saar_spliced_spans"]
    assert fields["saar_spliced_tokens"] == sum(end - start for start, end, _, _ in spans)
    assert all(output.response_mask[i] == 1 for start, end, _, _ in spans for i in range(start, end))
    assert {kind for _, _, _, kind in spans} <= {"shallow", "deep", "exhausted"}
    assert fields["saar_response_tokens"] == len(output.response_ids)


TOKEN_FIELDS = ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "num_turns")


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(position_specs=st.lists(positions, min_size=1, max_size=3), decision=st.sampled_from(["append", "replace"]))
def test_the_is_gate_gives_the_saar_off_or_the_ungated_trajectory(qwen3_tokenizer, position_specs, decision):
    """K = 4 covers every scripted failure count and `all` keeps unrecovered chains, so a gate that always
    appends must give exactly the SAAR-off trajectory, and one that always replaces exactly the ungated one."""
    script, _, _, _ = plan(position_specs, retries=4)
    settings_ = {"rollback_exhausted_keep": "all"}
    # -50 per token in the purified context: IS far below 1; 0.0 per token: IS above 1e-9
    gate = {"rollback_is_threshold": 1.0 if decision == "append" else 1e-9}
    logprob = -50.0 if decision == "append" else 0.0
    gated, _, _, _ = asyncio.run(run_script(qwen3_tokenizer, script, 4, logprob, **settings_, **gate))
    reference_settings = {"enable_tool_rollback": False} if decision == "append" else {}
    reference, _, _, _ = asyncio.run(run_script(qwen3_tokenizer, script, 4, **settings_, **reference_settings))
    for name in TOKEN_FIELDS:
        assert getattr(gated, name) == getattr(reference, name), name
    fields = gated.extra_fields
    recovered = fields["saar_rollbacks_recovered"]
    assert fields["saar_planb_appends" if decision == "append" else "saar_planb_replaces"] == recovered
    assert fields["saar_is_scored"] == recovered
    assert recovered == fields["saar_rollbacks_shallow"] + fields["saar_rollbacks_deep"] + fields["saar_planb_appends"]
