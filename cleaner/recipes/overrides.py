"""Overrides a user appends to a recipe, rewritten so that the reference implementation's lines keep their meaning.

`recipe/cleaner/compose_config.py --translate` prints the result for `common.sh`; `PRINT_COMMAND=1` shows it.
"""

from __future__ import annotations

from collections.abc import Sequence

from cleaner.verl.config_checks import current_reward_key


def _split_override(override: str) -> tuple[str, str, str | None]:
    """`++a.b=1` -> ("++", "a.b", "1"); a deletion `~a.b` has no value."""
    prefix = "++" if override.startswith("++") else override[:1] if override[:1] in "+~" else ""
    key, sep, value = override[len(prefix) :].partition("=")
    return prefix, key.strip(), value if sep else None


def translate_overrides(recipe: Sequence[str], user: Sequence[str]) -> tuple[list[str], list[str]]:
    """The user's overrides rewritten to mean here what they meant in the reference, and a note per rewrite.

    - A legacy reward key (`reward_model.reward_manager`, `reward_model.reward_kwargs.*`,
      `custom_reward_function.*`, ...), which verl 0.9.1's `main_ppo` never reads, becomes the key it reads, as
      `++key` (add or override). `reward_model.reward_manager=dapo` is dropped: the recipe's manager already is
      verl's DAPO manager; any other manager is selected from verl's registry.
    - `+key=value` for a key the recipe already sets would stop Hydra ("Could not append to config"); it becomes
      `++key=value`, which overrides it.
    Everything else is passed through unchanged.
    """
    recipe_keys = {_split_override(override)[1] for override in recipe}
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
        elif prefix == "+" and key in recipe_keys:
            replacement = [f"++{key}={value}"]
        else:
            translated.append(override)
            continue
        notes.append(f"{override} -> {' '.join(replacement)}")
        translated.extend(replacement)
    return translated, notes
