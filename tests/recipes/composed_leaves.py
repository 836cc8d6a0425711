"""A composed verl config as the leaves that differ from verl's stock `ppo_trainer`, paths relative to the checkout.

`tests/recipes/data/composed_before/<case>.json` holds them for each recipe as the bash recipes (common.sh) composed
it before the recipes became config files; `test_recipe_configs_unchanged.py` composes the config files and compares.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

ROOT = Path(__file__).resolve().parents[2]
DELETED = "<deleted>"


def _leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix, value


def _normalised(value: Any) -> Any:
    if isinstance(value, str):
        return re.sub(r"/tmp/cleaner-ray-\w+", "<ray-tmp>", value.replace(str(ROOT), "<root>"))
    if isinstance(value, list):
        return [_normalised(item) for item in value]
    return value


def changed_leaves(config: DictConfig, stock: DictConfig) -> dict[str, Any]:
    """{dotted key: value} for every leaf of `config` that is not verl's stock value (`<deleted>`: not there at all)."""
    composed = dict(_leaves(OmegaConf.to_container(config, resolve=True)))
    default = dict(_leaves(OmegaConf.to_container(stock, resolve=True)))
    changed = {key: _normalised(value) for key, value in composed.items() if default.get(key, DELETED) != value}
    changed.update({key: DELETED for key in default if key not in composed})
    return changed
