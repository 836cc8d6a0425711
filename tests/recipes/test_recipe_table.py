"""docs/recipes.md's table of what each recipe config changes names exactly the parents and keys of each file."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "recipe" / "cleaner" / "config"
PREFIX = "actor_rollout_ref."


def keys(value, prefix: str = "") -> set[str]:
    if isinstance(value, dict):
        return {key for name, item in value.items() for key in keys(item, f"{prefix}.{name}" if prefix else name)}
    return {prefix}


def table_rows() -> dict[str, tuple[list[str], set[str]]]:
    """config -> (parents, keys) from the rows of the table under "### What each recipe changes"."""
    section = (ROOT / "docs" / "recipes.md").read_text().split("### What each recipe changes", 1)[1]
    rows = {}
    for line in section.split("\n\n", 3)[2].splitlines()[2:]:
        name, _, parents, changed = (cell.strip() for cell in line.strip("|").split(" | "))
        rows[name.strip("`")] = (
            re.findall(r"`([^`]+)`", parents),
            {key.split("=", 1)[0] for key in re.findall(r"`([^`=]+=[^`]*)`", changed)},
        )
    return rows


def test_the_table_names_each_configs_parents_and_keys():
    rows = table_rows()
    recipes = {path.stem for path in CONFIGS.glob("*.yaml")} - {"paper_grpo", "validation_only", "python_tool"}
    assert set(rows) == recipes - {"agent_loop"}
    for name, (parents, named) in rows.items():
        config = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
        defaults = [
            entry if isinstance(entry, str) else "/".join(f"{group}/{option}" for group, option in entry.items())
            for entry in config.pop("defaults")
            if entry != "_self_"
        ]
        assert parents == defaults, name
        assert named == {key.removeprefix(PREFIX) for key in keys(config)}, name
