"""The one place that composes verl's `ppo_trainer` config (Hydra) from overrides."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig


def verl_config_dir() -> Path:
    """The directory of the installed verl's Hydra configs (`ppo_trainer.yaml`, ...)."""
    import verl

    return Path(verl.__file__).parent / "trainer" / "config"


def compose_trainer_config(overrides: Sequence[str] = ()) -> DictConfig:
    """verl's `ppo_trainer` config with `overrides` (Hydra syntax: `key=value`, `+key=value`), as `main_ppo` sees it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    # Hydra keeps one global instance per process; a previous composition (ours or a caller's) would block this one.
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))
