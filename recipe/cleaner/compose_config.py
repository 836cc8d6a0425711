"""The recipes' DRY_RUN=1: compose verl's trainer config with a recipe's Hydra overrides, validate it the
way `verl.trainer.main_ppo` would (plus CLEANER's own settings), print it and exit. No GPU, no Ray.

    python recipe/cleaner/compose_config.py OVERRIDE...
    python recipe/cleaner/compose_config.py --write-tool-config SRC DST JUDGE_URL
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from cleaner.names import AGENT_NAME
from cleaner.verl.trainer_config import compose_trainer_config

CONFIG_MARKER = "--- composed config ---"


class RecipeConfigError(ValueError):
    """The composed config would not run; the message names the key."""


def validate(config: DictConfig) -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    OmegaConf.resolve(OmegaConf.create(OmegaConf.to_container(config)))  # every interpolation resolves
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)  # what the rollout workers build at start-up
    _validate_reward(config)
    if config.actor_rollout_ref.rollout.multi_turn.enable:
        _validate_tools(config)


def _existing_file(config: DictConfig, key: str) -> Path:
    value = OmegaConf.select(config, key)
    if not value or not Path(value).is_file():
        raise RecipeConfigError(f"{key}={value!r}: no such file")
    return Path(value)


def _validate_reward(config: DictConfig) -> None:
    from cleaner.rewards.config import RewardConfig

    _existing_file(config, "reward.custom_reward_function.path")
    kwargs = OmegaConf.to_container(config.reward.custom_reward_function.get("reward_kwargs") or {})
    RewardConfig.from_kwargs(kwargs)
    if config.actor_rollout_ref.rollout.calculate_log_probs is False and config.algorithm.rollout_correction.rollout_is:
        raise RecipeConfigError(
            "algorithm.rollout_correction.rollout_is needs actor_rollout_ref.rollout.calculate_log_probs=True"
        )


def _validate_tools(config: DictConfig) -> None:
    from verl.experimental.agent_loop.tool_parser import ToolParser

    import cleaner.verl.tool_parser  # noqa: F401  (registers the cleaner tool parsers, as `import verl` does in workers)
    from cleaner.saar.config import SaarConfig

    multi_turn = config.actor_rollout_ref.rollout.multi_turn
    SaarConfig.from_multi_turn(multi_turn)
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


def write_tool_config(source: Path, target: Path, judge_url: str) -> None:
    """A copy of the tool yaml whose tools talk to `judge_url`."""
    tools = yaml.safe_load(source.read_text())
    for tool in tools["tools"]:
        tool["config"]["judge_url"] = judge_url
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(tools, sort_keys=False))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--write-tool-config"]:
        parser = argparse.ArgumentParser(prog="compose_config.py --write-tool-config")
        parser.add_argument("source", type=Path)
        parser.add_argument("target", type=Path)
        parser.add_argument("judge_url")
        args = parser.parse_args(argv[1:])
        write_tool_config(args.source, args.target, args.judge_url)
        return 0
    try:
        config = compose_trainer_config(argv)
        validate(config)
    except Exception as exc:  # a bad override or any validation failure: one line naming it, exit 1
        print(f"DRY_RUN: invalid config: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(CONFIG_MARKER)
    print(OmegaConf.to_yaml(config))
    print(f"DRY_RUN ok: {config.trainer.experiment_name} composed and validated against the installed verl")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
