"""The rollout driver with the real CleanerToolAgentLoop, the real code_interpreter tool on a real judge,
the real reward function and the real Qwen3 tokenizer; only the model is scripted."""

from __future__ import annotations

import json

import pytest

from cleaner.rollout.driver import RolloutRunner, RolloutSettings
from cleaner.rollout.problems import Problem
from cleaner.trajectory.store import RecordFile, read_records
from support.scripted_llm import ScriptedLLMServer

MARKER = "[divide-and-fix]"
FAILING = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(84/0)"}}\n</tool_call>'
FIXED = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(84//2)"}}\n</tool_call>'
ANSWER = "The answer is \\boxed{42}."


def problem() -> Problem:
    return Problem(
        problem_id="half-of-84",
        data_source="math_dapo",
        prompt=[{"role": "user", "content": f"What is 84 / 2? Use the tool. {MARKER}"}],
        ground_truth="42",
    )


def settings(tmp_path, judge_url, **overrides) -> RolloutSettings:
    values = dict(
        output_path=tmp_path / "out.jsonl",
        judge_url=judge_url,
        hf_model_type="qwen3",
        prompt_length=512,
        response_length=1024,
        concurrency=2,
        trajectory_timeout_s=120.0,
        reward_kwargs={"judge_url": judge_url},
    )
    values.update(overrides)
    return RolloutSettings(**values)


async def run(settings_, tokenizer, delay_s=0.0):
    from cleaner.rewards import compute_score

    server = ScriptedLLMServer(tokenizer, scripts={MARKER: [FAILING, FIXED, ANSWER]}, delay_s=delay_s)
    runner = RolloutRunner(settings_, server, tokenizer, compute_score, show_progress=False)
    return await runner.run([problem()]), server


async def test_saar_on_and_off_records_with_provenance(tmp_path, judge_url, qwen3_tokenizer):
    result, server = await run(settings(tmp_path, judge_url, saar_modes=(False, True)), qwen3_tokenizer)
    assert result.failed == [] and result.written == 2 and set(result.wall_s_per_mode) == {False, True}
    records = {r["saar"]: r for r in read_records(tmp_path / "out.jsonl")}
    on, off = records[True], records[False]
    assert on["seed"] == off["seed"], "both modes must sample with the same seeds"

    for record in (on, off):
        assert len(record["response_mask"]) == len(record["response_ids"]) == len(record["response_logprobs"])
        assert record["score"] == 1.0 and record["acc"]
        text = "".join(piece["text"] for piece in record["pieces"])
        assert text == qwen3_tokenizer.decode(record["response_ids"], skip_special_tokens=False)
        assert record["timing"]["generate_calls"] == 3

    # SAAR off keeps the failure; SAAR on rolled it back and spliced in the fix.
    assert "ZeroDivisionError" in off["response"] and off["saar_rollback_events"] == []
    assert "ZeroDivisionError" not in on["response"] and "84/0" not in on["response"]
    [event] = on["saar_rollback_events"]
    assert event["failed_code"] == "print(84/0)" and event["replacement_code"] == "print(84//2)"
    assert event["error_category"] == "exception" and event["exception_type"] == "ZeroDivisionError"
    assert event["mode"] in ("shallow", "deep") and event["retries"] == 1
    assert "ZeroDivisionError" in event["error_text"]
    assert on["saar_rollbacks_recovered"] == 1 and on["saar_rollback_enabled"] == 1
    assert on["saar_spliced_spans"]
    spliced = [p for p in on["pieces"] if p["spliced_attempt"] is not None]
    assert spliced and all(p["role"] == "assistant" for p in spliced)
    # The model saw the error before resampling: the retry's prompt holds it.
    retry_prompt = qwen3_tokenizer.decode(server.requests_for(MARKER)[1].prompt_ids)
    assert "ZeroDivisionError" in retry_prompt


async def test_resume_skips_finished_trajectories(tmp_path, judge_url, qwen3_tokenizer):
    cfg = settings(tmp_path, judge_url, saar_modes=(True,), n_samples=2)
    first, _ = await run(cfg, qwen3_tokenizer)
    assert first.written == 2
    # An interrupted run leaves a torn line; it is dropped and only the missing work is redone.
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    (tmp_path / "out.jsonl").write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    second, server = await run(cfg, qwen3_tokenizer)
    assert (second.written, second.skipped) == (1, 1)
    keys = [r["key"] for r in read_records(tmp_path / "out.jsonl")]
    assert sorted(keys) == ["half-of-84#0#saar", "half-of-84#1#saar"]
    third, server = await run(cfg, qwen3_tokenizer)
    assert (third.written, third.skipped) == (0, 2) and server.requests == []


async def test_trajectory_timeout_is_reported_not_written(tmp_path, judge_url, qwen3_tokenizer):
    cfg = settings(tmp_path, judge_url, trajectory_timeout_s=0.3)
    # The server answers nothing within the test's lifetime: the trajectory limit is what ends the trajectory.
    result, _ = await run(cfg, qwen3_tokenizer, delay_s=3600.0)
    assert result.failed == ["half-of-84#0#saar"] and result.written == 0
    assert read_records(tmp_path / "out.jsonl") == []


def test_record_file_rejects_corrupt_middle_lines(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"key": "a"}\nnot json\n{"key": "b"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2: corrupt record"):
        RecordFile(path)


def test_record_file_appends_whole_lines(tmp_path):
    path = tmp_path / "ok.jsonl"
    with RecordFile(path) as out:
        out.append({"key": "a", "x": 1})
    with RecordFile(path) as out:
        assert out.done == {"a"}
        out.append({"key": "b"})
    assert [json.loads(line)["key"] for line in path.read_text().splitlines()] == ["a", "b"]


async def test_configuration_errors_fail_once_before_any_trajectory(tmp_path, judge_url, qwen3_tokenizer):
    cfg = settings(tmp_path, judge_url, tool_format="no_such_parser")
    with pytest.raises(Exception, match="no_such_parser"):
        await run(cfg, qwen3_tokenizer)
