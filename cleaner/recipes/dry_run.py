"""The recipes' config tooling: DRY_RUN=1, the preflight's config checks, the reading of a user's overrides.

    python -m cleaner.recipes.dry_run OVERRIDE...              # DRY_RUN: compose, validate, print, exit
    python -m cleaner.recipes.dry_run --preflight OVERRIDE...  # print what would stop a run, one per line
    python -m cleaner.recipes.dry_run --translate RECIPE_OVERRIDE... -- USER_OVERRIDE...
    python -m cleaner.recipes.dry_run --write-tool-config SRC DST JUDGE_URL

(`recipe/cleaner/compose_config.py` is the same command, the one `common.sh` runs.)

DRY_RUN composes verl's trainer config with a recipe's Hydra overrides, validates it the way
`verl.trainer.main_ppo` would, runs `cleaner.verl.config_checks` (the checks the trainer runs at start, the SAAR
keys among them), checks the files the run will open (reward function, agent-loop and tool yaml), prints the
config and exits. No GPU, no Ray. `--translate` rewrites the overrides a user appends so that the reference
implementation's lines mean here what they meant there (`cleaner.recipes.overrides`).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from cleaner.names import AGENT_NAME
from cleaner.recipes.overrides import translate_overrides
from cleaner.tools.tool_config import write_tool_config
from cleaner.verl.config_checks import TrainerConfigError, data_agent_problems, review_trainer_config
from cleaner.verl.trainer_config import compose_trainer_config

CONFIG_MARKER = "--- composed config ---"
PKG_PREFIX = "pkg://"
# The recipes' reward manager is verl's DAPO manager (a subclass that also passes SAAR statistics on).
RECIPE_REWARD_MANAGER = "CleanerDAPORewardManager"


class RecipeConfigError(ValueError):
    """The composed config would not run; the message names the key."""


def validate(config: DictConfig) -> list[str]:
    """Raise on a config that would not run; return the warnings (settings that run but mislead)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    OmegaConf.resolve(OmegaConf.create(OmegaConf.to_container(config)))  # every interpolation resolves
    # cleaner's checks first: they name the key where verl's would only fail to build a class.
    report = review_trainer_config(config, read_data=False)
    if report.problems:
        raise TrainerConfigError("\n".join(report.problems))
    # verl's own validation; `import verl` has wrapped it with the checks above (cleaner.verl.start_check), which
    # here must not read the data files: DRY_RUN reports those problems as warnings.
    verl_validate = getattr(validate_config, "__wrapped__", validate_config)
    verl_validate(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)  # what the rollout workers build at start-up
    _validate_reward(config)
    if config.actor_rollout_ref.rollout.multi_turn.enable:
        _validate_tools(config)
    return report.warnings


def _existing_file(config: DictConfig, key: str) -> Path:
    value = OmegaConf.select(config, key)
    if not value or not Path(value).is_file():
        raise RecipeConfigError(f"{key}={value!r}: no such file")
    return Path(value)


def _reward_module_file(config: DictConfig) -> Path:
    """The file verl loads the reward function from: a path, or `pkg://<module>` (imported as a package)."""
    key = "reward.custom_reward_function.path"
    value = OmegaConf.select(config, key)
    if isinstance(value, str) and value.startswith(PKG_PREFIX):
        module = value[len(PKG_PREFIX) :]
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise RecipeConfigError(f"{key}={value!r}: module {module} is not importable")
        return Path(spec.origin)
    return _existing_file(config, key)


def _validate_reward(config: DictConfig) -> None:
    from cleaner.rewards.config import RewardConfig

    reward_file = _reward_module_file(config)
    name = config.reward.custom_reward_function.get("name") or "compute_score"
    if name not in _top_level_names(reward_file):
        raise RecipeConfigError(
            f"reward.custom_reward_function.name={name!r}: {reward_file} defines no such function"
            + (" (CLEANER's is compute_score)" if reward_file.parent.name == "rewards" else "")
        )
    reward_kwargs = config.reward.custom_reward_function.get("reward_kwargs")
    RewardConfig.from_kwargs(OmegaConf.to_container(reward_kwargs) if reward_kwargs is not None else {})
    if config.actor_rollout_ref.rollout.calculate_log_probs is False and config.algorithm.rollout_correction.rollout_is:
        raise RecipeConfigError(
            "algorithm.rollout_correction.rollout_is needs actor_rollout_ref.rollout.calculate_log_probs=True"
        )


def _top_level_names(path: Path) -> set[str]:
    """Names a module binds at its top level (functions, classes, assignments, imports), read without running it."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def _validate_tools(config: DictConfig) -> None:
    from verl.experimental.agent_loop.tool_parser import ToolParser

    import cleaner.verl.tool_parser  # noqa: F401  (registers the cleaner tool parsers, as `import verl` does in workers)
    from cleaner.tools.code_interpreter import CodeInterpreterConfig

    multi_turn = config.actor_rollout_ref.rollout.multi_turn
    if multi_turn.format not in ToolParser._registry:
        raise RecipeConfigError(
            f"actor_rollout_ref.rollout.multi_turn.format={multi_turn.format!r} is not a registered tool parser "
            f"({', '.join(sorted(ToolParser._registry))})"
        )
    loops = yaml.safe_load(_existing_file(config, "actor_rollout_ref.rollout.agent.agent_loop_config_path").read_text())
    if AGENT_NAME not in {entry.get("name") for entry in loops or []}:
        raise RecipeConfigError(f"the agent loop config registers no {AGENT_NAME!r}")
    manager = OmegaConf.select(config, "actor_rollout_ref.rollout.agent.agent_loop_manager_class")
    if manager and importlib.util.find_spec(manager.rsplit(".", 1)[0]) is None:
        raise RecipeConfigError(f"actor_rollout_ref.rollout.agent.agent_loop_manager_class={manager}: module not found")
    tools = yaml.safe_load(_existing_file(config, "actor_rollout_ref.rollout.multi_turn.tool_config_path").read_text())
    for tool in tools.get("tools") or []:
        module = tool["class_name"].rsplit(".", 1)[0]
        if importlib.util.find_spec(module) is None:
            raise RecipeConfigError(f"tool class {tool['class_name']}: module {module} is not importable")
        if tool["class_name"].endswith(".CodeInterpreterTool"):
            CodeInterpreterConfig.from_dict(tool.get("config") or {})


def preflight_problems(overrides: Sequence[str]) -> list[str]:
    """What would stop a run, one line each: an invalid config, or data rows that would run without SAAR.

    verl's own progress prints and warnings are held back (DRY_RUN shows them); CLEANER's warnings go to stderr.
    """
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = compose_trainer_config(overrides)
            config_warnings = validate(config)
    except Exception as exc:  # a bad override or any validation failure: named, the run does not start
        return [f"config: {type(exc).__name__}: {line}" for line in str(exc).splitlines() or [""]]
    for warning in config_warnings:
        print(f"preflight: warning: {warning}", file=sys.stderr)
    return data_agent_problems(config)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--write-tool-config"]:
        parser = argparse.ArgumentParser(prog="recipe_config --write-tool-config")
        parser.add_argument("source", type=Path)
        parser.add_argument("target", type=Path)
        parser.add_argument("judge_url")
        args = parser.parse_args(argv[1:])
        write_tool_config(args.source, args.target, args.judge_url)
        return 0
    if argv[:1] == ["--translate"]:
        separator = argv.index("--") if "--" in argv else len(argv)
        translated, notes = translate_overrides(argv[1:separator], argv[separator + 1 :])
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        print("\n".join(translated))
        return 0
    if argv[:1] == ["--preflight"]:
        problems = preflight_problems(argv[1:])
        if problems:
            print("\n".join(problems))
        return 0
    try:
        config = compose_trainer_config(argv)
        config_warnings = validate(config)
    except Exception as exc:  # a bad override or any validation failure: named, exit 1
        print(f"DRY_RUN: invalid config: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    for warning in config_warnings:
        print(f"DRY_RUN: warning: {warning}", file=sys.stderr)
    data_problems = data_agent_problems(config)
    if data_problems:
        print("DRY_RUN: a real run would stop here:\n" + "\n".join(data_problems), file=sys.stderr)
    print(CONFIG_MARKER)
    print(OmegaConf.to_yaml(config))
    print(f"DRY_RUN ok: {config.trainer.experiment_name} composed and validated against the installed verl")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
