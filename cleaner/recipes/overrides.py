"""Overrides a user appends to a recipe, rewritten so that the reference implementation's lines keep their meaning.

    python -m cleaner.recipes.overrides OVERRIDE...   # prints the rewritten overrides, one a line; a note per rewrite on stderr

`recipe/cleaner/launch.sh` runs it on a recipe script's arguments before they reach `main_ppo`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from cleaner.verl.config_checks import current_reward_key


def _split_override(override: str) -> tuple[str, str, str | None]:
    """`++a.b=1` -> ("++", "a.b", "1"); a deletion `~a.b` has no value."""
    prefix = "++" if override.startswith("++") else override[:1] if override[:1] in "+~" else ""
    key, sep, value = override[len(prefix) :].partition("=")
    return prefix, key.strip(), value if sep else None


def translate_overrides(user: Sequence[str]) -> tuple[list[str], list[str]]:
    """The user's overrides rewritten to mean here what they meant in the reference, and a note per noteworthy rewrite.

    - A legacy reward key (`reward_model.reward_manager`, `reward_model.reward_kwargs.*`,
      `custom_reward_function.*`, ...), which verl 0.9.1's `main_ppo` never reads, becomes the key it reads, as
      `++key` (add or override), with a note. `reward_model.reward_manager=dapo` is dropped: the recipe's manager
      already is verl's DAPO manager; any other manager is selected from verl's registry.
    - `+key=value` becomes `++key=value`: the reference appends its SAAR keys (`+...multi_turn.enable_tool_rollback`)
      to a config without them, while a recipe config already sets them, and Hydra refuses to append a key that
      exists ("Could not append to config"). `++` adds the key or overrides it, which is what `+` meant there.
    Everything else is passed through unchanged.
    """
    translated: list[str] = []
    notes: list[str] = []
    for override in user:
        prefix, key, value = _split_override(override)
        new_key = current_reward_key(key) if prefix != "~" and value is not None else None
        if key == "reward_model.reward_manager" and value is not None:
            if value.strip() == "dapo":
                notes.append(f"{override}: dropped, the recipe already uses verl's DAPO reward manager")
                continue
            replacement = ["reward.reward_manager.source=register", f"reward.reward_manager.name={value}"]
        elif new_key is not None:
            replacement = [f"++{new_key}={value}"]
        else:
            translated.append(f"++{key}={value}" if prefix == "+" else override)
            continue
        notes.append(f"{override} -> {' '.join(replacement)}")
        translated.extend(replacement)
    return translated, notes


def main(argv: list[str]) -> int:
    translated, notes = translate_overrides(argv)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if translated:
        print("\n".join(translated))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
