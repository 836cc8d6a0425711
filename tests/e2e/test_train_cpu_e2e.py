"""verl's real trainer (`python -m verl.trainer.main_ppo` via the CPU recipe) for one GRPO step on CPU (`grpo_run.py`).

The tiny random Qwen2 model is the actor (FSDP2 on gloo); rollouts come from the scripted backend
(`cpu_scripted_backend.py`), registered through the same route as verl_cpu's `cpu` backend: every trajectory's
first code cell fails (NameError for one problem, SyntaxError for the other), SAAR resamples and the fix succeeds.
The run has SAAR's off-policy options on: the IS gate (`rollback_is_threshold`, Plan B) scores each fix in its
purified context through the backend's `prompt_logprobs` answer, which gives one trajectory per problem an IS
ratio of 1 (replaced: shallow for the one-identifier fix, deep for the rewritten one) and the other a tiny ratio
(appended: the failure stays); the replaced ones train with verl's token-level rollout IS (Plan C,
`rollback_is_correction`); rollout log-probs are on, so the `rollback/offpolicy/*` metrics are logged. The tool
runs against a real code-judge and the reward is CLEANER's. Checked: the step finished; the rollback/*,
tool_calls/* and offpolicy metrics reached verl's logger with the counts of that script; the batch the actor
trained on holds the purified and the appended trajectories, and verl's IS weights on spliced tokens are
exp(old - rollout); the loss is finite, the gradient non-zero, the weights changed; the checkpoint loads; the
offline wandb run holds the rollback/*, tool_calls/* and actor/* metrics of each step, as the file logger does.
"""

from __future__ import annotations

import math

import pytest
import torch
from cpu_scripted_backend import PROBLEMS, SAMPLED_LOGPROB
from grpo_run import ROLLOUT_N
from scripted_training import TEST_TIMEOUT_S
from wandb_offline import wandb_history

TRAJECTORIES = len(PROBLEMS) * ROLLOUT_N
TRACKED_PREFIXES = ("rollback/", "tool_calls/", "actor/")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(TEST_TIMEOUT_S)]


@pytest.fixture(scope="module")
def run(grpo_run):
    return grpo_run


def test_the_step_finished_and_rollback_and_tool_metrics_reached_the_logger(run):
    metrics = run["metrics"][1]
    assert metrics["training/global_step"] == 1
    expected = {
        "rollback/trajectories": TRAJECTORIES,
        "rollback/triggered": TRAJECTORIES,
        "rollback/recovered": TRAJECTORIES,
        "rollback/failed": 0,
        # the gate replaced one trajectory per problem (one shallow, one deep) and appended the other
        "rollback/shallow": 1,
        "rollback/deep": 1,
        "rollback/planb_replace_count": len(PROBLEMS),
        "rollback/planb_append_count": len(PROBLEMS),
        "rollback/planb_append_rate": 0.5,
        "rollback/is_gate_appended": len(PROBLEMS),
        "rollback/retries": TRAJECTORIES,
        "rollback/trajectories_with_rollback": TRAJECTORIES,
        "tool_calls/total": 2 * TRAJECTORIES,
        "tool_calls/first_attempt": TRAJECTORIES,
        "tool_calls/first_attempt_successes": 0,
        "tool_calls/failure_reason/exception": ROLLOUT_N,
        "tool_calls/failure_reason/syntax_error": ROLLOUT_N,
    }
    assert {key: metrics[key] for key in expected} == expected
    # rollout log-probs are on: the spliced tokens of the two replaced trajectories against the control
    offpolicy = "rollback/offpolicy/"
    assert metrics[offpolicy + "spliced/spans"] == 2
    assert metrics[offpolicy + "shallow/spans"] == metrics[offpolicy + "deep/spans"] == 1
    assert metrics[offpolicy + "control/tokens"] > 0 and math.isfinite(metrics[offpolicy + "control/log_ratio_mean"])
    # the random tiny model gives the scripted tokens far less than the backend's -0.5: IS ratios well below 0.5
    assert metrics[offpolicy + "spliced/span_share_below_0.5"] == 1
    assert any(key.startswith("rollout_corr/") for key in metrics)  # verl's token-level IS ran
    for phase in ("gen", "reward", "old_log_prob", "update_actor", "update_weights", "step"):
        assert metrics[f"timing_s/{phase}"] >= 0


def test_the_actor_trained_on_purified_and_appended_trajectories_with_is_weights(run, tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tensors, columns = run["batch"]["tensors"], run["batch"]["columns"]
    assert tensors["responses"].shape[0] == TRAJECTORIES
    response_width = tensors["responses"].shape[1]
    decisions = []
    for row in range(TRAJECTORIES):
        problem = next(p for p in PROBLEMS if p.marker in str(columns["raw_prompt"][row]))
        present = tensors["attention_mask"][row, -response_width:].bool()
        trained = tensors["response_mask"][row].bool()
        response_ids = tensors["responses"][row]
        whole = tokenizer.decode(response_ids[present])
        model_part = tokenizer.decode(response_ids[trained])
        [event] = columns["saar_rollback_events"][row]
        decisions.append((problem.marker, event["is_decision"]))
        spans = columns["saar_spliced_spans"][row]
        # The tool's output is in the context but masked out of the loss; the fix is what the model is trained on.
        assert "<tool_response>" in whole and "<tool_response>" not in model_part
        assert problem.fixed in model_part and (trained & ~present).sum() == 0
        if event["is_decision"] == "append":
            # Plan B kept the failure: failed call, its error (mask 0) and the fix, exactly as without SAAR.
            assert problem.failing in model_part and problem.error_name in whole and spans == []
            assert event["log_is_ratio"] < math.log(0.5)
            continue
        # Replaced: the failure and the error text are gone; the retry's tokens are the spliced span.
        assert problem.error_name not in whole and problem.failing not in whole
        [[start, end, _, kind]] = spans
        assert kind == event["mode"] and columns["saar_spliced_tokens"][row] == end - start > 0
        assert problem.fixed.splitlines()[0] in tokenizer.decode(response_ids[start:end])
        # Plan C: the spliced tokens keep the log-probs they were sampled with (the error context), and verl's
        # token-level IS weight there is exp(old - rollout) (truncated at rollout_is_threshold, 2.0).
        spliced = torch.zeros_like(trained)
        spliced[start:end] = True
        spliced &= trained
        rollout = tensors["rollout_log_probs"][row][spliced]
        assert torch.all(rollout == SAMPLED_LOGPROB)
        expected = torch.exp(tensors["old_log_probs"][row][spliced] - rollout).clamp(max=2.0)
        torch.testing.assert_close(tensors["rollout_is_weights"][row][spliced], expected, rtol=1e-4, atol=1e-12)
    # one trajectory of each problem appended, the other replaced
    assert sorted(decisions) == sorted((p.marker, d) for p in PROBLEMS for d in ("append", "replace"))
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


def test_the_offline_wandb_run_holds_the_rollback_tool_and_actor_metrics_of_each_step(run):
    [run_file] = sorted(run["dir"].glob("**/*.wandb"))  # WANDB_DIR is the run's output directory
    history = wandb_history(run_file)
    assert sorted(history) == sorted(run["metrics"]) == [1]
    for step, logged in history.items():
        from_file = run["metrics"][step]
        for prefix in TRACKED_PREFIXES:
            expected = {key: value for key, value in from_file.items() if key.startswith(prefix)}
            assert expected, f"step {step}: no {prefix}* metric in the file logger's record"
            assert {key: value for key, value in logged.items() if key.startswith(prefix)} == pytest.approx(expected)
