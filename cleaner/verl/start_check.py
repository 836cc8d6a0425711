"""The trainer-start check and DRY_RUN: cleaner's checks where `python -m verl.trainer.main_ppo` validates its config.

verl 0.9.1's `main_ppo.main` calls `verl.utils.config.validate_config(config, ...)` in the driver, before Ray starts
and before any worker is created; the agent-loop manager (the other place cleaner sees the config) is built only
after the actor and rollout workers. Importing this module wraps `validate_config` so that, for a config that
selects a cleaner piece (`selects_cleaner`: the agent loop, manager, multi_turn class or reward manager),
`review_start` runs there: cleaner's config
checks (the SAAR keys among them), the tool parser and the files the config names, then verl's own validation, then
the run's inputs (model, data, judge: `cleaner.data.run_inputs`). A problem stops the run there with `TrainerConfigError`
naming the key. Other verl configs are left alone.

DRY_RUN lives here too: with `CLEANER_DRY_RUN=1` in the environment (the recipe scripts' `DRY_RUN=1`, set by
recipe/cleaner/launch.sh) the driver prints the composed config after the checks, every key resolved (the SAAR and
purification keys of the tool recipes among them), reports what a real run would stop on, and exits: no Ray, no GPU.

The `verl.plugins` entry point (`cleaner.verl.plugin`) imports this module during `import verl`, before
`main_ppo` binds `validate_config` to its own name, so a hand-started `main_ppo` is covered with no override.

verl's `fully_async_policy` entry point (`verl.experimental.fully_async_policy.fully_async_main`) never calls
`validate_config`; the first thing its driver does with the config is `verl.utils.device.auto_set_device(config)`,
bound by name the same way. That is wrapped too: for a cleaner config with an `async_training` section (that entry
point's) it runs `config_checks.fully_async_problems` (its client drops prompt log-probs, so the IS gate and the
measurement are refused there, naming the key) before Ray starts.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cleaner.data.run_inputs import config_file_problems, run_input_problems
from cleaner.verl.config_checks import (
    FULLY_ASYNC_SECTION,
    TrainerConfigError,
    data_agent_problems,
    fully_async_problems,
    review_trainer_config,
    uses_cleaner,
)

logger = logging.getLogger(__name__)

_MARK = "__cleaner_start_check__"
DRY_RUN_ENV = "CLEANER_DRY_RUN"
CONFIG_MARKER = "--- composed config ---"


@dataclass
class StartReport:
    warnings: list[str] = field(default_factory=list)
    # The model, data and judge: what this machine lacks for the run (DRY_RUN reports them, a start stops on them).
    input_problems: list[str] = field(default_factory=list)


def review_start(config: DictConfig, verl_validate: Callable[[DictConfig], Any] | None = None) -> StartReport:
    """Raise `TrainerConfigError` on a config that would not run; return its warnings and missing inputs.

    cleaner's checks come first: they name the key where verl's would only fail to build a class.
    """
    from verl.utils.config import omega_conf_to_dataclass

    OmegaConf.resolve(OmegaConf.create(OmegaConf.to_container(config)))  # every interpolation resolves
    report = review_trainer_config(config, read_data=False)
    problems = report.problems + tool_parser_problems(config) + config_file_problems(config)
    if problems:
        raise TrainerConfigError("\n".join(problems))
    if verl_validate is not None:
        verl_validate(config)
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)  # what the rollout workers build at start-up
    return StartReport(report.warnings, run_input_problems(config) + data_agent_problems(config))


def tool_parser_problems(config: DictConfig) -> list[str]:
    """With tools on, `multi_turn.format` must name a tool parser verl knows (its own or cleaner's)."""
    from verl.experimental.agent_loop.tool_parser import ToolParser

    import cleaner.verl.tool_parser  # noqa: F401  (registers the cleaner tool parsers, as `import verl` does in workers)

    multi_turn = config.actor_rollout_ref.rollout.multi_turn
    if not multi_turn.enable or multi_turn.format in ToolParser._registry:
        return []
    return [
        f"actor_rollout_ref.rollout.multi_turn.format={multi_turn.format!r} is not a registered tool parser "
        f"({', '.join(sorted(ToolParser._registry))})"
    ]


def selects_cleaner(config: DictConfig) -> bool:
    """A cleaner piece in the rollout (`uses_cleaner`) or cleaner's reward manager (the no-tool recipes)."""
    manager_module = OmegaConf.select(config, "reward.reward_manager.module.path")
    return uses_cleaner(config) or str(manager_module or "").startswith("pkg://cleaner.")


def _wrap(original: Callable) -> Callable:
    @functools.wraps(original)
    def validate_config(config: Any, *args: Any, **kwargs: Any) -> Any:
        dry_run = os.environ.get(DRY_RUN_ENV) == "1"
        if not selects_cleaner(config):
            result = original(config, *args, **kwargs)
            if dry_run:  # nothing of cleaner's to check, and still no training
                _finish_dry_run(config, StartReport())
            return result
        report = review_start(config, lambda checked: original(checked, *args, **kwargs))
        for warning in report.warnings:
            logger.warning("cleaner config: %s", warning)
        if dry_run:
            _finish_dry_run(config, report)
        if report.input_problems:
            raise TrainerConfigError("cannot start:\n" + "\n".join(report.input_problems))
        return None

    setattr(validate_config, _MARK, True)
    return validate_config


def _finish_dry_run(config: DictConfig, report: StartReport) -> None:
    for warning in report.warnings:
        print(f"DRY_RUN: warning: {warning}", file=sys.stderr)
    if report.input_problems:
        print("DRY_RUN: a real run would stop here:\n" + "\n".join(report.input_problems), file=sys.stderr)
    print(CONFIG_MARKER)
    print(OmegaConf.to_yaml(config, resolve=True))
    print(f"DRY_RUN ok: {config.trainer.experiment_name} composed and validated against the installed verl")
    sys.stdout.flush()
    raise SystemExit(0)


def _wrap_auto_set_device(original: Callable) -> Callable:
    @functools.wraps(original)
    def auto_set_device(config: Any, *args: Any, **kwargs: Any) -> Any:
        if config is not None and OmegaConf.select(config, FULLY_ASYNC_SECTION) is not None and selects_cleaner(config):
            problems = fully_async_problems(config)
            if problems:
                raise TrainerConfigError("\n".join(problems))
        return original(config, *args, **kwargs)

    setattr(auto_set_device, _MARK, True)
    return auto_set_device


def install() -> None:
    """Wrap `verl.utils.config.validate_config` and `verl.utils.device.auto_set_device` in this process
    (idempotent)."""
    from verl.utils import config as verl_config
    from verl.utils import device as verl_device

    if not getattr(verl_config.validate_config, _MARK, False):
        verl_config.validate_config = _wrap(verl_config.validate_config)
    if not getattr(verl_device.auto_set_device, _MARK, False):
        verl_device.auto_set_device = _wrap_auto_set_device(verl_device.auto_set_device)


install()
