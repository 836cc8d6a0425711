"""Rollout records for report tests, built by the real record builder from a real verl AgentLoopOutput."""

from __future__ import annotations

from cleaner.purify.failed_calls import FAILED_CALLS_KEY, FailedCall
from cleaner.purify.turns import GENERATED_TOKENS_KEY, TURNS_KEY, Turn
from cleaner.rollout.problems import Problem
from cleaner.saar.outcome import ErrorCategory
from cleaner.saar.stats import RollbackEvent, SplicedSpan, TrajectoryStats
from cleaner.trajectory.record import CallTiming, build_record

FAILED_CODE = "print(sum(primes[:100])  # <script>alert(1)</script>"
REPLACEMENT_CODE = "primes = [p for p in range(2, 600) if all(p % d for d in range(2, p))]\nprint(sum(primes[:100]))"
ERROR_TEXT = "Tool call failure\nSyntaxError: '(' was never closed"


def make_record(
    tokenizer, *, saar: bool, rollback: bool, problem_id: str = "p0", sample: int = 0, latency_s: float = 2.0
):
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

    prompt_ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": f"Sum of the first 100 primes? [{problem_id}]"}],
        add_generation_prompt=True, tokenize=True, return_dict=False,
    )  # fmt: skip
    turn1 = tokenizer.encode(f"Let me compute.\n```python\n{REPLACEMENT_CODE}\n```<|im_end|>", add_special_tokens=False)
    context = tokenizer.encode(
        "\n<|im_start|>user\n<tool_response>\nTool call success\n24133\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
        add_special_tokens=False,
    )
    turn2 = tokenizer.encode("The answer is \\boxed{24133}.<|im_end|>", add_special_tokens=False)
    response_ids = turn1 + context + turn2
    mask = [1] * len(turn1) + [0] * len(context) + [1] * len(turn2)
    stats = TrajectoryStats(rollback_enabled=int(saar), tool_calls=1, first_attempt_calls=1, response_tokens=sum(mask))
    if rollback:
        stats.tool_calls = 2
        stats.first_attempt_successes = 0
        stats.rollbacks_triggered = stats.rollbacks_recovered = stats.rollbacks_deep = 1
        stats.retries_used = 1
        stats.resampled_tokens = stats.spliced_tokens = len(turn1)
        stats.count_failure(ErrorCategory.SYNTAX_ERROR)
        stats.purified_errors = 1  # the recovery removed that failed call
        stats.spliced_spans.append(SplicedSpan(0, len(turn1), 1, "deep"))
        stats.rollback_events.append(
            RollbackEvent(
                position=0, failed_code=FAILED_CODE, error_category="syntax_error", exception_type="SyntaxError",
                error_text=ERROR_TEXT, replacement_code=REPLACEMENT_CODE, similarity=0.31, mode="deep",
                retries=1, resampled_tokens=len(turn1), model_errors=1,
            )
        )  # fmt: skip
    else:
        stats.first_attempt_successes = 1
    output = AgentLoopOutput(
        prompt_ids=prompt_ids,
        response_ids=response_ids,
        response_mask=mask,
        response_logprobs=[-0.1 if m else 0.0 for m in mask],
        num_turns=4,
        metrics={},
        extra_fields={
            **stats.to_extra_fields(),
            TURNS_KEY: [
                Turn(0, len(turn1), 0, len(turn1), call=True, answer=False, failed=False).to_dict(),
                Turn(len(mask) - len(turn2), len(mask), None, None, call=False, answer=True, failed=False).to_dict(),
            ],
            GENERATED_TOKENS_KEY: len(turn1) * (2 if rollback else 1) + len(turn2),
            # the rolled-back first attempt (recorded with the replacement's length, as its resampled tokens are)
            FAILED_CALLS_KEY: [
                FailedCall(
                    0, ("syntax_error",), len(turn1), len(turn1), "rolled_back", negative_candidate=True
                ).to_dict()
            ]
            if rollback
            else [],
        },
    )
    problem = Problem(problem_id=problem_id, data_source="math_dapo", prompt=[], ground_truth="24133")
    reward = {"score": 1.0, "acc": 1.0, "pred": "24133"}
    return build_record(
        problem=problem, sample=sample, saar=saar, seed=7, output=output, tokenizer=tokenizer, reward=reward,
        timing=CallTiming(generate_calls=3 if rollback else 2, generated_tokens=len(turn1) * (2 if rollback else 1) + len(turn2),
                          generate_s=latency_s * 0.9),
        latency_s=latency_s,
    )  # fmt: skip
