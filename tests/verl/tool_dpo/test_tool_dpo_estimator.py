"""The tool-DPO estimators on hand-built tensors, checked against verl's own GRPO and hand-computed adjustments."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_adv_estimator_fn

from cleaner.saar.negatives import CallSpan, Link, SampleLinks
from cleaner.verl.tool_dpo.estimator import ToolDpoError, tool_dpo_advantages
from cleaner.verl.tool_dpo.settings import DAPO_TOOL_DPO, GRPO_TOOL_DPO, ToolDpoConfigError, ToolDpoSettings

WIDTH = 8
DPO = ToolDpoSettings(use_dpo_on_tool_calls=True, dpo_beta=0.1, dpo_max_adjustment_ratio=0.1)


def positive(*links: tuple[str, int, int], dropped: int = 0) -> SampleLinks:
    return SampleLinks(False, tuple(Link(pid, CallSpan(s, e)) for pid, s, e in links), dropped)


def negative(pair_id: str, start: int, end: int) -> SampleLinks:
    return SampleLinks(True, (Link(pair_id, CallSpan(start, end)),), 0)


def batch(scores: list[float], lengths: list[int] | None = None):
    """Outcome rewards on the last token of each row's response, and its response mask."""
    lengths = lengths or [WIDTH] * len(scores)
    mask = torch.zeros(len(scores), WIDTH)
    rewards = torch.zeros(len(scores), WIDTH)
    for row, (score, length) in enumerate(zip(scores, lengths)):
        mask[row, :length] = 1
        rewards[row, length - 1] = score
    return rewards, mask


def run(scores, index, samples, settings=DPO, log_probs=None, lengths=None, **kwargs):
    rewards, mask = batch(scores, lengths)
    log_probs = log_probs if log_probs is not None else torch.full((len(scores), WIDTH), -1.0)
    return tool_dpo_advantages(rewards, mask, np.array(index, dtype=object), log_probs, samples, settings, **kwargs)


def verl_grpo(scores, index):
    rewards, mask = batch(scores)
    advantages, _ = compute_grpo_outcome_advantage(rewards, mask, np.array(index, dtype=object))
    return advantages


def test_grpo_over_the_positives_matches_verl_and_negatives_get_zero():
    scores = [1.0, 0.0, 0.0, 1.0, 0.0, 0.5, -1.0]
    index = ["a", "a", "a", "a", "b", "b", "b"]
    samples = [
        positive(("p1", 2, 4)),
        positive(),
        negative("p1", 1, 3),
        positive(),
        positive(),
        positive(),
        negative("x", 0, 2),
    ]
    advantages, stats = run(scores, index, samples, settings=ToolDpoSettings())
    positives = [0, 1, 3, 4, 5]
    expected = verl_grpo([scores[i] for i in positives], [index[i] for i in positives])
    torch.testing.assert_close(advantages[positives], expected)
    assert torch.all(advantages[[2, 6]] == 0)
    # the negatives' (copied) rewards did not move the groups' mean or std
    assert (stats.positives, stats.negatives, stats.pairs, stats.unpaired) == (5, 2, 1, 1)


def test_norm_adv_by_std_off_is_mean_centred_only():
    advantages, _ = run([1.0, 0.0, 0.0], ["a"] * 3, [positive()] * 3, norm_adv_by_std=False)
    torch.testing.assert_close(advantages[:, 0], torch.tensor([2 / 3, -1 / 3, -1 / 3]))


def test_adjustment_is_beta_sigmoid_over_n_on_each_call_span():
    log_probs = torch.full((3, WIDTH), -1.0)
    log_probs[0, 2:5] = torch.tensor([-0.2, -0.4, -0.6])  # positive call: mean -0.4
    log_probs[2, 1:3] = torch.tensor([-2.0, -3.0])  # negative call: mean -2.5
    samples = [positive(("p", 2, 5)), positive(), negative("p", 1, 3)]
    advantages, stats = run([1.0, 0.0, 1.0], ["g"] * 3, samples, log_probs=log_probs)
    base = verl_grpo([1.0, 0.0], ["g", "g"])
    delta = -0.4 - (-2.5)
    strength = 0.1 / (1 + math.exp(0.1 * delta))  # beta * sigmoid(-beta * delta)
    expected = torch.zeros(3, WIDTH)
    expected[:2] = base
    expected[0, 2:5] += strength / 3
    expected[2, 1:3] -= strength / 2
    torch.testing.assert_close(advantages, expected)
    assert stats.logp_diffs == pytest.approx([delta])
    assert stats.adjustments == pytest.approx([strength / 3, strength / 2])
    metrics = stats.metrics()
    assert metrics["tool_dpo/logp_diff_mean"] == pytest.approx(delta)
    assert metrics["tool_dpo/adjustment_mean"] == pytest.approx((strength / 3 + strength / 2) / 2)
    assert metrics["tool_dpo/clipped_fraction"] == 0.0
    assert metrics["grpo/negative_ratio"] == pytest.approx(1 / 3)


def test_the_cap_is_an_absolute_per_token_amount():
    """beta = 15 (the reference's commented-out setting): beta * s / n far above the cap on the short side."""
    settings = ToolDpoSettings(use_dpo_on_tool_calls=True, dpo_beta=15.0, dpo_max_adjustment_ratio=0.1)
    log_probs = torch.zeros(2, WIDTH)  # delta = 0, s = 1/2: 7.5 / n per token
    samples = [positive(("p", 0, 8)), negative("p", 3, 4)]  # long side 7.5/8 > 0.1 too; both clipped
    advantages, stats = run([0.0, 0.0], ["g", "g"], samples, settings=settings, log_probs=log_probs)
    assert torch.all(advantages[0] == 0.1)  # the positive's GRPO advantage is 0 (group of one, score 0)
    assert advantages[1, 3] == pytest.approx(-0.1) and torch.all(advantages[1, [0, 1, 2, 4, 5, 6, 7]] == 0)
    assert stats.clipped == 2 and stats.metrics()["tool_dpo/clipped_fraction"] == 1.0


def test_only_the_side_over_the_cap_is_clipped():
    settings = ToolDpoSettings(use_dpo_on_tool_calls=True, dpo_beta=1.0, dpo_max_adjustment_ratio=0.1)
    samples = [positive(("p", 0, 8)), negative("p", 0, 1)]  # s = 1/2: 0.0625 per token vs 0.5 per token
    advantages, stats = run([0.0, 0.0], ["g", "g"], samples, settings=settings, log_probs=torch.zeros(2, WIDTH))
    torch.testing.assert_close(advantages[0], torch.full((WIDTH,), 0.0625))
    assert advantages[1, 0] == pytest.approx(-0.1)
    assert stats.metrics()["tool_dpo/clipped_fraction"] == 0.5


def test_adjustment_respects_the_response_mask():
    samples = [positive(("p", 4, 8)), negative("p", 0, 2)]
    advantages, _ = run([0.0, 0.0], ["g", "g"], samples, lengths=[6, WIDTH], log_probs=torch.zeros(2, WIDTH))
    assert torch.all(advantages[0, 6:] == 0) and torch.all(advantages[0, 4:6] > 0)


def test_without_a_pair_nothing_is_adjusted():
    samples = [positive(("missing", 0, 2)), positive(), negative("orphan", 0, 2)]
    advantages, stats = run([1.0, 0.0, 1.0], ["g"] * 3, samples)
    torch.testing.assert_close(advantages[:2], verl_grpo([1.0, 0.0], ["g", "g"]))
    assert torch.all(advantages[2] == 0)
    assert (stats.pairs, stats.unpaired) == (0, 2)
    assert "tool_dpo/logp_diff_mean" not in stats.metrics()


def test_a_pair_links_only_within_its_group():
    samples = [positive(("p", 0, 2)), negative("p", 0, 2)]
    _, stats = run([1.0, 1.0], ["g", "h"], samples)
    assert (stats.pairs, stats.unpaired) == (0, 2)


def test_an_all_negative_group_gets_zero_and_does_not_disturb_the_others():
    samples = [negative("a", 0, 2), negative("b", 1, 3), positive(), positive()]
    advantages, stats = run([1.0, 0.0, 1.0, 0.0], ["g", "g", "h", "h"], samples)
    assert torch.all(advantages[:2] == 0)
    torch.testing.assert_close(advantages[2:], verl_grpo([1.0, 0.0], ["h", "h"]))
    assert (stats.negatives, stats.unpaired) == (2, 2)


def test_a_group_of_one_positive_keeps_its_score_as_in_verl():
    log_probs = torch.full((2, WIDTH), -1.0)
    samples = [positive(("p", 0, 4)), negative("p", 0, 4)]
    advantages, stats = run([0.8, 0.8], ["solo", "solo"], samples, log_probs=log_probs)
    strength = 0.1 * 0.5  # delta = 0
    expected = verl_grpo([0.8], ["solo"])[0].clone()
    expected[:4] += strength / 4
    torch.testing.assert_close(advantages[0], expected)
    assert torch.all(advantages[1, :4] == -strength / 4) and torch.all(advantages[1, 4:] == 0)
    assert stats.pairs == 1


def test_padding_rows_are_left_out():
    samples = [positive(("p", 0, 2)), negative("p", 0, 2), None, None]
    advantages, stats = run([1.0, 1.0, 0.0, 0.0], ["g", "g", "pad", "pad"], samples)
    assert torch.all(advantages[2:] == 0)
    assert stats.metrics()["grpo/total_samples"] == 2.0 and stats.pairs == 1


def test_dropped_negatives_are_summed_from_the_trajectories():
    _, stats = run([1.0, 0.0], ["g", "g"], [positive(dropped=2), positive(dropped=1)])
    assert stats.metrics()["tool_dpo/dropped_negatives"] == 3.0


def test_dapo_variant_gives_uniform_groups_nothing_grpo_variant_still_adjusts_them():
    samples = [
        positive(("p", 0, 2)),
        positive(),
        negative("p", 0, 2),
        positive(("q", 0, 2)),
        positive(),
        negative("q", 0, 2),
    ]
    scores = [1.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    index = ["uniform"] * 3 + ["mixed"] * 3
    grpo, grpo_stats = run(scores, index, samples)
    dapo, dapo_stats = run(scores, index, samples, skip_uniform_groups=True)
    assert torch.all(dapo[:3] == 0) and dapo_stats.skipped_pairs == 1
    assert grpo[0, 0] > 0 and grpo[2, 0] < 0 and grpo_stats.skipped_pairs == 0
    torch.testing.assert_close(dapo[3:], grpo[3:])


def test_with_dpo_off_negatives_are_only_left_out():
    samples = [positive(("p", 0, 2)), positive(), negative("p", 0, 2)]
    advantages, stats = run([1.0, 0.0, 1.0], ["g"] * 3, samples, settings=ToolDpoSettings())
    torch.testing.assert_close(advantages[:2], verl_grpo([1.0, 0.0], ["g", "g"]))
    assert torch.all(advantages[2] == 0) and stats.pairs == 1 and not stats.adjustments


def test_inconsistent_batches_raise():
    with pytest.raises(ToolDpoError, match="two negative samples"):
        run([1.0, 1.0, 1.0], ["g"] * 3, [positive(("p", 0, 2)), negative("p", 0, 2), negative("p", 1, 2)])
    with pytest.raises(ToolDpoError, match="beyond the response width"):
        run([1.0, 1.0], ["g"] * 2, [positive(("p", 0, WIDTH + 3)), negative("p", 0, 2)])
    with pytest.raises(ToolDpoError, match="batch sizes disagree"):
        run([1.0, 1.0], ["g"] * 2, [positive()])


@pytest.mark.parametrize("name", [GRPO_TOOL_DPO, DAPO_TOOL_DPO])
def test_registered_with_verl_and_refuses_to_run_without_the_trainer_hook(name):
    estimator = get_adv_estimator_fn(name)
    rewards, mask = batch([1.0, 0.0])
    with pytest.raises(ToolDpoError, match="agent_loop_manager_class"):
        estimator(token_level_rewards=rewards, response_mask=mask, index=np.array(["g", "g"]), config=None)
    metrics = {}
    config = OmegaConf.create({"use_dpo_on_tool_calls": True, "dpo_beta": 0.1, "norm_adv_by_std_in_grpo": True})
    advantages, returns = estimator(
        token_level_rewards=rewards,
        response_mask=mask,
        index=np.array(["g", "g"], dtype=object),
        config=config,
        old_log_probs=torch.zeros(2, WIDTH),
        samples=[positive(), positive()],
        metrics=metrics,
    )
    torch.testing.assert_close(advantages, verl_grpo([1.0, 0.0], ["g", "g"]))
    assert returns is advantages and metrics["grpo/num_positive_samples"] == 2.0


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"dpo_beta": 0}, "dpo_beta"),
        ({"dpo_beta": -1.0}, "dpo_beta"),
        ({"dpo_max_adjustment_ratio": 0.0}, "dpo_max_adjustment_ratio"),
        ({"use_dpo_on_tool_calls": "yes"}, "use_dpo_on_tool_calls"),
    ],
)
def test_bad_settings_name_their_key(values, key):
    with pytest.raises(ToolDpoConfigError, match=f"algorithm.{key}"):
        ToolDpoSettings.from_algorithm(values)


@pytest.mark.slow
def test_import_verl_alone_registers_both_estimators():
    """The `verl.plugins` entry point (cleaner.verl.plugin) registers them in any process that imports verl."""
    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY\n"
        "print(sorted(name for name in ADV_ESTIMATOR_REGISTRY if name.endswith('_tool_dpo')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(sorted([DAPO_TOOL_DPO, GRPO_TOOL_DPO]))


def test_a_positive_without_trained_tokens_stays_out_of_its_groups_statistics():
    """drop_infra_error_trajectories zeroes a trajectory's mask: its reward must not move the healthy samples'."""
    scores, index = [1.0, 0.0, 1.0, 0.0], ["a"] * 4
    samples = [positive()] * 4
    rewards, mask = batch(scores, [WIDTH, WIDTH, WIDTH, 1])
    mask[3] = 0
    advantages, _ = tool_dpo_advantages(
        rewards, mask, np.array(index, dtype=object), torch.zeros(4, WIDTH), samples, ToolDpoSettings()
    )
    torch.testing.assert_close(advantages[:3], verl_grpo(scores[:3], index[:3]))
    assert advantages[3].abs().sum() == 0
