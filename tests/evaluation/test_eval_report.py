"""`cleaner eval score` on a verl-format validation dump and on `cleaner rollout` JSONL."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from cleaner.evaluation.generations import load_samples
from cleaner.evaluation.report import results_table, summarize
from cleaner.saar.outcome import ErrorCategory
from cleaner.saar.stats import TrajectoryStats
from support.cli import run_cli


def saar_fields(failures: dict[str, int] | None = None, **counters: int) -> dict:
    """A trajectory's saar_* fields, as the agent loop writes them (the reward echoes them into verl's dump)."""
    stats = TrajectoryStats(**counters)
    for category, count in (failures or {}).items():
        for _ in range(count):
            stats.count_failure(ErrorCategory(category))
    return stats.to_extra_fields()


def verl_dump(directory: Path) -> Path:
    """What verl 0.9.1's v1 trainer writes to validation_data_dir/<step>.jsonl: uid = <prompt>_<session>_<index>."""
    directory.mkdir(parents=True)
    lines = []
    # problem A: 3 of 4 right, answers 42,42,42,41; problem B: 0 of 4, answers 7,8,8,None
    for session, (acc, pred) in enumerate([(1, "42"), (1, "42"), (1, "42"), (0, "41")]):
        lines.append(
            {
                "input": "user What is A?",
                "output": "...",
                "gts": "42",
                "score": 2.0 * acc - 1,
                "step": 0,
                "reward": 2.0 * acc - 1,
                "acc": bool(acc),
                "pred": pred,
                "uid": f"1f0c-aa_{session}_0",
                **saar_fields(
                    {"exception": 1},
                    rollbacks_triggered=1,
                    rollbacks_recovered=acc,
                    purified_errors=acc,
                    spliced_tokens=10 * acc,
                    response_tokens=100,
                ),
            }
        )
    for session, pred in enumerate(["7", "8", "8", None]):
        lines.append(
            {
                "input": "user What is B?",
                "output": "...",
                "gts": "9",
                "score": -1.0,
                "step": 0,
                "reward": -1.0,
                "acc": False,
                "pred": pred,
                "uid": f"77e2-bb_{session}_0",
                **saar_fields({"timeout": 2}, response_tokens=100),
            }
        )
    (directory / "0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return directory


def test_verl_dump_table(tmp_path, capsys):
    dump = verl_dump(tmp_path / "aime24")
    out = tmp_path / "results"
    assert (
        run_cli(
            "eval", "score", "--generations", f"AIME2024={dump}", "--output-dir", str(out), "--run", "test_time_saar=on"
        )
        == 0
    )
    saved = json.loads((out / "results.json").read_text())
    assert saved["run"]["test_time_saar"] == "on"
    [result] = saved["benchmarks"]
    assert (result["benchmark"], result["problems"], result["samples"], result["n"]) == ("AIME2024", 2, 8, 4)
    assert result["pass_at"]["pass@1"] == pytest.approx((0.75 + 0.0) / 2)
    assert result["pass_at"]["pass@2"] == pytest.approx((1.0 + 0.0) / 2)  # C(1,2)=0: A is always solved
    assert result["pass_at"]["pass@4"] == pytest.approx(0.5)
    assert result["maj_at_n"] == pytest.approx(0.5)  # A: "42" wins (right); B: "8" wins (wrong)
    saar = result["saar"]
    assert (saar["saar_rollbacks_triggered"], saar["saar_rollbacks_recovered"]) == (4, 3)
    assert saar["saar_recovery_rate"] == pytest.approx(0.75)
    assert saar["saar_tool_errors_sampled_per_traj"] == pytest.approx((4 * 1 + 4 * 2) / 8)
    assert saar["saar_tool_errors_kept_per_traj"] == pytest.approx((4 * 1 + 4 * 2 - 3) / 8)
    assert saar["saar_spliced_token_fraction"] == pytest.approx(30 / 800)
    assert "saar_rollback_events" not in saar
    with (out / "results.csv").open() as handle:
        [row] = list(csv.DictReader(handle))
    assert row["benchmark"] == "AIME2024" and float(row["pass@1"]) == pytest.approx(0.375) and row["maj@4"] == "0.5"
    assert "evaluation" in capsys.readouterr().out
    console = Console(width=250, record=True, file=io.StringIO())
    console.print(results_table(summarize(load_samples(dump, "AIME2024"))))
    lines = console.export_text().splitlines()
    header = next(line for line in lines if "pass@1" in line)
    row = next(line for line in lines if "AIME2024" in line)
    cells = dict(zip(header.split("┃")[1:-1], row.split("│")[1:-1]))
    cells = {key.strip(): value.strip() for key, value in cells.items()}
    assert (cells["pass@1"], cells["pass@4"], cells["maj@4"], cells["saar_tool_errors_kept_per_traj"]) == (
        "37.5",
        "50.0",
        "50.0",
        "1.125",
    )
    assert "saar_fail_timeout" not in header  # printed table: the main SAAR columns only


def test_rollout_jsonl_groups_by_uid_and_splits_benchmarks(tmp_path):
    path = tmp_path / "rollout.jsonl"
    records = [
        {
            "data_source": "AIME2025",
            "uid": "p1",
            "score": 1.0,
            "acc": True,
            "pred": "3",
            **saar_fields(rollbacks_triggered=2),
        },
        {"data_source": "AIME2025", "uid": "p1", "score": -1.0, "acc": False, "pred": "4", **saar_fields()},
        {"data_source": "gpqa_diamond", "index": 5, "score": 1.0, "acc": True, "pred": "C"},
        {"data_source": "gpqa_diamond", "index": 5, "score": 1.0, "acc": True, "pred": "C"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    results = {r.benchmark: r for r in summarize(load_samples(path))}
    assert results["AIME2025"].pass_at == {"pass@1": 0.5, "pass@2": 1.0}
    assert results["AIME2025"].saar["saar_rollbacks_triggered"] == 2
    assert results["AIME2025"].saar["saar_recovery_rate"] == 0.0
    assert results["gpqa_diamond"].saar == {}  # no saar_* fields: no SAAR columns
    assert results["gpqa_diamond"].pass_at["pass@1"] == 1.0 and results["gpqa_diamond"].problems == 1


def test_tool_errors_count_the_models_failures_not_the_judges(tmp_path):
    path = tmp_path / "rollout.jsonl"
    record = {
        "data_source": "AIME2025",
        "uid": "p1",
        "score": 1.0,
        "acc": True,
        "pred": "3",
        **saar_fields({"syntax_error": 2, "judge_unreachable": 5}, infra_errors=5),
    }
    path.write_text(json.dumps(record) + "\n")
    [result] = summarize(load_samples(path))
    assert result.saar["saar_tool_errors_sampled_per_traj"] == 2.0
    assert result.saar["saar_infra_errors"] == 5


def test_a_partial_set_of_saar_fields_is_named_in_the_error(tmp_path):
    path = tmp_path / "rollout.jsonl"
    record = {"data_source": "AIME2025", "uid": "p1", "score": 1.0, "acc": True, "saar_rollbacks_triggered": 1}
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(ValueError, match="lacks .*saar_tool_calls"):
        summarize(load_samples(path))


def test_rollout_records_of_both_saar_modes_are_reported_apart(tmp_path):
    path = tmp_path / "rollout.jsonl"
    records = [
        {"data_source": "AIME2024", "uid": "p1", "saar": saar, "score": 1.0, "acc": ok, "pred": "1"}
        for saar, ok in ((True, True), (True, True), (False, False), (False, True))
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    results = {r.benchmark: r.pass_at["pass@1"] for r in summarize(load_samples(path))}
    assert results == {"AIME2024 (SAAR on)": 1.0, "AIME2024 (SAAR off)": 0.5}


def test_records_without_a_benchmark_or_acc_are_rejected(tmp_path):
    path = tmp_path / "0.jsonl"
    path.write_text(json.dumps({"input": "q", "output": "a", "score": 1.0, "acc": True, "uid": "x_0_0"}) + "\n")
    with pytest.raises(ValueError, match="0.jsonl:1: no data_source"):
        load_samples(path)
    path.write_text(json.dumps({"data_source": "AIME2024", "score": 1.0, "uid": "x_0_0"}) + "\n")
    with pytest.raises(ValueError, match="no `acc` field"):
        load_samples(path)


def test_a_directory_uses_its_latest_dump(tmp_path):
    dump = verl_dump(tmp_path / "val")
    (dump / "10.jsonl").write_text(
        json.dumps({"input": "q", "output": "a", "gts": "1", "score": 1.0, "acc": True, "uid": "z_0_0", "step": 10})
        + "\n"
    )
    samples = load_samples(dump, "AIME2024")
    assert len(samples) == 1 and samples[0].problem == "z"


def test_dump_written_by_verl_itself(tmp_path):
    """The file verl 0.9.1's own `_write_generations` writes at the end of `_validate`."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    keys = [f"prompt-a_{i}_0" for i in range(4)] + [f"prompt-b_{i}_0" for i in range(4)]
    acc = [True, False, False, False, True, True, True, True]
    PPOTrainer._write_generations(
        inputs=["question a"] * 4 + ["question b"] * 4,
        outputs=["..."] * 8,
        gts=["1"] * 4 + ["2"] * 4,
        scores=[1.0 if ok else -1.0 for ok in acc],
        reward_extra_infos_dict={
            "reward": [1.0 if ok else -1.0 for ok in acc],
            "acc": acc,
            "pred": ["1", "3", "3", "4", "2", "2", "2", "5"],
            "uid": keys,
        },
        dump_path=str(tmp_path),
        global_steps=0,
    )
    [result] = summarize(load_samples(tmp_path, "AIME2025"))
    assert (result.problems, result.n) == (2, 4)
    assert result.pass_at["pass@1"] == pytest.approx((0.25 + 1.0) / 2)
    assert result.maj_at_n == pytest.approx(0.5)  # a: "3" wins (wrong); b: "2" wins (right)


def test_a_model_that_never_answers_has_maj_at_n_zero(tmp_path):
    """The reward extracted no answer from any sample (`pred` empty): the majority vote is wrong, not missing.

    What the 0.5B model gave in `make eval-cpu` on GPQA: a bare letter without \\boxed{}."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    RayPPOTrainer._write_generations(
        inputs=["question a"] * 2 + ["question b"] * 2,
        outputs=["D", "A", "B", "B"],
        gts=["C", "C", "B", "B"],
        scores=[-1.0] * 4,
        reward_extra_infos_dict={"reward": [-1.0] * 4, "acc": [False] * 4, "pred": [""] * 4},
        dump_path=str(tmp_path),
        global_steps=0,
    )
    [result] = summarize(load_samples(tmp_path, "gpqa-diamond"))
    assert (result.problems, result.n, result.maj_at_n) == (2, 2, 0.0)


def test_the_printed_table_keeps_every_header_and_name_whole_in_a_log_file(tmp_path, capsys, monkeypatch):
    """`make eval-cpu` and cluster jobs write the table to a file, where rich assumes 80 columns."""
    monkeypatch.delenv("COLUMNS", raising=False)
    dump = verl_dump(tmp_path / "val")
    assert (
        run_cli("eval", "score", "--generations", f"livecodebench-v6 (SAAR on)={dump}", "--output-dir", str(tmp_path))
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "┃" in line and "benchmark" in line)
    assert [cell.strip() for cell in header.split("┃")[1:4]] == ["benchmark", "problems", "samples"]
    for column in ("pass@1", "pass@4", "maj@4", "saar_rollbacks_triggered", "saar_tool_errors_kept_per_traj"):
        assert f" {column} " in header
    assert any("livecodebench-v6 (SAAR on)" in line for line in lines)
