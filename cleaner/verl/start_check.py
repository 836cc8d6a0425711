"""Run cleaner's config checks where `python -m verl.trainer.main_ppo` validates its own config.

verl 0.9.1's `main_ppo.main` calls `verl.utils.config.validate_config(config, ...)` in the driver, before Ray starts
and before any worker is created; the agent-loop manager (the other place cleaner sees the config) is built only
after the actor and rollout workers. Importing this module wraps `validate_config` so that, for a config that
selects a cleaner piece (`cleaner.verl.config_checks.uses_cleaner`), every check of `CONFIG_CHECKS` (the SAAR
keys included) runs right after verl's own validation and a problem stops the run there with
`TrainerConfigError` naming the key. Other verl configs are left alone.

The `verl.plugins` entry point (`cleaner.verl.plugin`) imports this module during `import verl`, before
`main_ppo` binds `validate_config` to its own name, so a hand-started `main_ppo` is covered with no override.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from cleaner.verl.config_checks import check_trainer_config, uses_cleaner

logger = logging.getLogger(__name__)

_MARK = "__cleaner_start_check__"


def _wrap(original: Callable) -> Callable:
    @functools.wraps(original)
    def validate_config(config: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(config, *args, **kwargs)
        if uses_cleaner(config):
            check_trainer_config(config)
        return result

    setattr(validate_config, _MARK, True)
    return validate_config


def install() -> None:
    """Wrap `verl.utils.config.validate_config` in this process (idempotent)."""
    from verl.utils import config as verl_config

    if not getattr(verl_config.validate_config, _MARK, False):
        verl_config.validate_config = _wrap(verl_config.validate_config)


install()
