"""LiveCodeBench: program extraction, the official custom-evaluation export, and scoring on a real judge."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from cleaner.data.prepare import PrepareConfig, prepare_rows
from cleaner.data.rows import read_rows
from cleaner.evaluation.livecodebench import extract_program, hidden_tests, runnable_program
from support.cli import run_cli

SAMPLES = Path(__file__).resolve().parents[2] / "dataset" / "samples"
SUM_OK = "n = int(input())\nprint(n * (n + 1) // 2)\n"
SUM_WRONG = "n = int(input())\nprint(n * n)\n"
MAX_OK = "print(max(map(int, input().split())))\n"


def answer(code: str | None) -> str:
    tool_call = "<think>Let me test.\n```python\nprint('scratch')\n```\n</think>"
    return tool_call + ("\nFinal program:\n```python\n" + code + "```" if code else "\nI could not solve it.")


@pytest.fixture
def lcb_files(tmp_path):
    """The prepared sample set and a verl validation dump with 2 samples per question."""
    prepared = prepare_rows(read_rows(SAMPLES / "livecodebench-v6.sample.jsonl"), PrepareConfig(split="test")).rows
    dataset = tmp_path / "lcb.parquet"
    pd.DataFrame(prepared).to_parquet(dataset)
    gts = [row["reward_model"]["ground_truth"] for row in prepared]
    programs = [(0, SUM_OK), (0, SUM_WRONG), (1, MAX_OK), (1, None)]
    dump = tmp_path / "val"
    dump.mkdir()
    lines = [
        {
            "input": f"question {q}",
            "output": answer(code),
            "gts": gts[q],
            "score": 0.0,
            "acc": False,
            "step": 0,
            "uid": f"q{q}-uuid_{i}_0",
        }
        for i, (q, code) in enumerate(programs)
    ]
    (dump / "0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return dataset, dump


def test_extract_program_takes_the_last_block_after_thinking():
    assert extract_program(answer(SUM_OK)) == SUM_OK
    assert extract_program(answer(None)) is None
    assert extract_program("```python\na = 1\n```\n```python\nb = 2\n```") == "b = 2\n"


def test_export_is_the_official_custom_format(tmp_path, lcb_files):
    dataset, dump = lcb_files
    output = tmp_path / "custom.json"
    assert (
        run_cli("eval", "lcb-export", "--generations", str(dump), "--dataset", str(dataset), "--output", str(output))
        == 0
    )
    assert json.loads(output.read_text()) == [
        {"question_id": "synthetic-lcb-001", "code_list": [SUM_OK, SUM_WRONG]},
        {"question_id": "synthetic-lcb-002", "code_list": [MAX_OK, ""]},
    ]


def test_unknown_ground_truth_is_an_error(tmp_path, lcb_files, caplog):
    dataset, dump = lcb_files
    other = pd.read_parquet(dataset).iloc[:1]
    other.to_parquet(tmp_path / "one.parquet")
    output = tmp_path / "x.json"
    assert (
        run_cli(
            "eval",
            "lcb-export",
            "--generations",
            str(dump),
            "--dataset",
            str(tmp_path / "one.parquet"),
            "--output",
            str(output),
        )
        == 1
    )
    assert "a trajectory of problem 'q1-uuid' matches no question_id in the dataset" in caplog.text
    assert not output.exists()


def test_call_based_tests_become_json_lines():
    spec = json.dumps({"fn_name": "add", "inputs": ["1\n2", [3, 4]], "outputs": ["3", 7]})
    cases, fn_name = hidden_tests(spec)
    assert fn_name == "add"
    assert [(c.stdin, c.expected_output) for c in cases] == [("1\n2\n", "3"), ("3\n4\n", "7")]
    assert (
        runnable_program("class Solution: pass\n", fn_name)
        .rstrip()
        .endswith("print(_cleaner_json.dumps(Solution().add(*_cleaner_args)))")
    )


def test_scoring_on_the_real_judge(tmp_path, lcb_files, judge_url):
    dataset, dump = lcb_files
    out = tmp_path / "scored"
    assert (
        run_cli(
            "eval",
            "lcb-score",
            "--generations",
            str(dump),
            "--dataset",
            str(dataset),
            "--judge-url",
            judge_url,
            "--output-dir",
            str(out),
        )
        == 0
    )
    judged = [json.loads(line) for line in (out / "lcb_judged.jsonl").read_text().splitlines()]
    assert [(j["question_id"], j["passed"], j["total"]) for j in judged] == [
        ("synthetic-lcb-001", 3, 3),
        ("synthetic-lcb-001", 1, 3),
        ("synthetic-lcb-002", 2, 2),
        ("synthetic-lcb-002", 0, 2),
    ]
    [result] = json.loads((out / "results.json").read_text())["benchmarks"]
    assert result["pass_at"] == {"pass@1": 0.5, "pass@2": 1.0}
    assert result["maj_at_n"] is None and result["mean_score"] == pytest.approx((1 + 1 / 3 + 1 + 0) / 4)
    assert json.loads((out / "lcb_custom_output.json").read_text())[0]["code_list"] == [SUM_OK, SUM_WRONG]


def test_call_based_program_runs_on_the_real_judge(judge_url):
    from cleaner.evaluation.generations import Sample
    from cleaner.evaluation.lcb_judge import score_samples_sync

    spec = json.dumps({"fn_name": "pair_sum", "inputs": ["[1, 2]\n3", "[]\n0"], "outputs": ["6", "0"]})
    code = "class Solution:\n    def pair_sum(self, xs, y):\n        return sum(xs) + y\n"
    sample = Sample(
        "LiveCodeBench_v6", "p", False, 0.0, response=f"```python\n{code}```", ground_truth=spec, question_id="q"
    )
    [score] = score_samples_sync([sample], judge_url)
    assert (score.passed, score.total, score.correct) == (2, 2, True)
