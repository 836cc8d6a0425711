"""The JSONL record of one finished trajectory: what `cleaner rollout` writes and the report and eval read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cleaner.purify.failed_calls import FAILED_CALLS_KEY
from cleaner.purify.turns import EXTRA_FIELD_KEYS as TURN_FIELD_KEYS
from cleaner.saar.stats import EXTRA_FIELD_KEYS, PREFIX

# 2: spliced spans are [start, end, attempt, kind] and rollback events carry log_is_ratio / is_tokens / is_decision.
# 3: `purify_turns` (one entry per kept assistant turn, cleaner.purify.turns.Turn) and `purify_generated_tokens`.
# 4: `purify_failed_calls` (every failed call generated, rolled back or kept, cleaner.purify.failed_calls).
RECORD_VERSION = 4


def trajectory_key(problem_id: str, sample: int, saar: bool) -> str:
    return f"{problem_id}#{sample}#{'saar' if saar else 'nosaar'}"


def mask_segments(mask: list[int]) -> list[tuple[int, int, int]]:
    """Maximal runs of equal mask values as (start, end, value): mask 1 = model tokens, 0 = context."""
    segments = []
    start = 0
    for index in range(1, len(mask) + 1):
        if index == len(mask) or mask[index] != mask[start]:
            segments.append((start, index, mask[start]))
            start = index
    return segments


def response_pieces(response_ids: list[int], mask: list[int], spliced_spans: list, tokenizer) -> list[dict[str, Any]]:
    """The response cut at mask changes and spliced-span edges, each piece decoded.

    A piece is `{role, turn, start, end, text, spliced_attempt, spliced_kind}`: role "assistant" (mask 1) or
    "context" (tool responses and chat-template boundaries, mask 0); `turn` counts assistant turns (0-based, the
    coordinate of `rollback_events[].position`); `spliced_attempt` is the resample number the tokens came
    from, or None for first-attempt tokens, and `spliced_kind` how they were spliced (`shallow`, `deep`,
    `exhausted`; None for first-attempt tokens). The report renders trajectories from these pieces alone.
    """
    cuts = {0, len(mask)}
    for start, end, _, _ in spliced_spans:
        cuts.update((start, end))
    cuts.update(start for start, _, _ in mask_segments(mask))
    cuts = sorted(c for c in cuts if 0 <= c <= len(mask))
    splice_at = {}
    for start, end, attempt, kind in spliced_spans:
        for index in range(start, end):
            splice_at[index] = (attempt, kind)
    pieces, turn = [], -1
    for start, end in zip(cuts, cuts[1:]):
        is_model = bool(mask[start])
        if is_model and (not pieces or pieces[-1]["role"] != "assistant"):
            turn += 1
        pieces.append(
            {
                "role": "assistant" if is_model else "context",
                "turn": turn,
                "start": start,
                "end": end,
                "text": tokenizer.decode(response_ids[start:end], skip_special_tokens=False),
                "spliced_attempt": splice_at.get(start, (None, None))[0],
                "spliced_kind": splice_at.get(start, (None, None))[1],
            }
        )
    return pieces


@dataclass(frozen=True)
class CallTiming:
    generate_calls: int
    generated_tokens: int  # every sampled token, including resamples SAAR threw away
    generate_s: float


def build_record(
    *,
    problem,
    sample: int,
    saar: bool,
    seed: int,
    output,
    tokenizer,
    reward: dict[str, Any],
    timing: CallTiming,
    latency_s: float,
) -> dict[str, Any]:
    """The JSONL record of one finished trajectory (`output` is verl's AgentLoopOutput)."""
    response_ids = list(output.response_ids)
    mask = list(output.response_mask)
    if len(mask) != len(response_ids):
        raise ValueError(f"response_mask has {len(mask)} entries for {len(response_ids)} response tokens")
    extra = output.extra_fields or {}
    missing = [key for key in (*EXTRA_FIELD_KEYS, *TURN_FIELD_KEYS, FAILED_CALLS_KEY) if key not in extra]
    if missing:
        raise ValueError(f"agent loop output lacks SAAR stats {missing}: is agent_name a CLEANER loop?")
    pieces = response_pieces(response_ids, mask, extra[PREFIX + "spliced_spans"], tokenizer)
    record = {
        "version": RECORD_VERSION,
        "key": trajectory_key(problem.problem_id, sample, saar),
        "uid": problem.problem_id,  # the n samples of a problem share it (as `cleaner eval` expects)
        "problem_id": problem.problem_id,
        "sample": sample,
        "saar": saar,
        "seed": seed,
        "data_source": problem.data_source,
        "ground_truth": problem.ground_truth,
        "prompt_ids": list(output.prompt_ids),
        "response_ids": response_ids,
        "response_mask": mask,
        "response_logprobs": list(output.response_logprobs) if output.response_logprobs is not None else None,
        "prompt_text": tokenizer.decode(list(output.prompt_ids), skip_special_tokens=False),
        # What the reward function scored (verl decodes without special tokens).
        "response": tokenizer.decode(response_ids, skip_special_tokens=True),
        "pieces": pieces,
        "num_turns": int(output.num_turns),
        "timing": {
            "latency_s": latency_s,
            "generate_calls": timing.generate_calls,
            "generated_tokens": timing.generated_tokens,
            "generate_s": timing.generate_s,
        },
    }
    # Flat, like verl's validation dump: every saar_* field and the reward keys (score, acc, pred, ...).
    # The reward may echo the scalar saar_* statistics it was given; they must agree with the loop's.
    record.update({key: extra[key] for key in EXTRA_FIELD_KEYS})
    record.update({key: extra[key] for key in TURN_FIELD_KEYS})  # the purification modes and the audit read them
    record[FAILED_CALLS_KEY] = extra[FAILED_CALLS_KEY]  # the failed-call audit reads it
    clashes = sorted(key for key in set(reward) & set(record) if reward[key] != record[key])
    if clashes:
        raise ValueError(f"reward keys {clashes} clash with trajectory record fields")
    record.update(reward)
    if "score" not in record:
        raise ValueError("the reward has no `score`")
    return record
