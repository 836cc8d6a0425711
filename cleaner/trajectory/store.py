"""Reading and writing rollout files: append-only JSONL of trajectory records, resumable after a kill."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a rollout file (a torn last line from an interrupted run is skipped)."""
    records = []
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):  # no trailing newline: the writer was killed mid-line
                logger.warning("%s: ignoring the torn last line of an interrupted run", path)
                continue
            raise ValueError(f"{path}:{number}: corrupt record (not JSON)") from None
    return records


class RecordFile:
    """Append-only JSONL; on open, drops a torn last line and reports which trajectories are done."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.done: set[str] = set()
        if path.exists():
            self._drop_torn_tail()
            self.done = {record["key"] for record in read_records(path)}
        self._handle = open(path, "a", encoding="utf-8")

    def _drop_torn_tail(self) -> None:
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as handle:
                handle.truncate(keep)
            logger.warning(
                "%s: dropped a torn last line (%d bytes) left by an interrupted run", self.path, len(data) - keep
            )

    def append(self, record: dict[str, Any]) -> None:
        self._handle.write(json.dumps(record, default=_jsonable, ensure_ascii=False) + "\n")
        self._handle.flush()
        self.done.add(record["key"])

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> RecordFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
