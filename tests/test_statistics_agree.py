"""The same trajectories give the same SAAR statistics in the trainer's metrics, `cleaner rollout`'s summary,
`cleaner eval` and the HTML report (all read `cleaner.saar.aggregate`).

The trajectories are real: the rollout driver runs the real `CleanerToolAgentLoop` (SAAR off and on) over
scripted generations and a scripted tool, and writes records with the real record builder.
"""

from __future__ import annotations

import html
import json

import pytest
from omegaconf import OmegaConf

from cleaner.evaluation.generations import load_samples
from cleaner.evaluation.report import summarize as eval_summarize
from cleaner.report.page import render_report
from cleaner.rollout.driver import RolloutRunner, RolloutSettings
from cleaner.rollout.problems import Problem
from cleaner.saar.stats import SCALAR_EXTRA_FIELD_KEYS
from cleaner.trajectory.store import read_records
from cleaner.trajectory.summary import summarize as rollout_summarize
from cleaner.trajectory.summary import summary_rows
from cleaner.verl.saar_metrics import aggregate_saar_metrics, rows_from_columns
from support.scripted_llm import ScriptedLLMServer, ScriptedPythonTool, tool_call_text

pytestmark = pytest.mark.slow  # runs the real agent loop through the rollout driver: seconds

ANSWER = "<think>\nDone.\n</think>\n\nThe answer is \\boxed{42}."
OK = "print(42)"
NAME_ERROR = "print(x)\n# outcome: exception NameError"
TIMEOUT = "while True: pass\n# outcome: timeout"


def call(code: str) -> str:
    return "<think>\nCompute.\n</think>\n\n" + tool_call_text(code)


# SAAR on (max_tool_retries=2) / SAAR off read the same scripts; a script is replayed from its start per
# trajectory, and SAAR off simply never asks for the turns after the first failure's answer.
SCRIPTS = {
    "[clean]": [call(OK), ANSWER],
    "[one-retry]": [call(NAME_ERROR), call(OK), ANSWER],
    "[two-retries]": [call(NAME_ERROR), call(TIMEOUT), call(OK), ANSWER],
    "[exhausted]": [call(NAME_ERROR), call(TIMEOUT), call(NAME_ERROR), ANSWER],
}
# Model-error tool calls each trajectory samples with SAAR on, and how many SAAR removes: a recovery removes every
# failed attempt; exhausted retries keep only the last failed attempt (rollback_exhausted_keep=last, the default).
SAMPLED_ON = {"[clean]": 0, "[one-retry]": 1, "[two-retries]": 2, "[exhausted]": 3}
PURIFIED_ON = {"[clean]": 0, "[one-retry]": 1, "[two-retries]": 2, "[exhausted]": 2}


def score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return {"score": 1.0 if "\\boxed{42}" in solution_str else -1.0, "acc": "\\boxed{42}" in solution_str}


@pytest.fixture(scope="module")
def records(tmp_path_factory, qwen3_tokenizer):
    import asyncio

    workdir = tmp_path_factory.mktemp("agree")
    tool_config = workdir / "tools.yaml"
    tool = {"class_name": f"{ScriptedPythonTool.__module__}.ScriptedPythonTool", "config": {"type": "native"}}
    OmegaConf.save(OmegaConf.create({"tools": [tool]}), tool_config)
    problems = [
        Problem(
            problem_id=marker,
            data_source="demo-math",
            prompt=[{"role": "user", "content": f"6*7? {marker}"}],
            ground_truth="42",
        )
        for marker in SCRIPTS
    ]
    settings = RolloutSettings(
        output_path=workdir / "out.jsonl",
        saar_modes=(False, True),
        tool_config_path=tool_config,
        hf_model_type="qwen3",
        prompt_length=512,
        response_length=2048,
        max_assistant_turns=6,
        overrides=("+actor_rollout_ref.rollout.multi_turn.max_tool_retries=2",),
    )
    server = ScriptedLLMServer(qwen3_tokenizer, scripts=SCRIPTS)
    runner = RolloutRunner(settings, server, qwen3_tokenizer, score, show_progress=False)
    result = asyncio.run(runner.run(problems))
    assert result.failed == [] and result.written == 2 * len(SCRIPTS)
    return read_records(settings.output_path)


def test_trajectories_are_what_the_scripts_say(records):
    on = {r["problem_id"]: r for r in records if r["saar"]}
    assert {p: sum(v for k, v in r.items() if k.startswith("saar_fail_")) for p, r in on.items()} == SAMPLED_ON
    assert {p: r["saar_purified_errors"] for p, r in on.items()} == PURIFIED_ON


def test_every_consumer_reports_the_same_numbers(records, tmp_path):
    on = [r for r in records if r["saar"]]
    spliced = sum(r["saar_spliced_tokens"] for r in on)
    response = sum(r["saar_response_tokens"] for r in on)
    expected = {
        "triggered": 3,  # positions: one per failing trajectory
        "recovered": 2,
        "recovery_rate": 2 / 3,
        "errors_sampled": sum(SAMPLED_ON.values()),
        "errors_kept": sum(SAMPLED_ON.values()) - sum(PURIFIED_ON.values()),
        "resampled_tokens": sum(r["saar_resampled_tokens"] for r in on),
        "spliced_token_fraction": spliced / response,
    }
    assert spliced > 0 and expected["resampled_tokens"] > 0

    # 1. the trainer's logged metrics, from records and from verl-style columns alike
    trainer = aggregate_saar_metrics(on)
    columns = {key: [r[key] for r in on] for key in SCALAR_EXTRA_FIELD_KEYS}
    assert aggregate_saar_metrics(rows_from_columns(columns)) == trainer
    assert trainer["rollback/triggered"] == expected["triggered"]
    assert trainer["rollback/recovered"] == expected["recovered"]
    assert trainer["rollback/recovery_rate"] == pytest.approx(expected["recovery_rate"])
    assert trainer["tool_calls/errors_sampled"] == expected["errors_sampled"]
    assert trainer["tool_calls/errors_kept"] == expected["errors_kept"]
    assert trainer["rollback/resampled_tokens"] == expected["resampled_tokens"]
    assert trainer["rollback/spliced_token_fraction"] == pytest.approx(expected["spliced_token_fraction"])

    # 2. `cleaner rollout`'s summary
    summaries = rollout_summarize(records)
    stats = next(s for s in summaries if s.saar).stats
    assert stats.total("rollbacks_triggered") == expected["triggered"]
    assert stats.recovery_rate == pytest.approx(expected["recovery_rate"])
    assert (stats.errors_sampled, stats.errors_kept) == (expected["errors_sampled"], expected["errors_kept"])
    assert stats.total("resampled_tokens") == expected["resampled_tokens"]
    assert stats.spliced_token_fraction == pytest.approx(expected["spliced_token_fraction"])

    # 3. `cleaner eval` (both modes in one file are two results)
    path = tmp_path / "rollout.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    results = {r.benchmark: r for r in eval_summarize(load_samples(path))}
    saar = results["demo-math (SAAR on)"].saar
    count = len(on)
    assert saar["saar_rollbacks_triggered"] == expected["triggered"]
    assert saar["saar_recovery_rate"] == pytest.approx(expected["recovery_rate"])
    assert saar["saar_tool_errors_sampled_per_traj"] == pytest.approx(expected["errors_sampled"] / count)
    assert saar["saar_tool_errors_kept_per_traj"] == pytest.approx(expected["errors_kept"] / count)
    assert saar["saar_resampled_tokens_per_traj"] == pytest.approx(expected["resampled_tokens"] / count)
    assert saar["saar_spliced_token_fraction"] == pytest.approx(expected["spliced_token_fraction"])

    # 4. the report prints the rollout summary's rows
    page = html.unescape(render_report(records, ["rollout.jsonl"]))
    for name, values in summary_rows(summaries):
        assert f"<td>{name}</td>" + "".join(f"<td>{value}</td>" for value in values) in page


def test_saar_off_keeps_every_error_and_has_no_recovery_rate(records):
    off = [r for r in records if not r["saar"]]
    stats = next(s for s in rollout_summarize(records) if not s.saar).stats
    assert stats.total("rollbacks_triggered") == 0 and stats.recovery_rate is None
    assert (
        stats.errors_kept
        == stats.errors_sampled
        == sum(sum(v for k, v in r.items() if k.startswith("saar_fail_")) for r in off)
    )
    assert "rollback/recovery_rate" not in aggregate_saar_metrics(off)  # nothing to divide by: not logged as 0
