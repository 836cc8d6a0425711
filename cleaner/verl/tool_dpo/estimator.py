"""The advantage estimators `grpo_tool_dpo` and `dapo_tool_dpo`, registered with verl's registry.

Both compute GRPO over a batch that holds negative samples (cleaner.saar.negatives):
1. Per group (`uid`), the mean and std of the outcome rewards are taken over the *positive* samples only
   (and of those, only the ones with a trained token: an infra-dropped trajectory stays out), as in verl's GRPO (a group with one positive: mean 0, std 1; `algorithm.norm_adv_by_std_in_grpo`).
   Positives get `(score - mean) / (std + eps)` on every response token; negatives get 0.
2. With `algorithm.use_dpo_on_tool_calls`, each pair (a positive's successful call, the negative's failed
   call at the same position) gets the reference code's adjustment, computed on `old_log_probs`:
   - delta = mean logp(positive call tokens) - mean logp(negative call tokens)  (length-normalised)
   - s = sigmoid(-beta * delta)
   - each positive call token gains min(beta * s / n_pos, cap), each negative call token loses
     min(beta * s / n_neg, cap), where n is the side's token count and cap is
     `algorithm.dpo_max_adjustment_ratio`: an absolute per-token amount, whatever its name says.
   beta * s / n is the gradient of the length-normalised DPO loss -log sigmoid(beta * delta) with respect
   to each call token's log-prob, so the adjustment pushes the policy as that loss would, bounded.

`dapo_tool_dpo` differs in one respect, following DAPO's dynamic sampling: a group whose positives all
have the same reward (more than one positive, zero std) carries no signal and contributes nothing, so
its pairs get no adjustment either. Under `grpo_tool_dpo` such a group's GRPO advantages are 0 too, but
its pairs are still adjusted. (verl's own DAPO filter, `algorithm.filter_groups`, evicts such groups
before any advantage is computed; this variant gives the same result without evicting them.)

verl calls a registered estimator with only `token_level_rewards`, `response_mask`, `index` and `config`.
The log-probs and the pairing come from the trainer hook (cleaner.verl.tool_dpo.hooks), which calls
these functions with `old_log_probs`, `samples` and `metrics` as well; without them they raise.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import register_adv_est

from cleaner.saar.negatives import SampleLinks
from cleaner.verl.tool_dpo.settings import DAPO_TOOL_DPO, GRPO_TOOL_DPO, ToolDpoSettings

EPSILON = 1e-6  # as verl's GRPO


class ToolDpoError(RuntimeError):
    """The estimator was called without what it needs, or with a batch whose pairing is inconsistent."""


@dataclass
class ToolDpoStats:
    """What one batch's advantage computation did; `metrics()` gives the logged names."""

    positives: int = 0
    negatives: int = 0
    pairs: int = 0
    unpaired: int = 0  # negatives without their positive in the batch, and links without their negative
    dropped_negatives: int = 0  # recovered failures the agent loop did not keep (cap, response_length)
    skipped_pairs: int = 0  # pairs in uniform groups (dapo_tool_dpo only)
    logp_diffs: list[float] = field(default_factory=list)  # delta per adjusted pair
    adjustments: list[float] = field(default_factory=list)  # per-token amount, both sides of every pair
    clipped: int = 0  # sides whose per-token amount hit the cap

    def metrics(self) -> dict[str, float]:
        total = self.positives + self.negatives
        metrics = {
            "grpo/num_positive_samples": float(self.positives),
            "grpo/num_negative_samples": float(self.negatives),
            "grpo/total_samples": float(total),
            "grpo/negative_ratio": self.negatives / total if total else 0.0,
            "tool_dpo/pairs": float(self.pairs),
            "tool_dpo/unpaired": float(self.unpaired),
            "tool_dpo/dropped_negatives": float(self.dropped_negatives),
            "tool_dpo/skipped_uniform_group_pairs": float(self.skipped_pairs),
        }
        # Left out rather than logged as 0 when no pair was adjusted: 0 would read as "no push".
        if self.logp_diffs:
            metrics["tool_dpo/logp_diff_mean"] = float(np.mean(self.logp_diffs))
            metrics["tool_dpo/adjustment_mean"] = float(np.mean(self.adjustments))
            metrics["tool_dpo/clipped_fraction"] = self.clipped / len(self.adjustments)
        return metrics


def tool_dpo_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    old_log_probs: torch.Tensor,
    samples: Sequence[SampleLinks | None],
    settings: ToolDpoSettings,
    *,
    norm_adv_by_std: bool = True,
    skip_uniform_groups: bool = False,
) -> tuple[torch.Tensor, ToolDpoStats]:
    """Advantages of shape (batch, response) and the batch's statistics.

    `samples[i]` is row i's negative-sample fields, or None for a padding row verl added to fill the batch
    (left out of every group and statistic, advantage 0).
    """
    batch = token_level_rewards.shape[0]
    if not (len(index) == len(samples) == batch == response_mask.shape[0] == old_log_probs.shape[0]):
        raise ToolDpoError(
            f"batch sizes disagree: rewards {batch}, response_mask {response_mask.shape[0]}, "
            f"old_log_probs {old_log_probs.shape[0]}, index {len(index)}, samples {len(samples)}"
        )
    stats = ToolDpoStats()
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        scalars = torch.zeros_like(scores)
        group_rows: dict[Any, list[int]] = defaultdict(list)
        for row, sample in enumerate(samples):
            if sample is None:
                continue
            stats.dropped_negatives += sample.dropped
            if sample.negative:
                stats.negatives += 1
            else:
                stats.positives += 1
                # A trajectory with no trained token (drop_infra_error_trajectories) stays out of its group's
                # statistics, as with verl's estimators (cleaner.verl.group_statistics); its advantage stays 0.
                if response_mask[row].any():
                    group_rows[index[row]].append(row)
        uniform_groups = set()
        for group, rows in group_rows.items():
            group_scores = scores[rows]
            if len(rows) == 1:
                mean, std = torch.tensor(0.0), torch.tensor(1.0)
            else:
                mean, std = group_scores.mean(), group_scores.std()
                if std == 0:
                    uniform_groups.add(group)
            centred = group_scores - mean
            scalars[rows] = centred / (std + EPSILON) if norm_adv_by_std else centred
        advantages = scalars.unsqueeze(-1) * response_mask
        for positive, negative, success, failure in _pairs(index, samples, stats):
            if skip_uniform_groups and index[positive] in uniform_groups:
                stats.skipped_pairs += 1
                continue
            if settings.use_dpo_on_tool_calls:
                _adjust(
                    advantages, response_mask, old_log_probs, (positive, success), (negative, failure), settings, stats
                )
    return advantages, stats


def _pairs(index: Sequence[Any], samples: Sequence[SampleLinks | None], stats: ToolDpoStats):
    """(positive row, negative row, positive span, negative span) for every linked pair in the batch."""
    negatives: dict[tuple[Any, str], int] = {}
    for row, sample in enumerate(samples):
        if sample is not None and sample.negative:
            key = (index[row], sample.links[0].pair_id)
            if key in negatives:
                raise ToolDpoError(f"two negative samples with pair id {key[1]!r} in group {key[0]!r}")
            negatives[key] = row
    paired = set()
    for row, sample in enumerate(samples):
        if sample is None or sample.negative:
            continue
        for link in sample.links:
            negative = negatives.get((index[row], link.pair_id))
            if negative is None:
                stats.unpaired += 1
                continue
            paired.add(negative)
            stats.pairs += 1
            yield row, negative, link.span, samples[negative].links[0].span
    stats.unpaired += len(negatives) - len(paired)


def _adjust(advantages, response_mask, old_log_probs, positive, negative, settings: ToolDpoSettings, stats) -> None:
    width = advantages.shape[1]
    for row, span in (positive, negative):
        if span.end > width:
            raise ToolDpoError(f"row {row}: call span [{span.start}, {span.end}) beyond the response width {width}")
    (p_row, p_span), (n_row, n_span) = positive, negative
    delta = (
        old_log_probs[p_row, p_span.start : p_span.end].mean() - old_log_probs[n_row, n_span.start : n_span.end].mean()
    )
    beta = settings.dpo_beta
    strength = beta * torch.sigmoid(-beta * delta).item()
    stats.logp_diffs.append(delta.item())
    for (row, span), sign in ((positive, 1.0), (negative, -1.0)):
        amount = strength / len(span)
        if amount > settings.dpo_max_adjustment_ratio:
            amount = settings.dpo_max_adjustment_ratio
            stats.clipped += 1
        stats.adjustments.append(amount)
        advantages[row, span.start : span.end] += sign * amount * response_mask[row, span.start : span.end]


def _estimate(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any] | None,
    config: Any,
    old_log_probs: torch.Tensor | None,
    samples: Sequence[SampleLinks | None] | None,
    metrics: dict[str, Any] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    if old_log_probs is None or samples is None or index is None:
        raise ToolDpoError(
            f"algorithm.adv_estimator={name} needs the old log-probs and the negative-sample links, which only the "
            "cleaner trainer hook passes: set actor_rollout_ref.rollout.agent.agent_loop_manager_class="
            "cleaner.verl.agent_loop_manager.CleanerAgentLoopManager and trainer.use_v1=True"
        )
    config = config or {}
    advantages, stats = tool_dpo_advantages(
        token_level_rewards,
        response_mask,
        index,
        old_log_probs,
        samples,
        ToolDpoSettings.from_algorithm(config),
        norm_adv_by_std=bool(config.get("norm_adv_by_std_in_grpo", True)),
        skip_uniform_groups=name == DAPO_TOOL_DPO,
    )
    if metrics is not None:
        metrics.update(stats.metrics())
    return advantages, advantages


# verl may pass keyword arguments meant for other estimators (e.g. `reward_baselines`); they are not used here.
@register_adv_est(GRPO_TOOL_DPO)
def compute_grpo_tool_dpo_advantage(
    token_level_rewards, response_mask, index=None, config=None, *, old_log_probs=None, samples=None, metrics=None, **_
):
    """GRPO without the negatives, plus the tool-call DPO adjustment (see the module docstring)."""
    return _estimate(GRPO_TOOL_DPO, token_level_rewards, response_mask, index, config, old_log_probs, samples, metrics)


@register_adv_est(DAPO_TOOL_DPO)
def compute_dapo_tool_dpo_advantage(
    token_level_rewards, response_mask, index=None, config=None, *, old_log_probs=None, samples=None, metrics=None, **_
):
    """As `grpo_tool_dpo`, but groups whose positives share one reward contribute nothing (DAPO)."""
    return _estimate(DAPO_TOOL_DPO, token_level_rewards, response_mask, index, config, old_log_probs, samples, metrics)
