"""The one override block users copy (docs/plugin.md, "A complete set of overrides") sets what the recipes train with.

It is composed onto verl's stock `ppo_trainer` and compared, key by key, with CLEANER-4B's recipe config; and it
must name every cleaner key the recipe sets (the agent loop, manager, multi_turn class, reward, and each SAAR or
purification key the recipe sets to something other than its default: a key the block leaves out gets the default).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from composed_snapshots import RECIPE_CONFIGS, compose
from omegaconf import OmegaConf

from cleaner.purify.config import PurificationConfig
from cleaner.saar.config import SaarConfig
from cleaner.verl.trainer_config import compose_trainer_config

pytestmark = pytest.mark.slow  # composes verl's Hydra config

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DOC = ROOT / "docs" / "plugin.md"
MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"
# Every SAAR and purification key with its default, as the tool recipes compose it.
DECLARED = yaml.safe_load((RECIPE_CONFIGS / "multi_turn" / "cleaner.yaml").read_text())


def documented_overrides() -> list[str]:
    """The overrides of the block under "## 4. A complete set of overrides", with $PWD the checkout."""
    section = PLUGIN_DOC.read_text().split("## 4. A complete set of overrides", 1)[1]
    block = section.split("```", 2)[1]
    words = " ".join(line.rstrip("\\ ") for line in block.splitlines()).split()
    assert words[:3] == ["python", "-m", "verl.trainer.main_ppo"]
    return [word.replace("$PWD", str(ROOT)) for word in words[3:] if word != "..."]


def cleaner_keys(config) -> set[str]:
    """The keys of `config` that are cleaner's: SAAR and purification keys not at their default, cleaner classes and
    modules, the judge (the reward's, and the one the Ray workers get for the tool)."""
    flat = {}

    def walk(value, prefix):
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{prefix}.{key}" if prefix else key)
        else:
            flat[prefix] = value

    walk(OmegaConf.to_container(config, resolve=True), "")

    def set_by_recipe(key: str, value) -> bool:
        name = key.removeprefix(f"{MULTI_TURN}.")
        return key.startswith(f"{MULTI_TURN}.") and name in DECLARED and name != "_target_" and value != DECLARED[name]

    return {
        key
        for key, value in flat.items()
        if set_by_recipe(key, value) or re.search(r"cleaner", str(value)) or key.lower().endswith("judge_url")
    }


@pytest.fixture
def recipe(monkeypatch):
    monkeypatch.setenv("CLEANER_ROOT", str(ROOT))
    for key in ("JUDGE_URL", "MODEL_PATH"):
        monkeypatch.delenv(key, raising=False)
    return compose("qwen3_4b_cleaner")


def test_the_documented_block_composes_to_the_recipes_values(recipe):
    overrides = documented_overrides()
    documented = compose_trainer_config(overrides)
    keys = [override.lstrip("+").split("=", 1)[0] for override in overrides]
    assert len(keys) > 10
    for key in keys:
        assert OmegaConf.select(documented, key) == OmegaConf.select(recipe, key), key


def test_the_documented_block_names_every_cleaner_key_the_recipe_sets(recipe):
    """Composed, the block and the recipe have the same cleaner keys (set directly or derived by verl's config)."""
    documented = compose_trainer_config(documented_overrides())
    assert cleaner_keys(documented) == cleaner_keys(recipe)
    # and the agent loop and the trainer read the same settings from both
    for read in (SaarConfig.from_multi_turn, PurificationConfig.from_multi_turn):
        assert read(OmegaConf.select(documented, MULTI_TURN)) == read(OmegaConf.select(recipe, MULTI_TURN))
