"""A trainer-side purification mode end to end in verl's real (legacy) trainer (`recipe/cleaner/train_cpu.sh`,
one GRPO step): RoC, whose cut rollouts leave the batch before the actor sees it.

SAAR off, `multi_turn.purification=roc`, 4 rollouts per prompt cut to 2. The scripted backend's every trajectory
keeps its failed first call (NameError or SyntaxError against a real code-judge), then the fix, then an answer;
it answers each prompt's rollouts alternately right and wrong, so every group is mixed (none is rejected for
equal rewards) and keeps one correct and one wrong rollout. With `ppo_mini_batch_size=1` verl needs a multiple of
1 x 4 rows, which the 2 x 2 kept rows are: the batch the actor trained on holds exactly the kept rollouts, no
padding. The masking modes share the same hooks and are checked on verl's own advantage code in
tests/verl/test_purification_trainer.py; one trainer run covers the wiring of both.
"""

from __future__ import annotations

import pytest
from cpu_scripted_backend import BATCH_DUMP_ENV, PROBLEMS
from scripted_training import TEST_TIMEOUT_S

from cleaner.purify.turns import TURNS_KEY, turns_from_field

ROLLOUT_N = 4
SAMPLED = len(PROBLEMS) * ROLLOUT_N
KEPT = SAMPLED // 2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(TEST_TIMEOUT_S)]


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model_dir, judge_url):
    from scripted_training import train_one_scripted_step

    return train_one_scripted_step(
        tmp_path_factory.mktemp("train-cpu-roc"),
        tiny_model_dir,
        judge_url,
        ROLLOUT_N,
        BATCH_DUMP_ENV,
        {},
        [
            "actor_rollout_ref.rollout.multi_turn.enable_tool_rollback=false",
            "+actor_rollout_ref.rollout.multi_turn.purification=roc",
            "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        ],
    )


def test_the_actor_trains_on_the_kept_rollouts_only(run):
    tensors, columns = run["batch"]["tensors"], run["batch"]["columns"]
    assert tensors["response_mask"].shape[0] == KEPT
    uids = columns["uid"]
    assert sorted(uids.count(uid) for uid in set(uids)) == [2] * len(PROBLEMS)
    rewards = tensors["token_level_scores"].sum(-1).tolist()
    for uid in set(uids):
        group = sorted(reward > 0 for reward, row_uid in zip(rewards, uids, strict=True) if row_uid == uid)
        assert group == [False, True]  # round(2 x 2 / 4) = 1 correct, 1 failure
    # RoC keeps whole rollouts: every turn of a kept one trains, its failed call included
    for row in range(KEPT):
        turns = turns_from_field(columns[TURNS_KEY][row])
        assert [turn.failed for turn in turns] == [True, False, False]  # failed call, fix, answer
        assert all(bool((tensors["response_mask"][row, turn.start : turn.end] == 1).all()) for turn in turns)


def test_roc_and_the_audit_reached_the_logger(run):
    metrics = run["metrics"][1]
    assert metrics["purify/roc_sampled_rows"] == SAMPLED
    assert metrics["purify/roc_kept_rows"] == KEPT
    assert metrics["purify/roc_padding_rows"] == 0
    assert metrics["global_seqlen/balanced_max"] > 0  # verl balanced the kept rows
    assert metrics["purify/trajectories"] == SAMPLED  # the removed ones audited as generated and untrained
    assert metrics["purify/offpolicy_token_share"] == 0.0  # SAAR off: nothing spliced


def test_the_failed_call_audit_counts_every_generated_call(run):
    """Every rollout generated one failed call, the same one within a prompt: of them, the kept correct rollout's
    are reinforced, the kept wrong one's penalized and the cut ones' untrained, a quarter, a quarter and a half."""
    metrics = run["metrics"][1]
    assert metrics["purify/failed_calls"] == SAMPLED
    assert metrics["purify/failed_call_reinforced_share"] == pytest.approx(0.25)
    assert metrics["purify/failed_call_penalized_share"] == pytest.approx(0.25)
    assert metrics["purify/failed_call_untrained_share"] == pytest.approx(0.5)
