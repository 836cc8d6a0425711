"""Load generated trajectories into one shape, from either source:

- verl's validation dump (`trainer.validation_data_dir/<step>.jsonl`, one line per trajectory: `input`,
  `output`, `gts`, `score`, `step`, `uid` = "<prompt uuid>_<session>_<index>", plus every key the reward
  function returned, e.g. `acc`, `pred`, `data_source`, `saar_*`);
- `cleaner rollout` JSONL (one record per trajectory: `data_source`, `uid` or `index`, `score`, `acc`,
  `pred`, `saar_*` statistics).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cleaner.data.rows import iter_jsonl
from cleaner.saar.stats import PREFIX

logger = logging.getLogger(__name__)

VERL_SAMPLE_KEY = re.compile(r"^(?P<prompt>.+)_(?P<session>\d+)_(?P<index>\d+)$")


@dataclass(frozen=True)
class Sample:
    benchmark: str
    problem: str  # identifies the prompt: the n samples of one problem share it
    correct: bool
    score: float
    answer: str | None = None  # the extracted answer (`pred`), for majority voting
    response: str | None = None
    ground_truth: str | None = None
    question_id: str | None = None
    saar: dict[str, float] = field(default_factory=dict)  # the trajectory's scalar saar_* statistics


def generation_file(path: Path) -> Path:
    """A JSONL file as given, or the latest-step `<step>.jsonl` of a verl validation directory."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"no generations at {path}")
    steps = sorted((int(p.stem), p) for p in path.glob("*.jsonl") if p.stem.isdigit())
    if not steps:
        raise FileNotFoundError(f"{path} holds no <step>.jsonl validation dump")
    if len(steps) > 1:
        logger.info("%s: %d dumps, using the latest (step %d)", path, len(steps), steps[-1][0])
    return steps[-1][1]


def load_samples(path: Path, benchmark: str | None = None) -> list[Sample]:
    source = generation_file(path)
    samples = [sample_from_record(record, benchmark, where) for where, record in iter_jsonl(source)]
    if not samples:
        raise ValueError(f"{source} holds no trajectories")
    return samples


def sample_from_record(record: dict[str, Any], benchmark: str | None, where: str) -> Sample:
    name = benchmark or record.get("data_source")
    if not name:
        raise ValueError(f"{where}: no data_source in the record; label the file (NAME=PATH)")
    if isinstance(record.get("saar"), bool):
        # `cleaner rollout --saar both` writes both modes into one file: they are separate results.
        name = f"{name} (SAAR {'on' if record['saar'] else 'off'})"
    if "acc" not in record:
        raise ValueError(f"{where}: no `acc` field (the reward function must return acc)")
    extra = record.get("extra_info") if isinstance(record.get("extra_info"), dict) else {}
    question_id = record.get("question_id") or extra.get("question_id")
    return Sample(
        benchmark=str(name),
        problem=_problem_key(record, where),
        correct=float(record["acc"]) >= 1.0,
        score=float(record.get("score", 0.0)),
        answer=_text_or_none(record.get("pred")),
        response=_text_or_none(record.get("output", record.get("response"))),
        ground_truth=_text_or_none(record.get("gts", record.get("ground_truth"))),
        question_id=_text_or_none(question_id),
        saar=_saar_numbers(record),
    )


def _saar_numbers(record: dict[str, Any]) -> dict[str, float]:
    """The scalar saar_* statistics (span and event lists stay out of the table)."""
    return {
        key: float(value)
        for key, value in record.items()
        if key.startswith(PREFIX) and isinstance(value, (bool, int, float))
    }


def _problem_key(record: dict[str, Any], where: str) -> str:
    if record.get("uid") is not None:
        uid = str(record["uid"])
        match = VERL_SAMPLE_KEY.match(uid)
        return match["prompt"] if match and "output" in record else uid
    if record.get("index") is not None:
        return str(record["index"])
    if record.get("input"):
        return str(record["input"])
    raise ValueError(f"{where}: cannot tell which problem this is (no uid, index or input)")


def _text_or_none(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
