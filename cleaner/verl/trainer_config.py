"""The one place that composes a verl trainer config (Hydra): verl's `ppo_trainer`, or a config that extends it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig


def verl_config_dir() -> Path:
    """The directory of the installed verl's Hydra configs (`ppo_trainer.yaml`, ...)."""
    import verl

    return Path(verl.__file__).parent / "trainer" / "config"


def compose_trainer_config(
    overrides: Sequence[str] = (), config_name: str = "ppo_trainer", config_dir: Path | None = None
) -> DictConfig:
    """The config `python -m verl.trainer.main_ppo [--config-dir config_dir] --config-name config_name *overrides`
    trains with (overrides in Hydra syntax: `key=value`, `+key=value`).

    `config_dir` holds configs that extend verl's (recipe/cleaner/config). There `main_ppo`'s own config dir is on
    the search path and `--config-dir` adds ours; Hydra's compose API finds a primary config only in the dir it is
    initialised with, so here the two swap places.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    search = [] if config_dir is None else [f"hydra.searchpath=[file://{verl_config_dir()}]"]
    # Hydra keeps one global instance per process; a previous composition (ours or a caller's) would block this one.
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(config_dir or verl_config_dir()).resolve()), version_base=None):
        return compose(config_name=config_name, overrides=[*search, *overrides])
