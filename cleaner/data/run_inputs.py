"""What a training run opens at start, checked before it starts: the files its config names and the services it calls.

Two kinds, both named by key or path, one line each:
- `config_file_problems`: files the config itself names and their content (reward function, tool and agent-loop
  yaml, manager class), and that the tool and the reward call one judge. Wrong here, the config is wrong wherever
  it runs.
- `run_input_problems`: the model directory, the data files and the judge. They depend on the machine: DRY_RUN
  reports them as what a real run would stop on; the trainer-start check (`cleaner.verl.start_check`) stops on them.
Both read a verl trainer config (a DictConfig) by its keys; neither imports verl.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cleaner.names import AGENT_NAME

PKG_PREFIX = "pkg://"
JUDGE_PING_TIMEOUT_S = 5.0
REWARD_JUDGE_KEY = "reward.custom_reward_function.reward_kwargs.judge_url"
TOOL_CONFIG_KEY = "actor_rollout_ref.rollout.multi_turn.tool_config_path"
AGENT_LOOP_CONFIG_KEY = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
MANAGER_KEY = "actor_rollout_ref.rollout.agent.agent_loop_manager_class"
# The environment verl's main_ppo gives every Ray worker (ray.init's runtime_env).
RAY_ENV_KEY = "ray_kwargs.ray_init.runtime_env.env_vars"


def config_file_problems(config: DictConfig) -> list[str]:
    """The reward function and, with tools on, the tool setup: what would fail once the workers load them."""
    problems = _reward_problems(config)
    if config.actor_rollout_ref.rollout.multi_turn.enable:
        problems += _tool_problems(config)
    return problems


def run_input_problems(config: DictConfig) -> list[str]:
    """The model directory, the data files and every judge the run calls (the reward's and the tools')."""
    problems = []
    model = OmegaConf.select(config, "actor_rollout_ref.model.path")
    if not (Path(str(model)) / "config.json").is_file():
        problems.append(
            f"model: {model} has no config.json (actor_rollout_ref.model.path: a Hugging Face model directory)"
        )
    for key in ("data.train_files", "data.val_files"):
        for path in _paths(OmegaConf.select(config, key)):
            if not Path(path).is_file():
                problems.append(
                    f"data: {path} does not exist ({key}; see dataset/README.md, recipe/cleaner/prepare_data.sh)"
                )
    for url in sorted(set(_judge_urls(config))):
        if not _judge_answers(url):
            problems.append(f"judge: no answer from {url}/ping (start it: code-judge serve --host 0.0.0.0 --port 8088)")
    return problems


def _paths(value) -> list[str]:
    if isinstance(value, (ListConfig, list, tuple)):
        return [str(item) for item in value]
    return [str(value)] if value else []


def _judge_urls(config: DictConfig) -> list[str]:
    urls = [OmegaConf.select(config, REWARD_JUDGE_KEY)]
    if config.actor_rollout_ref.rollout.multi_turn.enable:
        urls += [url for _, url in _tool_judge_urls(_tool_config(config))]
    return [str(url).rstrip("/") for url in urls if url]


def _judge_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/ping", timeout=JUDGE_PING_TIMEOUT_S) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):  # refused, unreachable, timed out, malformed URL
        return False


def _existing_file(config: DictConfig, key: str) -> Path | None:
    value = OmegaConf.select(config, key)
    return Path(value) if value and Path(value).is_file() else None


def _reward_module_file(config: DictConfig) -> Path | None:
    """The file verl loads the reward function from: a path, or `pkg://<module>` (imported as a package)."""
    value = OmegaConf.select(config, "reward.custom_reward_function.path")
    if isinstance(value, str) and value.startswith(PKG_PREFIX):
        spec = importlib.util.find_spec(value[len(PKG_PREFIX) :])
        return Path(spec.origin) if spec is not None and spec.origin is not None else None
    return _existing_file(config, "reward.custom_reward_function.path")


def _reward_problems(config: DictConfig) -> list[str]:
    from cleaner.rewards.config import RewardConfig

    key = "reward.custom_reward_function.path"
    path = OmegaConf.select(config, key)
    if not path:
        return []  # verl's default reward
    reward_file = _reward_module_file(config)
    if reward_file is None:
        return [f"{key}={path!r}: no such file or module"]
    problems = []
    name = config.reward.custom_reward_function.get("name") or "compute_score"
    if name not in _top_level_names(reward_file):
        hint = " (CLEANER's is compute_score)" if reward_file.parent.name == "rewards" else ""
        problems.append(f"reward.custom_reward_function.name={name!r}: {reward_file} defines no such function{hint}")
    reward_kwargs = config.reward.custom_reward_function.get("reward_kwargs")
    try:
        RewardConfig.from_kwargs(OmegaConf.to_container(reward_kwargs, resolve=True) if reward_kwargs else {})
    except ValueError as exc:
        problems.append(f"reward.custom_reward_function.reward_kwargs: {exc}")
    return problems


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


def _tool_config(config: DictConfig) -> dict | None:
    """The tool yaml as verl's tool registry reads it in an agent-loop worker: its interpolations
    (`${oc.env:JUDGE_URL,...}`) resolved in the environment the run gives its Ray workers (RAY_ENV_KEY over this
    process's)."""
    path = _existing_file(config, TOOL_CONFIG_KEY)
    if path is None:
        return None
    worker_env = OmegaConf.select(config, RAY_ENV_KEY)
    saved = dict(os.environ)
    try:
        os.environ.update({str(key): str(value) for key, value in (worker_env or {}).items()})
        return OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _tool_judge_urls(tools: dict | None) -> list[tuple[str, str]]:
    """(tool class, judge URL) of every code-interpreter tool in the (resolved) tool yaml, its default included."""
    from cleaner.tools.code_interpreter import CodeInterpreterConfig

    urls = []
    for tool in (tools or {}).get("tools") or []:
        if tool.get("class_name", "").endswith(".CodeInterpreterTool"):
            try:
                urls.append((tool["class_name"], CodeInterpreterConfig.from_dict(tool.get("config") or {}).judge.url))
            except ValueError:  # a malformed tool block: named by _tool_problems
                continue
    return urls


def _tool_problems(config: DictConfig) -> list[str]:
    from cleaner.tools.code_interpreter import CodeInterpreterConfig

    problems = []
    loops_file = _existing_file(config, AGENT_LOOP_CONFIG_KEY)
    if loops_file is None:
        problems.append(f"{AGENT_LOOP_CONFIG_KEY}={OmegaConf.select(config, AGENT_LOOP_CONFIG_KEY)!r}: no such file")
    elif AGENT_NAME not in {entry.get("name") for entry in yaml.safe_load(loops_file.read_text()) or []}:
        problems.append(f"{AGENT_LOOP_CONFIG_KEY}: {loops_file} registers no {AGENT_NAME!r}")
    manager = OmegaConf.select(config, MANAGER_KEY)
    if manager and importlib.util.find_spec(manager.rsplit(".", 1)[0]) is None:
        problems.append(f"{MANAGER_KEY}={manager}: module not found")
    try:
        tools = _tool_config(config)
    except OmegaConfBaseException as exc:  # an interpolation that does not resolve: what verl would fail on
        return [*problems, f"{TOOL_CONFIG_KEY}: {OmegaConf.select(config, TOOL_CONFIG_KEY)}: {exc}"]
    if tools is None:
        return [*problems, f"{TOOL_CONFIG_KEY}={OmegaConf.select(config, TOOL_CONFIG_KEY)!r}: no such file"]
    for tool in tools.get("tools") or []:
        module = tool["class_name"].rsplit(".", 1)[0]
        if importlib.util.find_spec(module) is None:
            problems.append(f"tool class {tool['class_name']}: module {module} is not importable")
        elif tool["class_name"].endswith(".CodeInterpreterTool"):
            try:
                CodeInterpreterConfig.from_dict(tool.get("config") or {})
            except ValueError as exc:
                problems.append(f"{TOOL_CONFIG_KEY}: {tool['class_name']}: {exc}")
    reward_judge = OmegaConf.select(config, REWARD_JUDGE_KEY)
    for class_name, url in _tool_judge_urls(tools):
        if reward_judge and url and url.rstrip("/") != str(reward_judge).rstrip("/"):
            problems.append(
                f"two judges: the tool {class_name} ({TOOL_CONFIG_KEY}) calls {url}, the reward "
                f"({REWARD_JUDGE_KEY}) calls {reward_judge}; point both at one judge (the recipes read JUDGE_URL "
                "for both)"
            )
    return problems
