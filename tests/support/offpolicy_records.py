"""A purified SAAR-on record with a deep and a shallow splice, for the off-policy scoring tests."""

from __future__ import annotations

PROMPT = [101, 102, 103]
# turn 0: 4 tokens, all spliced in by a deep rollback; context (tool response) 2 tokens;
# turn 1: 3 tokens, the last 2 spliced in by a shallow rollback.
RESPONSE = [11, 12, 13, 14, 90, 91, 21, 22, 23]
MASK = [1, 1, 1, 1, 0, 0, 1, 1, 1]
BEHAVIOUR = [-0.5, -0.1, -2.0, -0.3, 0.0, 0.0, -0.2, -1.0, -0.05]


def record() -> dict:
    return {
        "key": "p0#0#saar",
        "prompt_ids": PROMPT,
        "response_ids": RESPONSE,
        "response_mask": MASK,
        "response_logprobs": BEHAVIOUR,
        "pieces": [
            {"role": "assistant", "turn": 0, "start": 0, "end": 4},
            {"role": "context", "turn": 0, "start": 4, "end": 6},
            {"role": "assistant", "turn": 1, "start": 6, "end": 7},
            {"role": "assistant", "turn": 1, "start": 7, "end": 9},
        ],
        "saar_spliced_spans": [[0, 4, 1], [7, 9, 2]],
        "saar_rollback_events": [
            {"position": 0, "mode": "deep", "log_is_ratio": None},
            {"position": 1, "mode": "shallow", "log_is_ratio": None},
        ],
    }
