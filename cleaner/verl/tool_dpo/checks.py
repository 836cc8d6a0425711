"""Config-time checks of negative samples and the tool-DPO estimators: a setting that cannot train fails here,
with the key named, instead of hours into a run. `tool_dpo_problems` is one of `cleaner.verl.config_checks`'
checks, so the recipes' DRY_RUN and preflight and the trainer's start-up all run it. Nothing here imports verl.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from cleaner.saar.config import SaarConfig, SaarConfigError
from cleaner.verl.tool_dpo.settings import ESTIMATORS, USE_DPO_KEY, ToolDpoConfigError, ToolDpoSettings

MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"
MANAGER_KEY = "actor_rollout_ref.rollout.agent.agent_loop_manager_class"
# The manager installs the trainer hook the estimators depend on.
CLEANER_MANAGER = "cleaner.verl.agent_loop_manager.CleanerAgentLoopManager"


def check_tool_dpo_config(config: Any) -> None:
    """Raise `ToolDpoConfigError` if the negative-sample / tool-DPO settings of a trainer config cannot run."""
    settings = ToolDpoSettings.from_algorithm(config.algorithm)
    estimator = str(config.algorithm.adv_estimator)
    ours = estimator in ESTIMATORS
    multi_turn = OmegaConf.select(config, MULTI_TURN)
    if not (settings.use_dpo_on_tool_calls or ours or (multi_turn or {}).get("save_negative_samples")):
        return  # not concerned; the SAAR keys are validated where SAAR is
    saar = SaarConfig.from_multi_turn(multi_turn)
    negatives = saar.save_negative_samples
    options = " or ".join(ESTIMATORS)
    if settings.use_dpo_on_tool_calls and not negatives:
        _fail(f"algorithm.{USE_DPO_KEY}=True needs negative samples: set {MULTI_TURN}.save_negative_samples=True")
    if settings.use_dpo_on_tool_calls and not ours:
        _fail(f"algorithm.{USE_DPO_KEY}=True needs algorithm.adv_estimator={options}, got {estimator!r}")
    if negatives and not saar.enable_tool_rollback:
        _fail(
            f"{MULTI_TURN}.save_negative_samples=True needs SAAR ({MULTI_TURN}.enable_tool_rollback=True): "
            "negatives are the failed attempts SAAR rolls back"
        )
    if negatives and saar.max_negative_samples_per_group < 1:
        _fail(
            f"{MULTI_TURN}.save_negative_samples=True with max_negative_samples_per_group="
            f"{saar.max_negative_samples_per_group} would keep no negative; set it to 1 or more"
        )
    if negatives and not ours:
        _fail(
            f"{MULTI_TURN}.save_negative_samples=True needs algorithm.adv_estimator={options} (got {estimator!r}): "
            "another estimator would train the negatives as if they were ordinary samples"
        )
    if ours and not negatives:
        _fail(f"algorithm.adv_estimator={estimator} needs {MULTI_TURN}.save_negative_samples=True")
    if not bool(config.trainer.get("use_v1", True)):
        _fail(
            "negative samples need verl's v1 trainer (trainer.use_v1=True): the legacy trainer takes one output per "
            "trajectory and joins it row by row with the prompts, so it cannot train the extra outputs"
        )
    manager = OmegaConf.select(config, MANAGER_KEY)
    if manager != CLEANER_MANAGER:
        _fail(
            f"{MANAGER_KEY}={manager!r}: negative samples and algorithm.adv_estimator={estimator} need "
            f"{CLEANER_MANAGER}, which hooks the estimator into the trainer"
        )


def tool_dpo_problems(config: Any) -> list[str]:
    """The first problem of the settings, as `cleaner.verl.config_checks` reports problems (none: empty)."""
    try:
        check_tool_dpo_config(config)
    except ToolDpoConfigError as exc:
        return [str(exc)]
    except SaarConfigError:
        return []  # an invalid SAAR value is reported by cleaner.verl.config_checks.saar_settings
    return []


def _fail(message: str) -> None:
    raise ToolDpoConfigError(message)
