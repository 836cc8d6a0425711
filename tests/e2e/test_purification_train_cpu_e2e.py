"""A non-SAAR purification mode end to end in verl's real trainer (`recipe/cleaner/train_cpu.sh`, one GRPO step).

SAAR off, `multi_turn.purification=error_turn_mask`: the scripted backend's every trajectory keeps its failed
first call (NameError or SyntaxError against a real code-judge), then the fix, then an answer alternately right
and wrong. Checked on the batch the actor trained on: each failed turn has mask 0 over exactly its recorded
tokens, every other turn trains, the failed turns carry no advantage; and the `purify/*` audit reached verl's
logger with a zero reinforced-error share.
"""

from __future__ import annotations

import pytest
from cpu_scripted_backend import BATCH_DUMP_ENV, PROBLEMS
from scripted_training import TEST_TIMEOUT_S

from cleaner.purify.turns import TURNS_KEY, turns_from_field

ROLLOUT_N = 2
TRAJECTORIES = len(PROBLEMS) * ROLLOUT_N

pytestmark = [pytest.mark.slow, pytest.mark.timeout(TEST_TIMEOUT_S)]


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model_dir, judge_url):
    from scripted_training import train_one_scripted_step

    return train_one_scripted_step(
        tmp_path_factory.mktemp("train-cpu-purify"),
        tiny_model_dir,
        judge_url,
        ROLLOUT_N,
        BATCH_DUMP_ENV,
        {},
        [
            "actor_rollout_ref.rollout.multi_turn.enable_tool_rollback=false",
            "+actor_rollout_ref.rollout.multi_turn.purification=error_turn_mask",
        ],
    )


def test_the_failed_turns_train_nothing_and_the_others_train(run):
    tensors, columns = run["batch"]["tensors"], run["batch"]["columns"]
    masks, advantages = tensors["response_mask"], tensors["advantages"]
    assert masks.shape[0] == TRAJECTORIES
    for row in range(TRAJECTORIES):
        turns = turns_from_field(columns[TURNS_KEY][row])
        assert [turn.failed for turn in turns] == [True, False, False]  # failed call, fix, answer
        for turn in turns:
            trained = masks[row, turn.start : turn.end]
            assert bool((trained == 0).all()) if turn.failed else bool((trained == 1).all())
        assert advantages[row, turns[0].start : turns[0].end].abs().sum() == 0


def test_the_audit_reached_the_logger(run):
    metrics = run["metrics"][1]
    assert metrics["purify/reinforced_error_token_share"] == 0.0
    assert metrics["purify/trajectories"] == TRAJECTORIES
    assert metrics["purify/dropped_trajectory_share"] == 0.0
    assert 0.0 < metrics["purify/trained_token_share"] < 1.0  # the failed turns were generated, not trained
    assert metrics["purify/offpolicy_token_share"] == 0.0  # SAAR off: nothing spliced


def test_the_failed_call_audit_reached_the_logger(run):
    """Every trajectory generated one failed call and error_turn_mask trains none of it: all untrained, and the
    reinforced and penalized shares are reported removed, not as a measured 0."""
    metrics = run["metrics"][1]
    assert metrics["purify/failed_calls"] == TRAJECTORIES
    assert metrics["purify/failed_call_untrained_share"] == 1.0
    assert metrics["purify/failed_call_signal_removed"] == 1.0
    assert "purify/failed_call_reinforced_share" not in metrics
