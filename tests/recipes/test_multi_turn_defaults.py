"""recipe/cleaner/config/multi_turn/cleaner.yaml declares every SAAR and purification key with the dataclasses' default.

The tool recipes compose that file under `actor_rollout_ref.rollout.multi_turn`, so the config a run prints
(DRY_RUN=1) is every key it trains with. A field added to `SaarConfig` or `PurificationConfig` without its line there
fails here, with the line to add.
"""

from __future__ import annotations

import enum
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import yaml

from cleaner.purify.config import PurificationConfig
from cleaner.saar.config import SaarConfig

ROOT = Path(__file__).resolve().parents[2]
GROUP = ROOT / "recipe" / "cleaner" / "config" / "multi_turn" / "cleaner.yaml"
DATACLASSES = (SaarConfig, PurificationConfig)
# verl's key that selects the dataclass accepting these keys; not a field of either.
VERL_KEYS = {"_target_"}
# Declared as null: `purification` unset follows enable_tool_rollback (PurificationConfig.from_multi_turn), so a
# recipe turns SAAR on with either key; with the group's enable_tool_rollback=false that is the default, none.
NULL_DEFAULTS = {"purification"}


def plain(value: Any) -> Any:
    """A default as YAML writes it: enums by value, tuples as lists."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [plain(item) for item in value]
    return value


def defaults() -> dict[str, tuple[str, Any]]:
    """key -> (the dataclass that reads it, its default as YAML writes it)."""
    found = {}
    for dataclass in DATACLASSES:
        for spec in fields(dataclass):
            default = spec.default if spec.default is not MISSING else spec.default_factory()
            found[spec.name] = (dataclass.__name__, plain(default))
    return found


def yaml_scalar(value: Any) -> str:
    """`value` as it stands after `key: ` on one line of YAML."""
    return yaml.safe_dump(value, default_flow_style=True).removesuffix("\n...\n").strip()


def declared() -> dict[str, Any]:
    return yaml.safe_load(GROUP.read_text(encoding="utf-8"))


def test_every_field_is_declared_with_its_default():
    group = declared()
    expected = {key: None if key in NULL_DEFAULTS else default for key, (_, default) in defaults().items()}
    missing = [key for key in expected if key not in group]
    lines = "\n".join(
        f"# <{defaults()[key][0]}.{key}: what it does, one line>\n" + f"{key}: {yaml_scalar(expected[key])}"
        for key in missing
    )
    assert not missing, f"add to {GROUP.relative_to(ROOT)}:\n{lines}"
    wrong = {key: (group[key], expected[key]) for key in expected if group[key] != expected[key]}
    assert not wrong, f"{GROUP.relative_to(ROOT)} differs from the dataclasses' defaults (declared, default): {wrong}"


def test_every_declared_key_is_read():
    unread = set(declared()) - set(defaults()) - VERL_KEYS
    assert not unread, f"{GROUP.relative_to(ROOT)} declares keys no dataclass reads: {sorted(unread)}"


def test_every_key_has_a_comment_above_it():
    lines = GROUP.read_text(encoding="utf-8").splitlines()
    keys = [(index, line.split(":", 1)[0]) for index, line in enumerate(lines) if line and line[0].isalpha()]
    assert keys
    uncommented = [key for index, key in keys if not lines[index - 1].startswith("#")]
    assert not uncommented, f"{GROUP.relative_to(ROOT)}: a one-line comment above each of {uncommented}"


def test_the_declared_section_reads_as_the_dataclasses_defaults():
    """What the agent loop and the trainer build from the section (null `purification` included) is the default."""
    group = declared()
    assert SaarConfig.from_multi_turn(group) == SaarConfig()
    assert PurificationConfig.from_multi_turn(group) == PurificationConfig()
