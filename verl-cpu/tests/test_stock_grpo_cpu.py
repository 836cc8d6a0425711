"""Stock verl GRPO on CPU: `examples/grpo_cpu.sh` (verl's trainer, its single-turn agent loop, a function reward)
trains one step of the tiny model with only this package added to verl."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # Ray, verl's trainer and a model: about two minutes on a quiet 2-core machine

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "grpo_cpu.sh"


def test_one_grpo_step_of_stock_verl_on_cpu(tiny_model_dir, tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("VERL_")}
    # Only this package's plugin: no other verl plugin installed next to it is loaded.
    env.update(
        MODEL_PATH=str(tiny_model_dir),
        OUT_DIR=str(tmp_path),
        STEPS="1",
        PYTHON=sys.executable,
        VERL_USE_EXTERNAL_PLUGINS="verl_cpu",
        HF_HUB_OFFLINE="1",
    )
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    steps = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    metrics = steps[-1]["data"]
    assert steps[-1]["step"] == 1
    assert 0.0 <= metrics["critic/score/mean"] <= 1.0  # the function reward's 0/1 scores
    assert metrics["timing_s/gen"] > 0 and metrics["timing_s/update_actor"] > 0
    assert metrics["perf/total_num_tokens"] > 0
    assert "cleaner" not in result.stdout + result.stderr
