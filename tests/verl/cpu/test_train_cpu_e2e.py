"""verl's real trainer (`python -m verl.trainer.main_ppo` via recipe/cleaner/cpu_smoke.sh) for one GRPO step on CPU.

The tiny random Qwen2 model is the actor (FSDP2 on gloo); rollouts come from the scripted backend
(`cpu_scripted_backend.py`), registered through the same route as `cleaner_cpu`: every trajectory's first
code cell fails (NameError for one problem, SyntaxError for the other), SAAR resamples, the fix succeeds and
the failure is rolled back (shallow for the one-identifier fix, deep for the rewritten one). The tool runs
against a real code-judge and the reward is CLEANER's. Checked: the step finished; the rollback/* and
tool_calls/* metrics reached verl's logger with the counts of that script; the batch the actor trained on
holds the purified trajectories; the loss is finite, the gradient non-zero, the weights changed; the
checkpoint was written and loads.
"""

from __future__ import annotations

import math

import pytest
import torch
from cpu_scripted_backend import BATCH_DUMP_ENV, PROBLEMS
from scripted_training import TEST_TIMEOUT_S

ROLLOUT_N = 2
TRAJECTORIES = len(PROBLEMS) * ROLLOUT_N

pytestmark = [pytest.mark.slow, pytest.mark.timeout(TEST_TIMEOUT_S)]


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model_dir, judge_url):
    from scripted_training import train_one_scripted_step

    return train_one_scripted_step(
        tmp_path_factory.mktemp("train-cpu"),
        tiny_model_dir,
        judge_url,
        ROLLOUT_N,
        BATCH_DUMP_ENV,
        {},
        ["actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"],
    )


def test_the_step_finished_and_rollback_and_tool_metrics_reached_the_logger(run):
    metrics = run["metrics"][1]
    assert metrics["training/global_step"] == 1
    expected = {
        "rollback/trajectories": TRAJECTORIES,
        "rollback/triggered": TRAJECTORIES,
        "rollback/recovered": TRAJECTORIES,
        "rollback/failed": 0,
        "rollback/shallow": ROLLOUT_N,
        "rollback/deep": ROLLOUT_N,
        "rollback/retries": TRAJECTORIES,
        "rollback/trajectories_with_rollback": TRAJECTORIES,
        "tool_calls/total": 2 * TRAJECTORIES,
        "tool_calls/first_attempt": TRAJECTORIES,
        "tool_calls/first_attempt_successes": 0,
        "tool_calls/failure_reason/exception": ROLLOUT_N,
        "tool_calls/failure_reason/syntax_error": ROLLOUT_N,
    }
    assert {key: metrics[key] for key in expected} == expected
    for phase in ("gen", "reward", "old_log_prob", "update_actor", "update_weights", "step"):
        assert metrics[f"timing_s/{phase}"] >= 0


def test_the_actor_trained_on_purified_trajectories(run, tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tensors, columns = run["batch"]["tensors"], run["batch"]["columns"]
    assert tensors["responses"].shape[0] == TRAJECTORIES
    response_width = tensors["responses"].shape[1]
    for row in range(TRAJECTORIES):
        problem = next(p for p in PROBLEMS if p.marker in str(columns["raw_prompt"][row]))
        present = tensors["attention_mask"][row, -response_width:].bool()
        trained = tensors["response_mask"][row].bool()
        response_ids = tensors["responses"][row]
        whole = tokenizer.decode(response_ids[present])
        model_part = tokenizer.decode(response_ids[trained])
        # The failure and the error text are gone; the fix is what the model said, and what it is trained on.
        assert problem.error_name not in whole and problem.failing not in whole
        assert problem.fixed in model_part
        # The tool's output is in the context but masked out of the loss.
        assert "<tool_response>" in whole and "<tool_response>" not in model_part
        assert (trained & ~present).sum() == 0
        # The retry's tokens are the spliced span the SAAR stats point at, inside the trained tokens.
        spans = columns["saar_spliced_spans"][row]
        assert len(spans) == 1 and columns["saar_spliced_tokens"][row] == spans[0][1] - spans[0][0] > 0
        spliced = tokenizer.decode(response_ids[spans[0][0] : spans[0][1]])
        assert problem.fixed.splitlines()[0] in spliced
    advantages = tensors["advantages"][tensors["response_mask"].bool()]
    assert advantages.abs().max() > 0  # right and wrong answers in each group


def test_the_update_changed_the_weights_and_the_checkpoint_loads(run, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    metrics = run["metrics"][1]
    assert math.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] > 0
    step_dir = run["dir"] / "checkpoints" / "global_step_1"
    assert (run["dir"] / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    trained = AutoModelForCausalLM.from_pretrained(step_dir / "actor" / "huggingface", dtype=torch.float32)
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    trained_state, initial_state = trained.state_dict(), initial.state_dict()
    assert trained_state.keys() == initial_state.keys()
    assert all(torch.isfinite(value).all() for value in trained_state.values())
    changed = [name for name in initial_state if not torch.equal(trained_state[name], initial_state[name])]
    assert changed, "no parameter changed in the training step"
