"""The recipe configs' shape: every recipe is at most two layers of this repository's YAML above paper_grpo.yaml, and
a recipe extends layers and config groups only, never another recipe (so it never undoes a sibling's settings)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "recipe" / "cleaner" / "config"
BASE = "paper_grpo"
# One layer per concern, each directly or through one other layer on paper_grpo.
LAYERS = {"tools", "notool", "purification", "validation_only"}
# Files that are no trainer config (verl's agent-loop and tool yaml).
NOT_TRAINER_CONFIGS = {"agent_loop", "python_tool"}


def parents(name: str) -> list[str]:
    """The configs of this directory that `name`'s defaults list extends (config groups left out)."""
    config = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text()) or {}
    return [entry for entry in config.get("defaults", []) if isinstance(entry, str) and entry != "_self_"]


def levels_above_base(name: str) -> int:
    """How many of this directory's configs lie between `name` and paper_grpo.yaml on its longest path."""
    if name == BASE:
        return -1
    return max((1 + levels_above_base(parent) for parent in parents(name) if parent != "ppo_trainer"), default=0)


def recipes() -> set[str]:
    return {path.stem for path in CONFIGS.glob("*.yaml")} - LAYERS - NOT_TRAINER_CONFIGS - {BASE}


def test_every_recipe_is_at_most_two_layers_above_paper_grpo():
    deep = {name: levels_above_base(name) for name in recipes() if levels_above_base(name) > 2}
    assert not deep, f"more than two layers between these recipes and {BASE}.yaml: {deep}"


def test_a_recipe_extends_layers_and_config_groups_only():
    assert {"qwen3_4b_cleaner", "qwen2.5_7b_cleaner", "eval_tools", "train_cpu"} <= recipes()
    for name in recipes():
        assert set(parents(name)) <= LAYERS, f"{name} extends {set(parents(name)) - LAYERS}"


def test_every_layer_reaches_paper_grpo():
    for layer in LAYERS - {"validation_only"}:  # validation_only is added beside a layer, on its own
        assert levels_above_base(layer) in (0, 1), layer
