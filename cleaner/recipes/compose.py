"""Compose a recipe config (recipe/cleaner/config/<name>.yaml) as `main_ppo --config-dir --config-name` does."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

RECIPE_CONFIG_DIR = Path(__file__).resolve().parents[2] / "recipe" / "cleaner" / "config"


def compose_recipe(name: str, overrides: Sequence[str] = (), config_dir: Path = RECIPE_CONFIG_DIR) -> DictConfig:
    """The config `python -m verl.trainer.main_ppo --config-dir config_dir --config-name name *overrides` trains with.

    There main_ppo's own config dir (verl's, with `ppo_trainer`) is on the search path and `--config-dir` adds ours;
    Hydra's compose API finds a primary config only in the dir it is initialised with, so here the two swap places.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from cleaner.verl.trainer_config import verl_config_dir

    # Hydra keeps one global instance per process; a previous composition (ours or a caller's) would block this one.
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name=name, overrides=[f"hydra.searchpath=[file://{verl_config_dir()}]", *overrides])
