"""Problems for a rollout: rows in verl's RLHF format, read from parquet (or JSONL)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def _plain(value: Any) -> Any:
    """numpy arrays / pyarrow scalars from parquet as plain lists and dicts (JSON-serialisable)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pandas as pd

        return [_plain(row) for row in pd.read_parquet(path).to_dict(orient="records")]
    if path.suffix in (".jsonl", ".json"):
        rows = []
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
        return rows
    raise ValueError(f"{path}: expected a .parquet or .jsonl file of problems")


def load_problems(path: Path, limit: int | None = None) -> list[Problem]:
    if not path.is_file():
        raise FileNotFoundError(f"problem file not found: {path}")
    problems = []
    for row_number, row in enumerate(_read_rows(path)):
        missing = [column for column in REQUIRED_COLUMNS if column not in row]
        if missing:
            raise ValueError(f"{path} row {row_number}: missing column(s) {missing} (verl RLHF format)")
        prompt = row["prompt"]
        if not isinstance(prompt, list) or not all(isinstance(m, dict) and "role" in m for m in prompt):
            raise ValueError(f"{path} row {row_number}: `prompt` must be a list of chat messages")
        reward_model = row["reward_model"]
        if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
            raise ValueError(f"{path} row {row_number}: `reward_model.ground_truth` is missing")
        extra_info = dict(row.get("extra_info") or {})
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
