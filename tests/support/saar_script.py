"""Test support: the scripted SAAR trajectories the agent-loop tests share (codes, turns, messages).

A scripted call's code declares its outcome (`# outcome: ...`, see `scripted_llm.OUTCOME_DIRECTIVE`); the
scripted tool answers every code with a distinct text (`tool_text`), so a test can find each attempt and each
error in a trajectory.
"""

from __future__ import annotations

from support.scripted_llm import scripted_outcome, scripted_tool_text, tool_call_text

# A first attempt that fails (NameError), a fix close to it (a shallow splice) and one far from it (deep).
FAILED = "total = sum(range(1, 11))\nprint(totl)\n# outcome: exception NameError"
SIMILAR_FIX = "total = sum(range(1, 11))\nprint(total)"
OTHER_FIX = "acc = 0\nfor k in range(11):\n    acc += k\nacc"
ANSWER = "<think>\nThe tool printed it.\n</think>\n\nThe total is \\boxed{55}."


def turn(reasoning: str, code: str | None = None, prose: str = "") -> str:
    """One assistant generation: a think block, optional prose, then a hermes call (none when `code` is None)."""
    text = f"<think>\n{reasoning}\n</think>\n\n{prose}"
    return text + tool_call_text(code) if code is not None else text


def tool_text(code: str) -> str:
    """What the scripted tool answers to `code`."""
    return scripted_tool_text(code, scripted_outcome(code))


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def tool_message(text: str) -> dict:
    return {"role": "tool", "content": text}
