"""The v1 trainer hook that hands the tool-DPO estimators what verl does not pass to an estimator.

verl 0.9.1's v1 `PPOTrainer._compute_advantage(batch, metrics)` reads a fixed list of fields from
TransferQueue (no `extra_fields`, where the negative-sample links live) and calls a registered estimator
with `token_level_rewards`, `response_mask`, `index` and `config` only (through
`verl.trainer.ppo.v1.utils.compute_advantage`). `install()` wraps, once per process:

| verl function                                   | added when `algorithm.adv_estimator` is ours             |
|-------------------------------------------------|----------------------------------------------------------|
| `PPOTrainer._compute_advantage(batch, metrics)` | reads each row's negative-sample fields from TransferQueue |
|                                                 | (padding rows verl added to fill the batch become None)  |
| `v1.utils.compute_advantage(data, ...)`         | calls the estimator with `data`'s `old_log_probs`, those  |
|                                                 | fields and the step's metrics dict                        |

With any other estimator both wrappers call verl's original unchanged. The legacy trainer is not hooked:
it cannot train several outputs per trajectory, so negatives (and these estimators) are refused there at
config time (cleaner.verl.tool_dpo.checks).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cleaner.saar.negatives import SampleLinks, read_sample_links
from cleaner.verl.tool_dpo.estimator import ToolDpoError
from cleaner.verl.tool_dpo.settings import ESTIMATORS

logger = logging.getLogger(__name__)

_MARK = "__cleaner_tool_dpo__"


@dataclass(frozen=True)
class _Step:
    samples: list[SampleLinks | None]
    metrics: dict[str, Any]


class _Current:
    """The batch `_compute_advantage` is working on (None outside of a call); the trainer runs one at a time."""

    step: _Step | None = None


@contextmanager
def advantage_step(samples: Sequence[SampleLinks | None], metrics: dict[str, Any]) -> Iterator[None]:
    """Within this block, the estimators get `samples` (one per row of the batch) and report into `metrics`."""
    _Current.step = _Step(list(samples), metrics)
    try:
        yield
    finally:
        _Current.step = None


def _marked(wrapper: Callable) -> Callable:
    setattr(wrapper, _MARK, True)
    return wrapper


def batch_samples(keys: list[str], tags: list[dict[str, Any]], partition_id: str) -> list[SampleLinks | None]:
    """Each row's negative-sample fields, in `keys` order; None for verl's padding rows."""
    from cleaner.verl.trainer_metrics import fetch_extra_fields

    rows = fetch_extra_fields(keys, partition_id)
    return [
        None if tag.get("is_padding", False) else read_sample_links(row) for row, tag in zip(rows, tags, strict=True)
    ]


def _wrap_compute_advantage_step(original: Callable) -> Callable:
    @functools.wraps(original)
    def _compute_advantage(self, batch, metrics, *args, **kwargs):
        if self.config.algorithm.adv_estimator not in ESTIMATORS:
            return original(self, batch, metrics, *args, **kwargs)
        with advantage_step(batch_samples(batch.keys, batch.tags, batch.partition_id), metrics):
            return original(self, batch, metrics, *args, **kwargs)

    return _marked(_compute_advantage)


def _wrap_compute_advantage(original: Callable) -> Callable:
    @functools.wraps(original)
    def compute_advantage(data, adv_estimator, *args, config=None, **kwargs):
        if adv_estimator not in ESTIMATORS:
            return original(data, adv_estimator, *args, config=config, **kwargs)
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn

        step = _Current.step
        if step is None:
            raise ToolDpoError(
                f"algorithm.adv_estimator={adv_estimator} was called outside the v1 trainer's advantage step "
                "(the legacy trainer cannot train negative samples: set trainer.use_v1=True)"
            )
        if len(step.samples) != len(data):
            raise ToolDpoError(f"{len(data)} rows to estimate but {len(step.samples)} negative-sample records")
        advantages, returns = get_adv_estimator_fn(adv_estimator)(
            token_level_rewards=data.batch["token_level_rewards"],
            response_mask=data.batch["response_mask"],
            index=data.non_tensor_batch["uid"],
            config=config,
            old_log_probs=data.batch["old_log_probs"],
            samples=step.samples,
            metrics=step.metrics,
        )
        data.batch["advantages"] = advantages
        data.batch["returns"] = returns
        return data

    return _marked(compute_advantage)


def install() -> None:
    """Wrap the v1 trainer's advantage step in this process (idempotent)."""
    from verl.trainer.ppo.v1 import utils as v1_utils
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from cleaner.verl.private_api import require_verl_api

    require_verl_api()

    if not getattr(PPOTrainer._compute_advantage, _MARK, False):
        PPOTrainer._compute_advantage = _wrap_compute_advantage_step(PPOTrainer._compute_advantage)
    if not getattr(v1_utils.compute_advantage, _MARK, False):
        v1_utils.compute_advantage = _wrap_compute_advantage(v1_utils.compute_advantage)
    logger.info("cleaner: tool-DPO estimators %s hooked into verl's v1 trainer", ", ".join(ESTIMATORS))
