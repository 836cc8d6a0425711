"""Read an offline wandb run back the way wandb itself reads it: `wandb leet inspect --json` prints each record of
the run's `.wandb` transaction log as one JSON line (wandb 0.31 reads the log in its Go core; the Python SDK has
no reader of its own any more)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path


def wandb_history(run_file: Path) -> dict[int, dict]:
    """The metrics logged at each step (`wandb.log(..., step=N)`), wandb's own `_`-prefixed bookkeeping left out."""
    inspected = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert inspected.returncode == 0, inspected.stderr[-3000:]
    steps: dict[int, dict] = defaultdict(dict)
    for line in inspected.stdout.splitlines():
        record = json.loads(line)
        if record.get("type") == "history":
            history = record["history"]
            items = {key: value for key, value in history["item"].items() if not key.startswith("_")}
            steps[int(history["step"]["num"])].update(items)
    return dict(steps)
