"""Retired path. The multi-turn config class is `cleaner.verl.multi_turn_config.SaarMultiTurnConfig`, and the
plugin's install check is `python -m cleaner.verl.plugin --check`. Importing this module fails naming both."""

raise ImportError(
    "cleaner.plugin was removed: set actor_rollout_ref.rollout.multi_turn._target_="
    "cleaner.verl.multi_turn_config.SaarMultiTurnConfig, and check an install with "
    "`python -m cleaner.verl.plugin --check`"
)
