"""Turn the published Open-AgentRL training/eval rows into verl RLHF rows.

Output row: `data_source`, `prompt` (chat messages), `ability`, `reward_model` {style, ground_truth},
`extra_info` {index, split, question_id}, `agent_name`. Code ground truth is stored as a JSON string
(a test specification), so every row has the same parquet schema.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from cleaner.data.sources import (
    BOXED_HINT,
    CODE_SUBMIT_HINT,
    CODE_TOOL_HINT,
    LETTER_HINT,
    NO_TOOL_AGENT,
    NUMERIC_HINT,
    STDIO_HINT,
    TOOL_HINT,
    math_intro,
    rule_for,
)
from cleaner.names import AGENT_NAME
from cleaner.source_kinds import TaskKind

logger = logging.getLogger(__name__)

GPQA_LETTERS = ("A", "B", "C", "D")


class BadRowError(ValueError):
    """A row that cannot be converted; the message names the row and the problem."""

    def __init__(self, row_number: int, reason: str):
        super().__init__(f"row {row_number}: {reason}")
        self.row_number = row_number
        self.reason = reason


@dataclass(frozen=True)
class PrepareConfig:
    split: str = "train"
    use_tools: bool = True  # False: the no-tool baseline (no tool hints, single-turn agent)
    skip_bad: bool = False  # drop bad rows (counted) instead of failing on the first one
    data_source: str | None = None  # for eval files without a data_source column

    def __post_init__(self) -> None:
        if self.split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', not {self.split!r}")


@dataclass(frozen=True)
class PrepareResult:
    rows: list[dict[str, Any]]
    skipped: list[BadRowError]


def prepare_rows(rows: Iterable[dict[str, Any]], config: PrepareConfig, total: int | None = None) -> PrepareResult:
    prepared: list[dict[str, Any]] = []
    skipped: list[BadRowError] = []
    for row_number, row in enumerate(tqdm(rows, total=total, desc="prepare", unit="row")):
        try:
            prepared.append(prepare_row(row, row_number, config))
        except BadRowError as error:
            if not config.skip_bad:
                raise
            skipped.append(error)
    if skipped:
        logger.warning("skipped %d bad rows; first: %s", len(skipped), skipped[0])
    return PrepareResult(prepared, skipped)


def prepare_row(row: dict[str, Any], row_number: int, config: PrepareConfig) -> dict[str, Any]:
    data_source = row.get("data_source") or config.data_source
    if not data_source:
        raise BadRowError(row_number, "no data_source (column missing or empty; pass --data-source for eval files)")
    try:
        rule = rule_for(str(data_source))
    except ValueError as exc:
        raise BadRowError(row_number, str(exc)) from exc
    builder = _BUILDERS[rule.kind]
    try:
        messages, ability, ground_truth, question_id = builder(row, config.use_tools, rule.numeric_answer)
    except (KeyError, TypeError, ValueError) as exc:
        raise BadRowError(row_number, f"data_source {data_source!r}: {_describe(exc)}") from exc
    return {
        "data_source": str(data_source),
        "prompt": messages,
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"index": row_number, "split": config.split, "question_id": question_id},
        "agent_name": AGENT_NAME if config.use_tools else NO_TOOL_AGENT,
    }


def _describe(exc: Exception) -> str:
    return f"missing column {exc}" if isinstance(exc, KeyError) else str(exc)


def _with_hints(row: dict[str, Any], hints: str) -> list[dict[str, str]]:
    """A training row's chat messages, with the hints appended to its last user message."""
    messages = row["prompt"]
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ValueError("prompt is not a non-empty list of chat messages")
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last_user is None or not str(messages[last_user].get("content") or "").strip():
        raise ValueError("prompt has no non-empty user message")
    result = [{"role": str(m["role"]), "content": str(m.get("content") or "")} for m in messages]
    result[last_user]["content"] += hints
    return result


def _user(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


def _ground_truth_field(row: dict[str, Any]) -> Any:
    reward_model = row["reward_model"]
    if isinstance(reward_model, str):
        reward_model = json.loads(reward_model)
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise ValueError("reward_model has no ground_truth")
    return reward_model["ground_truth"]


def _answer_text(value: Any, what: str) -> str:
    if value is None or isinstance(value, (dict, list)) or not str(value).strip():
        raise ValueError(f"{what} {value!r} is not a non-empty scalar answer")
    return str(value).strip()


def code_tests_json(value: Any) -> str:
    """Validate a code test specification and return it as canonical JSON.

    Form A: `inputs`/`outputs` lists of equal non-zero length, optional `fn_name` (stdin or call-based).
    Form B: `import_prefix`, `test_code`, `entry_point` strings (assertion-style tests).
    """
    spec = json.loads(value) if isinstance(value, str) else value
    if not isinstance(spec, dict):
        raise ValueError(f"code ground truth is not a JSON object: {str(value)[:80]!r}")
    if "inputs" in spec or "outputs" in spec:
        inputs, outputs = spec.get("inputs"), spec.get("outputs")
        if not isinstance(inputs, list) or not isinstance(outputs, list):
            raise ValueError("code ground truth: inputs and outputs must both be lists")
        if not inputs or len(inputs) != len(outputs):
            raise ValueError(f"code ground truth: {len(inputs)} inputs vs {len(outputs)} outputs")
        if spec.get("fn_name") is not None and not isinstance(spec["fn_name"], str):
            raise ValueError("code ground truth: fn_name must be a string")
    elif not all(isinstance(spec.get(key), str) and spec[key] for key in ("test_code", "entry_point")):
        raise ValueError("code ground truth has neither inputs/outputs nor test_code/entry_point")
    return json.dumps(spec, ensure_ascii=False, sort_keys=True)


def _math(row, use_tools, numeric_answer):
    ground_truth = _answer_text(_ground_truth_field(row), "ground_truth")
    hints = (TOOL_HINT if use_tools else "") + BOXED_HINT + (NUMERIC_HINT if numeric_answer else "")
    return _with_hints(row, hints), str(row.get("ability") or "math"), ground_truth, None


def _code(row, use_tools, _numeric_answer):
    ground_truth = code_tests_json(_ground_truth_field(row))
    hints = (CODE_TOOL_HINT if use_tools else "") + CODE_SUBMIT_HINT
    return _with_hints(row, hints), str(row.get("ability") or "code"), ground_truth, None


def _aime(row, use_tools, _numeric_answer):
    problem = row["Problem"] if "Problem" in row else row["problem"]
    answer = _answer_text(row["Answer"] if "Answer" in row else row["answer"], "answer")
    if not re.fullmatch(r"\d{1,3}", answer):
        raise ValueError(f"AIME answer {answer!r} is not an integer from 0 to 999")
    answer = str(int(answer))
    content = math_intro() + _answer_text(problem, "problem") + (TOOL_HINT if use_tools else "") + BOXED_HINT
    return _user(content), "math", answer, None


def _gpqa(row, use_tools, _numeric_answer):
    letter = _answer_text(row["solution"], "solution").upper()
    if letter not in GPQA_LETTERS:
        raise ValueError(f"GPQA solution {letter!r} is not one of {', '.join(GPQA_LETTERS)}")
    domain = _answer_text(row.get("domain") or "science", "domain")
    content = (
        math_intro(domain)
        + _answer_text(row["problem"], "problem")
        + (TOOL_HINT if use_tools else "")
        + BOXED_HINT
        + LETTER_HINT
    )
    return _user(content), domain, letter, None


def _livecodebench(row, use_tools, _numeric_answer):
    # Only the statement goes into the prompt: the hidden tests stay hidden (the reference pasted the
    # scoring tests into the prompt as examples).
    ground_truth = code_tests_json(_ground_truth_field(row))
    extra = row.get("extra_info") or {}
    if isinstance(extra, str):
        extra = json.loads(extra)
    question_id = extra.get("question_id") if isinstance(extra, dict) else None
    if not question_id:
        raise ValueError("extra_info has no question_id (needed to export LiveCodeBench results)")
    spec = json.loads(ground_truth)
    io_hint = "" if spec.get("fn_name") else STDIO_HINT
    content = (
        _answer_text(row["problem"], "problem") + io_hint + (CODE_TOOL_HINT if use_tools else "") + CODE_SUBMIT_HINT
    )
    return _user(content), str(row.get("ability") or "code"), ground_truth, str(question_id)


_BUILDERS = {
    TaskKind.MATH: _math,
    TaskKind.CODE: _code,
    TaskKind.AIME: _aime,
    TaskKind.GPQA: _gpqa,
    TaskKind.LCB: _livecodebench,
}
