"""The agent-loop manager to name in `actor_rollout_ref.rollout.agent.agent_loop_manager_class`.

verl constructs the manager in the trainer's own process, with `Manager.create(config=..., ...)`, in both
the legacy and the v1 trainer (one config key for both, though each needs a different base class). So
`CleanerAgentLoopManager.create` is the opt-in point that
- installs the trainer hooks that log `rollback/*` and `tool_calls/*` (cleaner.verl.trainer_metrics) and keep
  trajectories without trained tokens out of group-relative advantages (cleaner.verl.group_statistics),
- checks that the cleaner agent loop is registered, raising `PluginError` with the cause if not,
- returns verl's own manager for the running trainer, with agent-loop workers that repeat that
  check in their own (Ray actor) process before running any trajectory.

The workers also hand verl's per-trajectory validate flag to the agent loop out of band
(`cleaner.verl.validation_flag`), and give every trajectory the `saar_*` columns (None for other agent loops,
as verl itself fills a missing column within one worker), so a batch mixing `cleaner_tool_agent` with
`tool_agent` or `single_turn_agent` rows concatenates across workers.
"""

from __future__ import annotations

import logging
from typing import Any

import ray
from omegaconf import DictConfig
from verl.experimental.agent_loop import AgentLoopManager, AgentLoopWorker
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ

from cleaner.purify.failed_calls import FAILED_CALLS_KEY
from cleaner.purify.turns import EXTRA_FIELD_KEYS as TURN_FIELD_KEYS
from cleaner.saar.stats import EXTRA_FIELD_KEYS
from cleaner.verl import group_statistics, purification, trainer_metrics
from cleaner.verl.config_checks import check_trainer_config
from cleaner.verl.plugin import require_registered
from cleaner.verl.tool_dpo import hooks as tool_dpo_hooks
from cleaner.verl.validation_flag import VALIDATING

logger = logging.getLogger(__name__)


class _TrajectoryContextMixin:
    """The validate flag for the agent loop (verl passes it to none), and the same columns for every trajectory."""

    async def _run_agent_loop(self, sampling_params: dict[str, Any], trajectory: dict[str, Any], **kwargs: Any):
        # Each trajectory runs in its own task, so this value is seen by this trajectory only.
        token = VALIDATING.set(bool(trajectory["validate"]))
        try:
            return await super()._run_agent_loop(sampling_params, trajectory, **kwargs)
        finally:
            VALIDATING.reset(token)

    async def _agent_loop_postprocess(self, output: Any, validate: bool, **kwargs: Any):
        for item in output if isinstance(output, list) else [output]:
            for key in (*EXTRA_FIELD_KEYS, *TURN_FIELD_KEYS, FAILED_CALLS_KEY):
                item.extra_fields.setdefault(key, None)
        return await super()._agent_loop_postprocess(output, validate, **kwargs)


class CleanerAgentLoopWorker(_TrajectoryContextMixin, AgentLoopWorker):
    """verl's agent-loop worker (legacy trainer) that fails at start-up if the cleaner loop is not registered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        require_registered()
        super().__init__(*args, **kwargs)


class CleanerAgentLoopWorkerTQ(_TrajectoryContextMixin, AgentLoopWorkerTQ.__ray_actor_class__):
    """The same check for the v1 trainer's TransferQueue worker (verl ships that one already ray.remote'd)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        require_registered()
        super().__init__(*args, **kwargs)


class _LegacyManager(AgentLoopManager):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.agent_loop_workers_class = ray.remote(CleanerAgentLoopWorker)
        super().__init__(*args, **kwargs)


class _TransferQueueManager(AgentLoopManagerTQ):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # AgentLoopManagerTQ sets its worker class before calling up; the workers are started later.
        self.agent_loop_workers_class = ray.remote(CleanerAgentLoopWorkerTQ)


class CleanerAgentLoopManager:
    """Picks verl's manager for the running trainer (`trainer.use_v1`) after installing the cleaner hooks."""

    @classmethod
    def create(cls, config: DictConfig, *args: Any, **kwargs: Any) -> AgentLoopManager:
        check_trainer_config(config)  # settings that compose but would not train as asked (docs/recipes.md)
        require_registered()
        trainer_metrics.install()
        purification.install(config)  # multi_turn.purification's trainer-side modes and the purify/* audit
        tool_dpo_hooks.install()  # hands the tool-DPO estimators old log-probs and pairs (docs/negative-samples.md)
        group_statistics.install()  # trajectories without trained tokens stay out of group mean/std (GRPO, ...)
        use_v1 = bool(config.trainer.get("use_v1", True))
        manager_class = _TransferQueueManager if use_v1 else _LegacyManager
        logger.info("cleaner: agent-loop manager %s (trainer.use_v1=%s)", manager_class.__qualname__, use_v1)
        return manager_class.create(config, *args, **kwargs)
