"""One real training step with negative samples and the tool-call DPO adjustment, on verl's v1 trainer on CPU.

`recipe/cleaner/train_cpu.sh` with the tiny model and the scripted rollout backend of `test_train_cpu_e2e.py`
(every trajectory's first code cell fails, SAAR's retry fixes it, so every trajectory has one recovered position
and hence one negative), plus `algorithm.adv_estimator=grpo_tool_dpo`, `use_dpo_on_tool_calls` and
`save_negative_samples`. Checked: the step finished; the `grpo/*` and `tool_dpo/*` metrics reached verl's logger;
in the batch the actor trained on (read from TransferQueue by a hook around the v1 `PPOTrainer._update_actor`,
installed by this module when verl imports it in the trainer process), every trajectory's negative is there with
its loss mask on the failed call only, and the advantages hold exactly the adjustment computed from that
batch's old log-probs.
"""

from __future__ import annotations

import math
import os
import pickle

import pytest
import torch
from scripted_training import TEST_TIMEOUT_S

DUMP_ENV = "CLEANER_TEST_TOOL_DPO_DUMP"
MODULE = "test_tool_dpo_train_cpu"
BETA = 0.5
CAP = 0.1


def _install_update_actor_dump(path: str) -> None:
    """Wrap the v1 `PPOTrainer._update_actor` to pickle, per row, what the actor is about to train on."""
    import transfer_queue as tq
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from cleaner.verl.trainer_metrics import fetch_extra_fields

    original = PPOTrainer._update_actor
    if getattr(original, "__tool_dpo_dump__", False):
        return

    def _update_actor(self, batch, metrics, *args, **kwargs):
        fields = ["advantages", "response_mask", "responses", "old_log_probs"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        record = {
            "padding": [bool(tag.get("is_padding", False)) for tag in batch.tags],
            "uid": [key.rsplit("_", 2)[0] for key in batch.keys],  # keys are {uid}_{session}_{output index}
            "extra_fields": fetch_extra_fields(batch.keys, batch.partition_id),
        }
        for name in ("advantages", "response_mask", "responses", "old_log_probs"):
            record[name] = [row.clone() for row in data[name].unbind(0)]  # nested: one tensor per row
        with open(path, "wb") as handle:
            pickle.dump(record, handle)
        return original(self, batch, metrics, *args, **kwargs)

    _update_actor.__tool_dpo_dump__ = True
    PPOTrainer._update_actor = _update_actor


ROLLOUT_N = 2
MT = "actor_rollout_ref.rollout.multi_turn"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(TEST_TIMEOUT_S)]


def scripted_problems():
    # Imported when a test runs, not at module import: verl imports this module in its processes while it is
    # still importing cpu_scripted_backend there.
    from cpu_scripted_backend import PROBLEMS

    return PROBLEMS


def trajectories() -> int:
    return len(scripted_problems()) * ROLLOUT_N


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model_dir, judge_url):
    from scripted_training import train_one_scripted_step

    extra_env = {
        # v1 on CPU: TransferQueue's actors each hold a logical Ray CPU (docs/train-cpu.md)
        "RAY_NUM_CPUS": "4",
        "VERL_USE_EXTERNAL_MODULES": f"verl_cpu.plugin,cpu_scripted_backend,{MODULE}",
    }
    overrides = [
        "trainer.save_freq=-1",
        "trainer.use_v1=True",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "algorithm.adv_estimator=grpo_tool_dpo",
        "+algorithm.use_dpo_on_tool_calls=True",
        f"+algorithm.dpo_beta={BETA}",
        f"+algorithm.dpo_max_adjustment_ratio={CAP}",
        f"+{MT}.save_negative_samples=True",
        f"+{MT}.max_negative_samples_per_group=1",
    ]
    work = tmp_path_factory.mktemp("train-cpu-tool-dpo")
    return train_one_scripted_step(work, tiny_model_dir, judge_url, ROLLOUT_N, DUMP_ENV, extra_env, overrides)


def pairs(batch):
    """(trajectory row, negative row, trajectory span, negative span) for every linked pair in the batch."""
    rows = [row for row, padding in enumerate(batch["padding"]) if not padding]
    negatives = {
        (batch["uid"][row], batch["extra_fields"][row]["negative_links"][0]["id"]): row
        for row in rows
        if batch["extra_fields"][row]["negative_sample"]
    }
    found = []
    for row in rows:
        fields = batch["extra_fields"][row]
        if fields["negative_sample"]:
            continue
        for link in fields["negative_links"]:
            negative = negatives[(batch["uid"][row], link["id"])]
            negative_link = batch["extra_fields"][negative]["negative_links"][0]
            found.append((row, negative, (link["start"], link["end"]), (negative_link["start"], negative_link["end"])))
    return found


def test_a_step_trains_negatives_with_the_adjustment_in_the_actors_advantages(run, tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    batch, metrics = run["batch"], run["metrics"][1]
    found = pairs(batch)
    assert len(found) == trajectories()  # one recovered position per trajectory, one negative each
    deltas = []
    for positive, negative, (p_start, p_end), (n_start, n_end) in found:
        # the negative trains only its failed call, which is the problem's failing code
        mask = batch["response_mask"][negative]
        assert mask.nonzero().flatten().tolist() == list(range(n_start, n_end))
        failed_call = tokenizer.decode(batch["responses"][negative][n_start:n_end])
        assert any(p.failing in failed_call for p in scripted_problems()), failed_call
        # the adjustment from this batch's old log-probs, as the estimator defines it
        old_p, old_n = batch["old_log_probs"][positive], batch["old_log_probs"][negative]
        delta = (old_p[p_start:p_end].mean() - old_n[n_start:n_end].mean()).item()
        strength = BETA / (1 + math.exp(BETA * delta))
        up, down = min(strength / (p_end - p_start), CAP), min(strength / (n_end - n_start), CAP)
        deltas.append(delta)
        advantages, trained = batch["advantages"][positive], batch["response_mask"][positive].bool()
        outside = [i for i in trained.nonzero().flatten().tolist() if not p_start <= i < p_end]
        grpo = advantages[outside[0]].item()
        assert abs(grpo) == pytest.approx(1 / math.sqrt(2), abs=1e-3)  # one right, one wrong answer per group
        assert torch.allclose(advantages[outside], torch.tensor(grpo))
        assert torch.allclose(advantages[p_start:p_end], torch.tensor(grpo + up), atol=1e-6)
        negative_advantages = batch["advantages"][negative]
        assert torch.allclose(negative_advantages[n_start:n_end], torch.tensor(-down), atol=1e-6)
        assert negative_advantages[:n_start].abs().sum() == 0 and negative_advantages[n_end:].abs().sum() == 0
    assert metrics["tool_dpo/logp_diff_mean"] == pytest.approx(sum(deltas) / len(deltas), abs=1e-4)


def test_the_step_logged_the_negative_sample_metrics(run):
    metrics, total = run["metrics"][1], trajectories()
    assert metrics["training/global_step"] == 1
    assert (metrics["grpo/num_positive_samples"], metrics["grpo/num_negative_samples"]) == (total, total)
    assert metrics["grpo/negative_ratio"] == 0.5 and metrics["tool_dpo/pairs"] == total
    assert (metrics["tool_dpo/unpaired"], metrics["tool_dpo/dropped_negatives"]) == (0, 0)
    assert 0 < metrics["tool_dpo/adjustment_mean"] <= CAP and 0 <= metrics["tool_dpo/clipped_fraction"] <= 1
    # the negatives do not count as trajectories in the SAAR metrics
    assert (metrics["rollback/trajectories"], metrics["rollback/recovered"]) == (total, total)
    assert math.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] > 0


# verl imports this module in every process of the run (VERL_USE_EXTERNAL_MODULES); the trainer's gets the hook.
if os.environ.get(DUMP_ENV):
    _install_update_actor_dump(os.environ[DUMP_ENV])
