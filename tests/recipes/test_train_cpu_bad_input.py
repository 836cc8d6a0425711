"""recipe/cleaner/train_cpu.sh refuses bad input before starting anything, says what is wrong, and leaves nothing running."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _run_train_cpu(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[int]]:
    """Run the recipe in a session of its own; return its result and the pids still in that session afterwards."""
    process = subprocess.Popen(
        [str(ROOT / "recipe/cleaner/train_cpu.sh")],
        env={**os.environ, "OUTPUT_DIR": str(tmp_path / "out"), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    stdout, stderr = process.communicate(timeout=240)
    left = _session_members(process.pid)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr), left


def _session_members(session_id: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session_id:  # field 6 of /proc/PID/stat: the session id
            members.append(int(entry.name))
    return members


def test_a_directory_that_is_not_a_model_is_named_before_anything_starts(tmp_path):
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    (not_a_model / "notes.txt").write_text("no config.json here")
    result, left = _run_train_cpu(tmp_path, MODEL_PATH=str(not_a_model))
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(not_a_model) in errors[0] and "config.json" in errors[0], result.stderr
    assert not (tmp_path / "out" / "judge.log").exists()  # no judge was started
    assert left == []


def test_an_unreachable_judge_stops_the_run_before_verl_starts(tmp_path, tiny_model_dir):
    from code_judge.local import free_port

    url = f"http://127.0.0.1:{free_port()}"
    result, left = _run_train_cpu(tmp_path, MODEL_PATH=str(tiny_model_dir), JUDGE_URL=url)
    assert result.returncode == 1
    assert f"judge: no answer from {url}/ping" in result.stderr, result.stderr
    assert "ray init" not in result.stdout + result.stderr
    assert left == []
