"""End to end on CPU: the real Qwen2.5-Coder-0.5B (llama.cpp), the real judge, the real CLEANER loop, SAAR on and off.

Asserts what a user of the JSONL relies on: rollback provenance is complete and consistent, every purified
trajectory is token-consistent (mask length, log-probs, decoding), and with one llama.cpp slot the two
modes sample the same tokens up to SAAR's first action (what `make demo`'s paired comparison relies on).
"""

from __future__ import annotations

import json

import pytest

from cleaner.analysis.paired import kept_errors, pair_up, shares_prefix
from cleaner.cli import main as cleaner_main
from cleaner.models.model_assets import default_cache_dir
from cleaner.models.qwen25_tokenizer import load_qwen25_tokenizer
from cleaner.rollout.llama_server import LlamaServerConfig, LlamaServerProcess
from cleaner.saar.outcome import MODEL_ERROR_CATEGORIES
from cleaner.trajectory.store import read_records
from code_judge.local import free_port

# Two rollout passes in one fixture: about a minute on an idle 2-core machine, much more on a loaded one.
pytestmark = [pytest.mark.real_model, pytest.mark.timeout(900)]

# The 0.5B model never writes <tool_call> tags: the lenient parser reads its fences and python blocks.
TOOL_FORMAT = "cleaner_lenient"
SYSTEM = (
    "You solve problems by running Python code. To run code, write one ```python code block and stop; it is "
    "executed and you will see what it prints. Always print() the result. After you see the output, give the "
    "final answer as \\boxed{answer}."
)


PROBLEMS = [
    # Nudged into a failing first call, so the run exercises a rollback.
    (
        "undefined-name",
        "Run exactly this code first:\n```python\nprint(total_of_squares)\n```\nThen compute 1^2 + 2^2 + 3^2.",
        "14",
    ),
    ("power", "What is 2**20?", "1048576"),
]


@pytest.fixture(scope="module")
def llama_server(gguf, tmp_path_factory):
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with LlamaServerProcess(LlamaServerConfig(gguf, free_port(), n_ctx=2048, n_parallel=1, n_threads=1), log) as server:
        yield server


@pytest.fixture(scope="module")
def llama_url(llama_server):
    return llama_server.url


def test_server_cpu_time_counts_the_model_work(llama_server):
    import httpx

    before = llama_server.cpu_seconds()
    answer = httpx.post(
        f"{llama_server.url}/completion",
        json={"prompt": [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198], "n_predict": 16, "temperature": 0},
        timeout=120,
    ).json()
    assert answer["tokens_predicted"] > 0
    assert llama_server.cpu_seconds() > before


async def test_forced_scoring_returns_the_sampled_log_probs_of_a_real_generation(llama_url):
    """The premise of `make demo`'s off-policy scoring: forcing a token reports the log-prob it was sampled with."""
    from cleaner.rollout.client_config import ServerClientConfig
    from cleaner.rollout.clients import make_client
    from cleaner.rollout.forced_scoring import ForcedScorer

    prompt = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]
    client = make_client(ServerClientConfig(backend="llamacpp", url=llama_url, max_new_tokens=24, seed=3))
    try:
        sampled = await client.generate("r", prompt_ids=prompt, sampling_params={"temperature": 1.0, "top_p": 1.0})
    finally:
        await client.aclose()
    sequence = prompt + sampled.token_ids
    scored = await ForcedScorer(llama_url)(sequence, list(range(len(prompt), len(sequence))))
    # Same context, same weights: d = 0 up to the engine's numerics (temperature-1 log-probs on both sides).
    assert scored == pytest.approx(sampled.log_probs, abs=0.02)


def test_derived_tokenizer_matches_the_llama_cpp_server(gguf, llama_url):
    import httpx

    from cleaner.verl.code_interpreter_tool import default_tool_schema

    tokenizer = load_qwen25_tokenizer(gguf, default_cache_dir())
    tools = [default_tool_schema().model_dump(exclude_unset=True, exclude_none=True)]
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Ünïcode ✓ <tool_response> <think>\t tabs   and 12345678"},
        {"role": "assistant", "content": "```python\nprint(2**20)\n```"},
        {"role": "tool", "content": "1048576\n"},
        {"role": "user", "content": "ok"},
    ]
    ids = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    prompt = httpx.post(f"{llama_url}/apply-template", json={"messages": messages, "tools": tools}, timeout=60).json()[
        "prompt"
    ]
    server_ids = httpx.post(
        f"{llama_url}/tokenize", json={"content": prompt, "add_special": False, "parse_special": True}, timeout=60
    ).json()["tokens"]
    assert tokenizer.decode(ids) == prompt
    assert ids == server_ids


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory, gguf, llama_url, judge_url) -> list[dict]:
    """Both problems with SAAR on, then with SAAR off (same seed), through `cleaner rollout` on one slot."""
    tmp_path = tmp_path_factory.mktemp("rollouts")
    data = tmp_path / "problems.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {
                    "data_source": "math_dapo",
                    "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
                    "reward_model": {"style": "rule", "ground_truth": answer},
                    "extra_info": {"problem_id": pid},
                }
            )
            + "\n"
            for pid, question, answer in PROBLEMS
        )
    )
    records = []
    for saar in ("on", "off"):
        out = tmp_path / f"rollout-{saar}.jsonl"
        argv = [
            "rollout", "--data", str(data), "--output", str(out), "--backend", "llamacpp", "--server-url", llama_url,
            "--gguf", str(gguf), "--judge-url", judge_url, "--saar", saar, "--concurrency", "1", "--seed", "3",
            "--prompt-length", "512", "--response-length", "768", "--max-new-tokens", "160",
            "--max-assistant-turns", "3", "--tool-format", TOOL_FORMAT, "--no-progress",
        ]  # fmt: skip
        assert cleaner_main(argv) == 0
        records += read_records(out)
    return records


def test_real_model_rollout_with_saar(rollouts, gguf):
    records = [r for r in rollouts if r["saar"]]
    assert sorted(r["problem_id"] for r in records) == ["power", "undefined-name"]

    tokenizer = load_qwen25_tokenizer(gguf, default_cache_dir())
    model_categories = {c.value for c in MODEL_ERROR_CATEGORIES}
    events = [event for record in records for event in record["saar_rollback_events"]]
    assert events, "the nudged failing call should have triggered a rollback"
    for record in records:
        ids, mask, logprobs = record["response_ids"], record["response_mask"], record["response_logprobs"]
        assert len(mask) == len(ids) == len(logprobs) > 0
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if m == 0)
        assert all(lp <= 0.0 for lp in logprobs)
        assert record["prompt_text"] == tokenizer.decode(record["prompt_ids"], skip_special_tokens=False)
        assert "".join(p["text"] for p in record["pieces"]) == tokenizer.decode(ids, skip_special_tokens=False)
        assert record["response"] == tokenizer.decode(ids, skip_special_tokens=True)
        assert record["saar_rollback_enabled"] == 1
        for start, end, attempt, kind in record["saar_spliced_spans"]:
            assert 0 <= start < end <= len(ids) and attempt >= 1 and kind in ("shallow", "deep", "exhausted")
            assert all(mask[start:end]), "spliced tokens are model tokens"
        recovered = [e for e in record["saar_rollback_events"] if e["mode"] != "failed"]
        assert record["saar_rollbacks_recovered"] == len(recovered)
        for event in record["saar_rollback_events"]:
            assert event["failed_code"] and event["error_text"]
            assert event["error_category"] in model_categories
            assert 1 <= event["retries"] <= 3 and event["resampled_tokens"] > 0
            if event["mode"] == "failed":
                assert event["replacement_code"] is None
            else:
                assert event["replacement_code"] is not None
                assert (event["similarity"] >= 0.5) == (event["mode"] == "shallow")


def test_saar_on_and_off_sample_the_same_turns_until_saar_acts(rollouts):
    pairs = pair_up(rollouts)
    assert sorted(pair.key for pair in pairs) == ["power#0", "undefined-name#0"]
    for pair in pairs:
        assert shares_prefix(pair), f"{pair.key}: the modes diverged before SAAR acted"
    [nudged] = [pair for pair in pairs if pair.key == "undefined-name#0"]
    assert nudged.saar_acted
    if nudged.events[0]["mode"] != "failed":
        # The off trajectory keeps the failed call that the recovered rollback removed.
        assert kept_errors(nudged.on) < kept_errors(nudged.off)
