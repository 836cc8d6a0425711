"""Trajectories for the report: `cleaner rollout` JSONL records, or rows of verl's validation dump.

A verl dump row (`input`, `output`, `score`, reward keys, maybe `saar_*`) has no token ids or mask, so it
becomes a record with one assistant piece holding the whole output; its provenance (if the trainer
exported `saar_rollback_events`) is kept, so the rollback diffs still render.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cleaner.saar.stats import PREFIX
from cleaner.trajectory.store import read_records


def _from_verl_row(row: dict[str, Any], where: str) -> dict[str, Any]:
    if "output" not in row or "score" not in row:
        raise ValueError(
            f"{where}: neither a `cleaner rollout` record (no `pieces`) nor a verl dump row (no `output`/`score`)"
        )
    uid = str(row.get("uid", row.get("index", where)))
    return {
        **row,
        "key": where,
        "problem_id": uid.rsplit("_", 2)[0] if uid.count("_") >= 2 else uid,
        "sample": 0,
        "saar": bool(row.get(PREFIX + "rollback_enabled", False)),
        "prompt_text": str(row.get("input", "")),
        "pieces": [
            {"role": "assistant", "turn": 0, "start": 0, "end": 0, "text": str(row["output"]), "spliced_attempt": None}
        ],
        "ground_truth": row.get("gts", row.get("ground_truth")),
        "timing": None,
    }


def load_trajectories(paths: list[Path]) -> list[dict[str, Any]]:
    """Records from every file (a directory means all `*.jsonl` in it), in file order."""
    files = []
    for path in paths:
        if path.is_dir():
            files += sorted(path.glob("*.jsonl"))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"no trajectories at {path}")
    trajectories = []
    for file in files:
        for number, row in enumerate(read_records(file), start=1):
            trajectories.append(row if "pieces" in row else _from_verl_row(row, f"{file.name}:{number}"))
    if not trajectories:
        raise ValueError(f"no trajectories in {', '.join(str(p) for p in paths)}")
    return trajectories
