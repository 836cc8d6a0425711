"""`python -m cleaner.recipes.config_values`: what eval_common.sh labels its results table with is the sampling the
validation runs used, read from their composed config (overrides applied), not a copy of paper_grpo.yaml's."""

from __future__ import annotations

import pytest
import yaml
from composed_snapshots import RECIPE_CONFIGS

from cleaner.recipes.config_values import config_values

pytestmark = pytest.mark.slow  # composes verl's Hydra config

VAL_KWARGS = "actor_rollout_ref.rollout.val_kwargs"
KEYS = [f"{VAL_KWARGS}.temperature", f"{VAL_KWARGS}.top_p"]


def test_the_evaluation_reports_paper_grpos_validation_sampling(monkeypatch):
    monkeypatch.delenv("MODEL_PATH", raising=False)
    shared = yaml.safe_load((RECIPE_CONFIGS / "paper_grpo.yaml").read_text())["actor_rollout_ref"]["rollout"]
    expected = [f"{key}={shared['val_kwargs'][key]}" for key in ("temperature", "top_p")]
    for mode in ("tools", "notool"):
        assert config_values(RECIPE_CONFIGS, f"eval_{mode}", KEYS, ["actor_rollout_ref.model.path=/m"]) == expected


def test_an_override_is_what_gets_reported():
    overrides = ["actor_rollout_ref.model.path=/m", f"{VAL_KWARGS}.top_p=0.95"]
    assert config_values(RECIPE_CONFIGS, "eval_tools", KEYS, overrides)[1] == "top_p=0.95"


def test_an_unknown_key_is_refused_by_name():
    with pytest.raises(KeyError, match="eval_tools: no key actor_rollout_ref.rollout.val_kwargs.top_q"):
        config_values(RECIPE_CONFIGS, "eval_tools", [f"{VAL_KWARGS}.top_q"], ["actor_rollout_ref.model.path=/m"])
