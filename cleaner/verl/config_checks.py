"""Config-time checks of verl's trainer config: settings that would not train as the user believes.

The one place the trainer config is checked. `python -m verl.trainer.main_ppo` runs the checks in its driver where
it validates its own config, before Ray or any worker starts (the trainer-start check, `cleaner.verl.start_check`,
which also holds DRY_RUN), and again when `CleanerAgentLoopManager` is created. A check takes the composed config and returns problems, one line each, naming the key and what to
write instead. Nothing here imports verl.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from cleaner.data.agents import agent_name_counts
from cleaner.names import AGENT_NAME
from cleaner.purify.config import PurificationConfigError, saar_requested
from cleaner.saar.config import CONFIG_KEYS, SaarConfig, SaarConfigError
from cleaner.verl.purification import purification_problems
from cleaner.verl.tool_dpo.checks import tool_dpo_problems

logger = logging.getLogger(__name__)

ConfigCheck = Callable[[DictConfig], list[str]]


class TrainerConfigError(ValueError):
    """The trainer config composes but would not do what it says; the message names every problem."""


# Top-level sections of verl's `legacy_reward_impl.yaml` (the reference's verl fork read them); verl 0.9.1's
# `main_ppo` reads only `reward.*` and ignores these (only its fully-async entry point migrates them).
LEGACY_REWARD_SECTIONS = ("reward_model", "custom_reward_function", "sandbox_fusion")

# legacy key prefix -> the key verl 0.9.1 reads (the mapping of verl's own `migrate_legacy_reward_impl`).
_LEGACY_REWARD_RENAMES = (
    ("reward_model.num_workers", "reward.num_workers"),
    ("reward_model.reward_manager", "reward.reward_manager.name"),
    ("reward_model.reward_loop_source", "reward.reward_manager.source"),
    ("reward_model.reward_loop_module_path", "reward.reward_manager.module.path"),
    ("reward_model.reward_loop_class_name", "reward.reward_manager.module.name"),
    ("reward_model.enable", "reward.reward_model.enable"),
    ("reward_model.enable_resource_pool", "reward.reward_model.enable_resource_pool"),
    ("reward_model.n_gpus_per_node", "reward.reward_model.n_gpus_per_node"),
    ("reward_model.nnodes", "reward.reward_model.nnodes"),
    ("reward_model.model.path", "reward.reward_model.model_path"),
    ("reward_model.reward_kwargs", "reward.reward_kwargs"),
    ("reward_model.rollout", "reward.reward_model.rollout"),
    ("custom_reward_function", "reward.custom_reward_function"),
    ("sandbox_fusion", "reward.sandbox_fusion"),
)


def current_reward_key(legacy_key: str) -> str | None:
    """The verl 0.9.1 key for a legacy reward key (`reward_model.reward_manager` -> `reward.reward_manager.name`).

    None for a key outside the legacy sections, or one verl 0.9.1 has no equivalent for.
    """
    for old, new in _LEGACY_REWARD_RENAMES:
        if legacy_key == old or legacy_key.startswith(old + "."):
            return new + legacy_key[len(old) :]
    return None


def legacy_reward_keys(config: DictConfig) -> list[str]:
    """Legacy reward keys with a value: `main_ppo` would silently drop them (and with them the DAPO overlong
    penalty of `reward_model.reward_kwargs.overlong_buffer_cfg`)."""
    renames = []
    for section in LEGACY_REWARD_SECTIONS:
        value = config.get(section)
        if value is None:
            continue
        for key, leaf in _leaves(value, section):
            if leaf is not None:
                renames.append(f"{key} -> {current_reward_key(key) or '(no verl 0.9.1 equivalent)'}")
    if not renames:
        return []
    return [
        "legacy reward key(s) that verl 0.9.1's main_ppo never reads, so the setting would be silently lost; "
        "write the new key instead (`+` for keys outside verl's schema, such as reward.reward_kwargs.*): "
        + "; ".join(renames)
    ]


def reference_trainer_keys(config: DictConfig) -> list[str]:
    """Keys of the reference's forked trainer that verl 0.9.1 accepts with `+` and then ignores."""
    if OmegaConf.select(config, "trainer.filter_zero_advantage_samples"):
        return [
            "trainer.filter_zero_advantage_samples=True belongs to the reference's forked trainer; verl 0.9.1 has no "
            "such filter and would train on every sample. Remove the key (False, the reference's released setting, "
            "is accepted). The closest verl 0.9.1 feature is algorithm.filter_groups (DAPO dynamic sampling), which "
            "drops groups whose rewards are all equal and generates more to refill the batch"
        ]
    return []


MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"


def _multi_turn(config: DictConfig) -> Any:
    return OmegaConf.select(config, MULTI_TURN) or {}


# Names that were retired, per key, and the one name each thing has now: Hydra would report only "Error locating
# target" from inside a worker, and verl an unknown rollout.
RETIRED_NAMES = {
    "actor_rollout_ref.rollout.multi_turn._target_": {
        "cleaner.plugin.SaarMultiTurnConfig": "cleaner.verl.multi_turn_config.SaarMultiTurnConfig",
    },
    "actor_rollout_ref.rollout.agent.agent_loop_manager_class": {
        "cleaner.agent_loop_manager.CleanerAgentLoopManager": "cleaner.verl.agent_loop_manager.CleanerAgentLoopManager",
    },
    "actor_rollout_ref.rollout.name": {"cleaner_cpu": "cpu"},  # the CPU backend lives in verl-cpu (verl_cpu)
}
RETIRED_ENGINE_KWARGS = "actor_rollout_ref.rollout.engine_kwargs.cleaner_cpu"


def retired_names(config: DictConfig) -> list[str]:
    """A retired class path or backend name, with the one to write instead."""
    problems = []
    for key, renamed in RETIRED_NAMES.items():
        value = OmegaConf.select(config, key)
        if value in renamed:
            problems.append(f"{key}={value} is a retired name: write {key}={renamed[value]}")
    if OmegaConf.select(config, RETIRED_ENGINE_KWARGS) is not None:
        problems.append(f"{RETIRED_ENGINE_KWARGS} is a retired key: write actor_rollout_ref.rollout.engine_kwargs.cpu")
    return problems


def overlong_buffer(config: DictConfig) -> list[str]:
    """verl's DAPO reward manager asserts these in every reward worker, minutes into a run; say so at start."""
    buffer = OmegaConf.select(config, "reward.reward_kwargs.overlong_buffer_cfg")
    if not buffer or not buffer.get("enable"):
        return []
    length, max_length = buffer.get("len"), OmegaConf.select(config, "reward.reward_kwargs.max_resp_len")
    prefix = "reward.reward_kwargs"
    if max_length is None:
        return [f"{prefix}.overlong_buffer_cfg.enable=True needs {prefix}.max_resp_len (the response length)"]
    if not isinstance(length, int) or length <= 0 or length > max_length:
        return [
            f"{prefix}.overlong_buffer_cfg.len={length} must be a positive integer no larger than "
            f"{prefix}.max_resp_len={max_length} (verl's DAPO reward manager refuses it in every reward worker); "
            "with a short MAX_RESPONSE_LENGTH set OVERLONG_BUFFER_LEN below it"
        ]
    return []


def saar_enabled(config: DictConfig) -> bool:
    """SAAR runs in the agent loop: `enable_tool_rollback: true` or `purification: saar`."""
    multi_turn = _multi_turn(config)
    try:
        requested = saar_requested(multi_turn)
    except PurificationConfigError:
        # purification_problems reports the contradiction by name; the other checks read the rollback key alone
        requested = bool(multi_turn.get("enable_tool_rollback"))
    return bool(multi_turn.get("enable")) and requested


def saar_settings(config: DictConfig) -> list[str]:
    """The SAAR keys under `multi_turn` parse (`cleaner.saar.config.SaarConfig`), checked where the trainer starts.

    Without this a bad value would pass start-up and fail only when an agent-loop worker builds its loop.
    """
    multi_turn = _multi_turn(config)
    if not any(multi_turn.get(key) is not None for key in CONFIG_KEYS):
        return []
    try:
        SaarConfig.from_multi_turn(multi_turn)
    except SaarConfigError as exc:
        message = str(exc)
        return [message if message.startswith(MULTI_TURN) else f"{MULTI_TURN}.{message}"]
    return []


def _is_correction_requested(config: DictConfig) -> bool:
    return _multi_turn(config).get("rollback_is_correction") is True  # an invalid value is saar_settings' problem


def saar_log_prob_handling(config: DictConfig) -> list[str]:
    """SAAR splices tokens sampled in another context; rollout log-probs must not weight the update unasked.

    A rolled-back turn keeps tokens generated after the error was shown (deep) or a call generated in that
    context (shallow). Their rollout log-probs describe a context the purified sequence no longer contains, so
    importance sampling, rejection sampling or bypass mode (rollout log-probs as the PPO anchor) would train on
    ratios that mix the policy gap with the context gap. `multi_turn.rollback_is_correction=True` (Plan C) asks
    for exactly that correction, token by token: it lifts the guard for `rollout_is=token` only. Validation-only
    runs train nothing and are not checked.
    """
    if not saar_enabled(config) or OmegaConf.select(config, "trainer.val_only"):
        return []
    correction = OmegaConf.select(config, "algorithm.rollout_correction") or {}
    plan_c = _is_correction_requested(config)
    if plan_c and correction.get("rollout_is") != "token":
        return [
            f"{MULTI_TURN}.rollback_is_correction=True corrects spliced tokens with verl's token-level rollout "
            f"importance sampling: set algorithm.rollout_correction.rollout_is=token (got "
            f"{correction.get('rollout_is')}) and actor_rollout_ref.rollout.calculate_log_probs=True"
        ]
    offending = [
        f"algorithm.rollout_correction.{key}={correction.get(key)}"
        for key in ("rollout_is", "rollout_rs")
        if correction.get(key) is not None and not (plan_c and key == "rollout_is")
    ]
    if correction.get("bypass_mode"):
        offending.append("algorithm.rollout_correction.bypass_mode=True")
    if not offending:
        return []
    return [
        f"SAAR (multi_turn.enable_tool_rollback=True) cannot train with {', '.join(offending)}: rolled-back turns "
        "splice in tokens sampled in another context (the failed turn and its error), so their rollout log-probs "
        "do not describe the purified sequence. Set algorithm.rollout_correction.rollout_is=null, "
        "rollout_rs=null, bypass_mode=False and actor_rollout_ref.rollout.calculate_log_probs=False, as the CLEANER "
        "recipes do: old_log_prob is then recomputed on the purified "
        f"sequence. To correct the spliced tokens token by token instead, set {MULTI_TURN}.rollback_is_correction="
        "True with algorithm.rollout_correction.rollout_is=token"
    ]


ROLLOUT = "actor_rollout_ref.rollout"
CALCULATE_LOG_PROBS = f"{ROLLOUT}.calculate_log_probs"


def rollout_log_probs_needed(config: DictConfig) -> list[str]:
    """verl applies rollout correction only when the batch has rollout log-probs, and skips it without a word
    when `calculate_log_probs` is off: Plan C, or rollout IS / rejection sampling, would then train uncorrected.

    With SAAR on and Plan C off, rollout correction is `saar_log_prob_handling`'s problem (it wants it off).
    """
    if OmegaConf.select(config, "trainer.val_only"):
        return []
    log_probs = OmegaConf.select(config, CALCULATE_LOG_PROBS)
    if _is_correction_requested(config) and saar_enabled(config):
        if log_probs is True:
            return []
        return [
            f"{MULTI_TURN}.rollback_is_correction=True (Plan C) needs {CALCULATE_LOG_PROBS}=True (got {log_probs}): "
            "verl skips its rollout importance sampling when a batch has no rollout log-probs, so the spliced "
            "tokens would train uncorrected, exactly as the paper, with no metric saying so"
        ]
    if log_probs is not False or saar_enabled(config):
        return []
    correction = OmegaConf.select(config, "algorithm.rollout_correction") or {}
    asked = [
        f"algorithm.rollout_correction.{key}={correction[key]}"
        for key in ("rollout_is", "rollout_rs")
        if correction.get(key)
    ]
    if not asked:
        return []
    return [
        f"{', '.join(asked)} needs {CALCULATE_LOG_PROBS}=True: verl skips rollout correction without a warning "
        "when a batch has no rollout log-probs"
    ]


# Backends and trainer clients that never hand prompt log-probs to the agent loop (read in verl 0.9.1's source):
# verl's TensorRT-LLM server returns none; FullyAsyncLLMServerClient rebuilds each answer and keeps only the
# tokens, their log-probs and step counters.
NO_PROMPT_LOGPROBS_ROLLOUTS = ("trtllm",)
ASYNC_TRAINER_MODES = ("colocate_async", "separate_async")
FULLY_ASYNC_SECTION = "async_training"  # verl.experimental.fully_async_policy.fully_async_main requires it


def scoring_without_prompt_log_probs(config: DictConfig) -> list[str]:
    """The IS gate and the measurement score each splice with a prompt-log-prob prefill; refuse where the answer
    never carries them, instead of failing at the first recovered rollback, minutes into the run."""
    scoring = _scoring_keys(config)
    if not scoring:
        return []
    reasons = []
    name = OmegaConf.select(config, f"{ROLLOUT}.name")
    if name in NO_PROMPT_LOGPROBS_ROLLOUTS:
        reasons.append(f"{ROLLOUT}.name={name} (verl's {name} server returns no prompt log-probs)")
    mode = OmegaConf.select(config, "trainer.v1.trainer_mode")
    if OmegaConf.select(config, "trainer.use_v1", default=True) is not False and mode in ASYNC_TRAINER_MODES:
        reasons.append(
            f"trainer.v1.trainer_mode={mode} (its FullyAsyncLLMServerClient drops prompt_logprobs from every answer)"
        )
    if OmegaConf.select(config, FULLY_ASYNC_SECTION) is not None:
        reasons.append(
            f"verl's fully_async_policy (the `{FULLY_ASYNC_SECTION}` section; its FullyAsyncLLMServerClient drops "
            "prompt_logprobs from every answer)"
        )
    if not reasons:
        return []
    return [
        f"{' and '.join(scoring)} scores each splice from the server's prompt log-probs, which never reach the agent "
        f"loop with {'; '.join(reasons)}. Use trainer.v1.trainer_mode=sync (or trainer.use_v1=False) with "
        f"{ROLLOUT}.name=vllm, sglang or cpu, or set rollback_is_threshold=null and rollback_is_measure=False"
    ]


def _scoring_keys(config: DictConfig) -> list[str]:
    """`key=value` of the IS gate and the measurement when SAAR is on and either is set (they score splices)."""
    if not saar_enabled(config):
        return []
    multi_turn = _multi_turn(config)
    return [
        f"{MULTI_TURN}.{key}={multi_turn.get(key)}"
        for key in ("rollback_is_threshold", "rollback_is_measure")
        if multi_turn.get(key) not in (None, False)
    ]


LOGPROBS_MODE = f"{ROLLOUT}.logprobs_mode"
LOGITS_MODES = ("raw_logits", "processed_logits")


def scoring_with_logits_mode(config: DictConfig) -> list[str]:
    """With a logits `logprobs_mode` vLLM reports logits where the agent loop reads sampled log-probs: the scores
    would take logits for the behaviour side of the ratio."""
    scoring = _scoring_keys(config)
    mode = OmegaConf.select(config, LOGPROBS_MODE)
    if not scoring or mode not in LOGITS_MODES:
        return []
    return [
        f"{' and '.join(scoring)} reads the sampled tokens' log-probs, but {LOGPROBS_MODE}={mode} makes the server "
        f"report logits in their place: set {LOGPROBS_MODE}=processed_logprobs (verl's default) or raw_logprobs"
    ]


# SGLang's switch that computes prompt log-probs chunk by chunk instead of materialising every scheduled token's
# logits (and their log-softmax) at once; read from the server process's environment, off by default.
SGLANG_LOGITS_CHUNK_ENV = "SGLANG_ENABLE_LOGITS_PROCESSER_CHUNK"
RAY_ENV_VARS = "ray_kwargs.ray_init.runtime_env.env_vars"


def fully_async_problems(config: DictConfig) -> list[str]:
    """The checks that apply where `fully_async_policy`'s own entry point starts (it never calls verl's
    `validate_config`): the scoring refusals. Its config still holds the legacy reward sections it migrates."""
    return scoring_without_prompt_log_probs(config) + scoring_with_logits_mode(config)


def filter_groups_without_v1(config: DictConfig) -> list[str]:
    """Only verl's v1 trainer implements DAPO dynamic sampling; the legacy trainer ignores the key."""
    if (
        OmegaConf.select(config, "algorithm.filter_groups.enable")
        and OmegaConf.select(config, "trainer.use_v1") is False
    ):
        return [
            "algorithm.filter_groups.enable=True with trainer.use_v1=False: verl's legacy trainer has no group "
            "filter and would train on every group; set trainer.use_v1=True or algorithm.filter_groups.enable=False"
        ]
    return []


# Every config check, in the order its problems are reported. A check added here runs at trainer start and in DRY_RUN
# (cleaner.verl.start_check), and when the agent-loop manager is created.
CONFIG_CHECKS: list[ConfigCheck] = [
    legacy_reward_keys,
    reference_trainer_keys,
    retired_names,
    overlong_buffer,
    saar_settings,
    saar_log_prob_handling,
    rollout_log_probs_needed,
    scoring_without_prompt_log_probs,
    scoring_with_logits_mode,
    filter_groups_without_v1,
    tool_dpo_problems,  # negative samples and the tool-DPO estimators (docs/negative-samples.md)
    purification_problems,  # multi_turn.purification and what each mode needs (docs/purification.md)
]


def config_warnings(config: DictConfig) -> list[str]:
    """Settings that train correctly but make a logged number misleading, or risk running out of memory."""
    warnings = []
    if saar_enabled(config) and OmegaConf.select(config, "actor_rollout_ref.rollout.calculate_log_probs"):
        warnings.append(
            "actor_rollout_ref.rollout.calculate_log_probs=True with SAAR: verl's rollout-vs-trainer probability "
            "metrics (training/rollout_probs_diff_*) include spliced tokens, whose rollout log-probs came from the "
            "context that held the error; rollback/offpolicy/* shows spliced and other tokens apart"
        )
    chunking = OmegaConf.select(config, f"{RAY_ENV_VARS}.{SGLANG_LOGITS_CHUNK_ENV}")
    if (
        _scoring_keys(config)
        and OmegaConf.select(config, f"{ROLLOUT}.name") == "sglang"
        and str(chunking).lower() not in ("1", "true", "yes", "y")  # SGLang's EnvBool
    ):
        warnings.append(
            f"{' and '.join(_scoring_keys(config))} on SGLang without {RAY_ENV_VARS}.{SGLANG_LOGITS_CHUNK_ENV}=1: "
            "each scoring prefill materialises the logits and log-softmax of every scheduled token at once "
            '(tokens x vocabulary x 4 bytes each, outside mem_fraction_static; docs/saar.md "Scoring cost and memory")'
        )
    return warnings


# Any of these selects a cleaner piece; the start-up check leaves other verl configs alone.
CLEANER_TARGETS = {
    "actor_rollout_ref.rollout.multi_turn._target_": "cleaner.",
    "actor_rollout_ref.rollout.agent.agent_loop_manager_class": "cleaner.",
    "actor_rollout_ref.rollout.agent.default_agent_loop": AGENT_NAME,
}


def uses_cleaner(config: DictConfig) -> bool:
    """Whether the config selects the cleaner agent loop, manager or multi_turn class (or sets a SAAR key)."""
    for key, marker in CLEANER_TARGETS.items():
        value = OmegaConf.select(config, key)
        if isinstance(value, str) and value.startswith(marker):
            return True
    return any(_multi_turn(config).get(key) is not None for key in CONFIG_KEYS)


def data_agent_problems(config: DictConfig) -> list[str]:
    """With SAAR on, every row of the train and val files must select the cleaner agent loop.

    verl picks a row's loop from its `agent_name` column (rows without one get `agent.default_agent_loop`); a raw
    parquet that skipped `cleaner data prepare` would run verl's own loop, without SAAR and without a word.
    Files that do not exist are left to the preflight's missing-file check.
    """
    if not saar_enabled(config):
        return []
    default_loop = OmegaConf.select(config, "actor_rollout_ref.rollout.agent.default_agent_loop")
    problems = []
    for path in _data_files(config):
        if not path.is_file():
            continue
        try:
            counts = agent_name_counts(path)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            problems.append(f"data: {path}: cannot read its agent_name column: {exc}")
            continue
        wrong: dict[str, int] = {}
        for name, count in counts.items():
            if (name if name is not None else default_loop) != AGENT_NAME:
                loop = name if name is not None else f"{default_loop} (no agent_name: agent.default_agent_loop)"
                wrong[loop] = wrong.get(loop, 0) + count
        if wrong:
            listed = ", ".join(f"{count} select {loop}" for loop, count in sorted(wrong.items()))
            problems.append(
                f"data: {path}: {sum(wrong.values())} of {sum(counts.values())} rows would run without SAAR "
                f"({listed}; SAAR runs only in {AGENT_NAME}). Prepare the file with `cleaner data prepare`, or set "
                f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME} for rows without agent_name"
            )
    return problems


@dataclass
class ConfigReport:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def review_trainer_config(config: DictConfig, *, read_data: bool = True) -> ConfigReport:
    """Every problem and warning of `config`; `read_data` also opens the data files (agent names)."""
    report = ConfigReport(warnings=config_warnings(config))
    for check in CONFIG_CHECKS:
        report.problems.extend(check(config))
    if read_data:
        report.problems.extend(data_agent_problems(config))
    return report


def check_trainer_config(config: DictConfig, *, read_data: bool = True) -> None:
    """Raise `TrainerConfigError` naming every problem; log the warnings."""
    report = review_trainer_config(config, read_data=read_data)
    for warning in report.warnings:
        logger.warning("cleaner config: %s", warning)
    if report.problems:
        raise TrainerConfigError("\n".join(report.problems))


def _data_files(config: DictConfig) -> list[Path]:
    files: list[Path] = []
    for key in ("data.train_files", "data.val_files"):
        value = OmegaConf.select(config, key)
        items = list(value) if isinstance(value, (ListConfig, list, tuple)) else [value] if value else []
        for item in items:
            if Path(str(item)) not in files:  # validation-only runs name the same file twice
                files.append(Path(str(item)))
    return files


def _leaves(value: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, (DictConfig, dict)):
        for key in value:
            yield from _leaves(value[key], f"{prefix}.{key}")
    else:
        yield prefix, value
