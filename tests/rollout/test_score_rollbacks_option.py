"""`cleaner rollout --score-rollbacks`: turns on SAAR's rollback_is_measure, only where the server can score."""

from __future__ import annotations

import pytest

from cleaner.analysis.offpolicy import format_log_ratio
from cleaner.cli import build_parser
from cleaner.rollout.cli import check_scoring, print_summary, settings_from_args
from cleaner.rollout.driver import trainer_overrides

MEASURE = "+actor_rollout_ref.rollout.multi_turn.rollback_is_measure=true"


def parse(*extra: str):
    argv = ["rollout", "--data", "p.jsonl", "--output", "o.jsonl", "--server-url", "http://127.0.0.1:1"]
    return build_parser().parse_args([*argv, "--tokenizer", "t", *extra])


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_the_option_sets_rollback_is_measure_for_the_saar_pass(backend, tmp_path):
    args = parse("--backend", backend, "--score-rollbacks")
    check_scoring(args)
    settings = settings_from_args(args)
    assert MEASURE in trainer_overrides(settings, tmp_path / "tools.yaml", saar=True)
    assert MEASURE not in trainer_overrides(settings, tmp_path / "tools.yaml", saar=False)
    plain = settings_from_args(parse("--backend", backend))
    assert MEASURE not in trainer_overrides(plain, tmp_path / "tools.yaml", saar=True)


def test_llamacpp_is_refused_before_anything_runs():
    with pytest.raises(SystemExit, match="--score-rollbacks needs prompt-token log-probs, which the llamacpp server"):
        check_scoring(parse("--backend", "llamacpp", "--score-rollbacks"))
    check_scoring(parse("--backend", "llamacpp"))  # without the option nothing is asked of the server


def test_the_option_needs_saar_on():
    with pytest.raises(SystemExit, match="needs --saar on"):
        check_scoring(parse("--backend", "vllm", "--saar", "off", "--score-rollbacks"))


# ---- end to end: the real agent loop and judge, the vLLM client over HTTP, a scripted model behind it ----

MARKER = "[score-the-fix]"
FAILING = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(84/0)"}}\n</tool_call>'
FIXED = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(84//2)"}}\n</tool_call>'
ANSWER = "The answer is \\boxed{42}."
PROMPT_LOGPROB = -0.5  # what the fake server gives every prompt token when scoring, whatever its context


def scripted_vllm(scripted):
    """vLLM's /v1/completions over a ScriptedLLMServer (one trajectory: every call continues its script); sampled
    log-probs come back processed by the body's sampling parameters, as verl's vLLM server reports them."""
    import asyncio

    def answer(path, body):
        params = {key: body[key] for key in ("max_tokens", "temperature", "top_p", "top_k") if key in body}
        if "prompt_logprobs" in body:
            params["prompt_logprobs"] = body["prompt_logprobs"]
        out = asyncio.run(scripted.generate("trajectory", prompt_ids=body["prompt"], sampling_params=params))
        choice = {
            "token_ids": out.token_ids,
            "finish_reason": "stop",
            "logprobs": {"token_logprobs": out.log_probs},
        }
        if "prompt_logprobs" in body:
            rows = out.extra_fields["prompt_logprobs"]
            choice["prompt_logprobs"] = [None] + [
                {str(token): {"logprob": row[0], "rank": 1}} for token, row in zip(body["prompt"][1:], rows)
            ]
        return 200, {"choices": [choice]}

    return answer


async def test_scored_rollbacks_land_in_the_record(tmp_path, judge_url, qwen3_tokenizer, capsys):
    from fake_inference_server import FakeInferenceServer

    from cleaner.rewards import compute_score
    from cleaner.rollout.client_config import ServerClientConfig
    from cleaner.rollout.clients import make_client
    from cleaner.rollout.driver import RolloutRunner, RolloutSettings
    from cleaner.rollout.problems import Problem
    from cleaner.trajectory.store import read_records
    from support.scripted_llm import ScriptedLLMServer

    scripted = ScriptedLLMServer(
        qwen3_tokenizer, scripts={MARKER: [FAILING, FIXED, ANSWER]}, prompt_logprob=PROMPT_LOGPROB
    )
    problem = Problem(
        problem_id="half-of-84",
        data_source="math_dapo",
        prompt=[{"role": "user", "content": f"What is 84 / 2? Use the tool. {MARKER}"}],
        ground_truth="42",
    )
    settings = RolloutSettings(
        output_path=tmp_path / "out.jsonl", judge_url=judge_url, hf_model_type="qwen3", prompt_length=512,
        response_length=1024, concurrency=1, trajectory_timeout_s=120.0, reward_kwargs={"judge_url": judge_url},
        score_rollbacks=True,
    )  # fmt: skip
    with FakeInferenceServer(scripted_vllm(scripted)) as server:
        client = make_client(ServerClientConfig(backend="vllm", url=server.url, max_model_len=1536))
        try:
            result = await RolloutRunner(settings, client, qwen3_tokenizer, compute_score, show_progress=False).run(
                [problem]
            )
        finally:
            await client.aclose()
    assert result.failed == []
    [record] = read_records(tmp_path / "out.jsonl")
    [event] = record["saar_rollback_events"]
    [span] = record["saar_spliced_spans"]
    start, end = span[0], span[1]
    # At the rollout's T = 0.7 the sampled log-probs are temperature-scaled, the prompt log-probs raw: both sides of
    # log IS are prompt log-probs (the purified context, then the error context). Context-independent: log IS = 0.
    assert settings.temperature == 0.7 and record["response_logprobs"][start:end] != [PROMPT_LOGPROB] * (end - start)
    assert event["is_tokens"] == end - start
    assert event["log_is_ratio"] == pytest.approx(0.0, abs=1e-9)
    assert record["saar_is_scored"] == 1 and event["is_decision"] is None  # measured, no gate: always replaced
    scoring = [body for _, body in server.requests if "prompt_logprobs" in body]
    assert all(body["prompt_logprobs"] == 0 and body["max_tokens"] == 1 for body in scoring)
    purified, error_context = (body["prompt"] for body in scoring)
    retry = scripted.requests[1]
    assert error_context == retry.prompt_ids + retry.token_ids
    assert "84/0" not in qwen3_tokenizer.decode(purified) and "84/0" in qwen3_tokenizer.decode(error_context)
    # The end-of-run summary prints the per-rollback log IS table.
    print_summary(tmp_path / "out.jsonl", [problem], settings, result)
    row = next(line for line in capsys.readouterr().out.splitlines() if event["mode"] in line and "%" in line)
    assert format_log_ratio(event["log_is_ratio"]) in row


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_the_composed_rollout_names_the_engine_behind_the_server(backend, tmp_path):
    settings = settings_from_args(parse("--backend", backend))
    assert f"actor_rollout_ref.rollout.name={backend}" in trainer_overrides(settings, tmp_path / "t.yaml", saar=True)
    assert not any(".rollout.name=" in line for line in settings_from_args(parse("--backend", "llamacpp")).overrides)


def test_tool_and_reward_call_the_same_judge(monkeypatch):
    monkeypatch.setenv("JUDGE_URL", "http://127.0.0.1:9")
    settings = settings_from_args(parse("--backend", "vllm"))
    assert settings.judge_url == settings.reward_kwargs["judge_url"] == "http://127.0.0.1:9"
    given = settings_from_args(parse("--backend", "vllm", "--judge-url", "http://127.0.0.1:7"))
    assert given.judge_url == given.reward_kwargs["judge_url"] == "http://127.0.0.1:7"
