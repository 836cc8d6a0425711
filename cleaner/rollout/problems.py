"""Problems for a rollout: rows in verl's RLHF format, read from parquet (or JSONL)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cleaner.data.rows import read_rows

REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model")


@dataclass(frozen=True)
class Problem:
    problem_id: str  # stable across runs: extra_info.problem_id, else extra_info.index, else the row number
    data_source: str
    prompt: list[dict[str, Any]]  # chat messages
    ground_truth: Any
    extra_info: dict[str, Any] = field(default_factory=dict)
    tools_kwargs: dict[str, Any] = field(default_factory=dict)
    agent_name: str | None = None


def load_problems(path: Path, limit: int | None = None) -> list[Problem]:
    problems = []
    for row_number, row in enumerate(read_rows(path)):
        missing = [column for column in REQUIRED_COLUMNS if column not in row]
        if missing:
            raise ValueError(f"{path} row {row_number}: missing column(s) {missing} (verl RLHF format)")
        prompt = row["prompt"]
        if not isinstance(prompt, list) or not all(isinstance(m, dict) and "role" in m for m in prompt):
            raise ValueError(f"{path} row {row_number}: `prompt` must be a list of chat messages")
        reward_model = row["reward_model"]
        if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
            raise ValueError(f"{path} row {row_number}: `reward_model.ground_truth` is missing")
        # Parquet gives every row all the struct's keys, None where that row had none.
        extra_info = {key: value for key, value in (row.get("extra_info") or {}).items() if value is not None}
        problem_id = str(extra_info.get("problem_id", extra_info.get("index", row_number)))
        problems.append(
            Problem(
                problem_id=problem_id,
                data_source=str(row["data_source"]),
                prompt=prompt,
                ground_truth=reward_model["ground_truth"],
                extra_info=extra_info,
                tools_kwargs=dict(extra_info.get("tools_kwargs") or row.get("tools_kwargs") or {}),
                agent_name=row.get("agent_name"),
            )
        )
    ids = [p.problem_id for p in problems]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: problem ids are not unique (set extra_info.problem_id or extra_info.index)")
    return problems[:limit] if limit is not None else problems
