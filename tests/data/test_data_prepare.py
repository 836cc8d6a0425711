"""`cleaner data prepare` on the synthetic samples: per-row hints, formats, and bad rows."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from cleaner.data.prepare import BadRowError, PrepareConfig, prepare_rows
from cleaner.data.rows import read_rows
from cleaner.data.sources import BOXED_HINT, CODE_SUBMIT_HINT, NUMERIC_HINT, TOOL_HINT
from cleaner.names import AGENT_NAME
from support.cli import run_cli

SAMPLES = Path(__file__).resolve().parents[2] / "dataset" / "samples"


def content(row: dict) -> str:
    return row["prompt"][0]["content"]


def test_training_rows_get_the_hint_of_their_own_source():
    result = prepare_rows(read_rows(SAMPLES / "open-agentrl-30k.sample.jsonl"), PrepareConfig())
    by_source = {row["data_source"]: row for row in result.rows}
    # Row 0 is math_dapo: the reference gave its "no units" hint to every row, code included.
    assert NUMERIC_HINT in content(by_source["math_dapo"])
    code = by_source["train-code-taco-medium"]
    assert NUMERIC_HINT not in content(code) and BOXED_HINT not in content(code)
    assert content(code).endswith(CODE_SUBMIT_HINT)
    assert json.loads(code["reward_model"]["ground_truth"]) == {
        "inputs": ["2 3\n", "10 -4\n"],
        "outputs": ["6\n", "-40\n"],
    }
    assert {row["agent_name"] for row in result.rows} == {AGENT_NAME}
    assert [row["extra_info"]["index"] for row in result.rows] == list(range(7))


def test_other_messages_are_kept_and_the_last_user_message_gets_the_hints():
    row = read_rows(SAMPLES / "open-agentrl-30k.sample.jsonl")[2]
    row["prompt"] = [{"role": "system", "content": "Be careful."}, *row["prompt"]]
    [prepared] = prepare_rows([row], PrepareConfig()).rows
    assert prepared["prompt"][0] == {"role": "system", "content": "Be careful."}
    assert prepared["prompt"][1]["content"].startswith("What is the sum") and prepared["prompt"][1]["content"].endswith(
        NUMERIC_HINT
    )


def test_no_tool_variant_drops_tool_hints_and_uses_the_single_turn_agent():
    result = prepare_rows(read_rows(SAMPLES / "aime2024.sample.jsonl"), PrepareConfig(split="test", use_tools=False))
    assert all(TOOL_HINT not in content(row) and BOXED_HINT in content(row) for row in result.rows)
    assert {row["agent_name"] for row in result.rows} == {"single_turn_agent"}


@pytest.mark.parametrize(
    ("sample", "source", "truths"),
    [
        ("aime2024", "AIME2024", ["24", "15"]),
        ("aime2025", "AIME2025", ["11", "120"]),
        ("gpqa-diamond", "gpqa_diamond", ["B", "D"]),
    ],
)
def test_eval_files_become_rlhf_rows(tmp_path, sample, source, truths):
    output = tmp_path / f"{sample}.parquet"
    assert (
        run_cli(
            "data",
            "prepare",
            "--input",
            str(SAMPLES / f"{sample}.sample.jsonl"),
            "--output",
            str(output),
            "--split",
            "test",
        )
        == 0
    )
    frame = pd.read_parquet(output)
    assert list(frame.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name"]
    assert set(frame["data_source"]) == {source}
    assert [rm["ground_truth"] for rm in frame["reward_model"]] == truths
    assert {info["split"] for info in frame["extra_info"]} == {"test"}


def test_livecodebench_keeps_question_ids_and_hides_the_tests():
    rows = read_rows(SAMPLES / "livecodebench-v6.sample.jsonl")
    result = prepare_rows(rows, PrepareConfig(split="test"))
    assert [row["extra_info"]["question_id"] for row in result.rows] == ["synthetic-lcb-001", "synthetic-lcb-002"]
    first = result.rows[0]
    assert json.loads(first["reward_model"]["ground_truth"])["outputs"] == ["6\n", "55\n", "1\n"]
    assert "55" not in content(first)  # a hidden test output never appears in the prompt


def test_parquet_input_reads_like_jsonl(tmp_path):
    rows = read_rows(SAMPLES / "open-agentrl-30k.sample.jsonl")
    parquet = tmp_path / "train.parquet"
    pd.DataFrame(rows).to_parquet(parquet)
    assert prepare_rows(read_rows(parquet), PrepareConfig()).rows == prepare_rows(rows, PrepareConfig()).rows


def bad_rows() -> list[dict]:
    rows = read_rows(SAMPLES / "open-agentrl-30k.sample.jsonl")
    rows[1]["data_source"] = "some-unknown-set"
    rows[4]["reward_model"]["ground_truth"] = json.dumps({"inputs": ["1\n"], "outputs": []})
    del rows[5]["prompt"]
    return rows


def test_bad_row_fails_with_its_row_number_and_reason():
    with pytest.raises(BadRowError, match=r"row 1: unknown data_source 'some-unknown-set'"):
        prepare_rows(bad_rows(), PrepareConfig())


def test_skip_bad_counts_every_bad_row():
    result = prepare_rows(bad_rows(), PrepareConfig(skip_bad=True))
    assert [error.row_number for error in result.skipped] == [1, 4, 5]
    assert "1 inputs vs 0 outputs" in result.skipped[1].reason
    assert "missing column 'prompt'" in result.skipped[2].reason
    assert len(result.rows) == 4


def test_cli_reports_bad_rows_and_skip_count(tmp_path, capsys):
    source = tmp_path / "bad.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in bad_rows()))
    output = tmp_path / "out.parquet"
    assert run_cli("data", "prepare", "--input", str(source), "--output", str(output)) == 1
    assert not output.exists()
    assert run_cli("data", "prepare", "--input", str(source), "--output", str(output), "--skip-bad") == 0
    assert "skipped 3 bad rows" in capsys.readouterr().out
    assert len(pd.read_parquet(output)) == 4


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("Answer", "12.5", "not an integer"), ("Answer", None, "not a non-empty scalar")],
)
def test_malformed_aime_answer_is_rejected(field, value, message):
    row = {"data_source": "AIME2024", "Problem": "p", field: value}
    with pytest.raises(BadRowError, match=message):
        prepare_rows([row], PrepareConfig(split="test"))


def test_gpqa_answer_must_be_an_option_letter():
    row = {"data_source": "gpqa_diamond", "problem": "p", "solution": "E", "domain": "Physics"}
    with pytest.raises(BadRowError, match="not one of A, B, C, D"):
        prepare_rows([row], PrepareConfig(split="test"))


def test_missing_data_source_can_be_supplied():
    row = {"problem": "What is 2 + 3?", "answer": "5"}
    with pytest.raises(BadRowError, match="no data_source"):
        prepare_rows([row], PrepareConfig(split="test"))
    prepared = prepare_rows([row], PrepareConfig(split="test", data_source="AIME2025")).rows[0]
    assert prepared["data_source"] == "AIME2025"
