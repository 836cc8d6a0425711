"""How similar a failed call's code is to its successful replacement (decides shallow vs deep).

Only the *code* is compared, never the JSON wrapper around it: the shared `{"name": ..., "arguments":
{"code": ...}}` boilerplate would inflate any ratio (a defect of the reference code).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Sequence

# A small Python lexer: names, numbers, string literals (kept whole), comments, then any other symbol.
# Regex-based on purpose: failed code is often not valid Python, and `tokenize` would reject it.
_PY_TOKEN = re.compile(
    r"""
    (?P<comment>\#[^\n]*)
    | (?P<string>(?:[rRbBuUfF]{0,2})(?:\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
    | (?P<name>[A-Za-z_]\w*)
    | (?P<number>\d[\w.]*)
    | (?P<symbol>\S)
    """,
    re.VERBOSE,
)
# The code of a malformed call: a JSON `"code"` member whose string runs to its closing quote or the text's end,
# or an XML `<parameter=code>` (qwen3_coder) block.
_JSON_CODE_MEMBER = re.compile(r'"code"\s*:\s*"((?:\\.|[^"\\])*)')
_XML_CODE_PARAMETER = re.compile(r"<parameter=code>(.*?)(?:</parameter>|$)", re.DOTALL)


def call_code(arguments: str) -> str:
    """The code of one call, from its arguments as the parser passed them.

    Well-formed JSON: the `code` field, else the only string field (or the arguments themselves when they are a
    bare JSON string). A malformed call (a span the parser could not read, passed on whole) is searched for its
    code: a `"code": "..."` JSON member (read up to its closing quote, or to the end of the text if the call was
    cut off), else a `<parameter=code>` XML parameter. When no code can be found the raw text is compared.
    """
    try:
        parsed = json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        return _malformed_call_code(arguments)
    if isinstance(parsed, str):
        return parsed
    if isinstance(parsed, dict):
        if isinstance(parsed.get("code"), str):
            return parsed["code"]
        strings = [value for value in parsed.values() if isinstance(value, str)]
        if len(strings) == 1:
            return strings[0]
    return arguments


def _malformed_call_code(text: str) -> str:
    member = _JSON_CODE_MEMBER.search(text)
    if member is not None:
        return _json_string_body(member.group(1))
    parameter = _XML_CODE_PARAMETER.search(text)
    if parameter is not None:
        return parameter.group(1).strip("\n")
    return text


def _json_string_body(body: str) -> str:
    """Unescape a JSON string body; an escape cut off at the end of the text is dropped."""
    for end in range(len(body), max(len(body) - 6, -1), -1):
        try:
            return json.loads(f'"{body[:end]}"', strict=False)  # raw newlines in the string are common
        except json.JSONDecodeError:
            continue
    return body


def turn_code(arguments: Sequence[str]) -> str:
    """All executed calls of one turn, as one text (parallel calls are compared together)."""
    return "\n".join(call_code(item) for item in arguments)


def difflib_ratio(old: str, new: str) -> float:
    """The paper's measure: `difflib.SequenceMatcher` ratio over characters."""
    return difflib.SequenceMatcher(None, old, new).ratio()


def python_tokens(code: str) -> list[str]:
    """Python tokens with comments and layout dropped: edits to whitespace or comments do not count."""
    return [match.group() for match in _PY_TOKEN.finditer(code) if match.lastgroup != "comment"]


def token_ratio(old: str, new: str) -> float:
    """SequenceMatcher ratio over normalised Python tokens rather than characters."""
    old_tokens, new_tokens = python_tokens(old), python_tokens(new)
    if not old_tokens and not new_tokens:
        return 1.0
    return difflib.SequenceMatcher(None, old_tokens, new_tokens, autojunk=False).ratio()


SIMILARITIES: dict[str, Callable[[str, str], float]] = {
    "difflib": difflib_ratio,
    "token": token_ratio,
}
