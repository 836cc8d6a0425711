"""Locate the model's final answer in a decoded multi-turn response.

verl decodes the whole response with `skip_special_tokens=True`, so the text holds every assistant turn and
every tool response. With Qwen tokenizers `<think>`, `<tool_call>` and `<tool_response>` are not "special" and
survive decoding, while the `<|im_start|>role` headers are dropped. Only the final assistant turn may answer:
a `\\boxed{}` printed by a tool, written inside a tool call or thought about inside `<think>` does not count.
"""

from __future__ import annotations

import re

TOOL_RESPONSE_END = "</tool_response>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
# A complete tool call, or one cut off by the length limit (no closing tag up to the end of the text).
_TOOL_CALL = re.compile(r"<tool_call>.*?(?:</tool_call>|\Z)", re.DOTALL)
_PYTHON_FENCE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
_BOX_COMMANDS = ("\\boxed", "\\fbox")


def final_turn(response: str) -> str:
    """The visible text of the last assistant turn: after the last tool response, outside reasoning and calls.

    Returns "" when the last turn's reasoning never closed (the response was cut while thinking).
    """
    turn = response.rsplit(TOOL_RESPONSE_END, 1)[-1]
    if THINK_CLOSE in turn:
        turn = turn.rsplit(THINK_CLOSE, 1)[1]
    elif THINK_OPEN in turn:
        return ""
    return _TOOL_CALL.sub("", turn)


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`) with balanced braces; `\\boxed 5` also counts.

    None when there is no box or the last one is never closed.
    """
    start = max(text.rfind(command) for command in _BOX_COMMANDS)
    if start < 0:
        return None
    command = next(c for c in _BOX_COMMANDS if text.startswith(c, start))
    rest = text[start + len(command) :]
    if rest.startswith(" ") and not rest.lstrip().startswith("{"):
        # `\boxed 5`: the argument runs to the next whitespace or `$`.
        match = re.match(r"\s+([^\s$]+)", rest)
        return match.group(1) if match else None
    rest = rest.lstrip()
    if not rest.startswith("{"):
        return None
    depth = 0
    for index, char in enumerate(rest):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return rest[1:index].strip()
    return None


def last_python_block(text: str) -> str | None:
    """The body of the last fenced ```python block, or None when there is none."""
    blocks = _PYTHON_FENCE.findall(text)
    if not blocks:
        return None
    code = blocks[-1]
    return code if code.strip() else None
