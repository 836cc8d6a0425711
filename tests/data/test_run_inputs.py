"""`cleaner.data.run_inputs`: the tool yaml is read as an agent-loop worker reads it, and a run whose reward and tool
would call different judges is refused, naming both (no verl: a plain config with the keys it reads)."""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf

from cleaner.data.run_inputs import config_file_problems
from cleaner.resources import AGENT_LOOP_CONFIG, TOOL_CONFIG, resource_path

CLASS = "cleaner.verl.code_interpreter_tool.CodeInterpreterTool"


def run_config(tool_config, reward_judge: str | None, worker_env: dict[str, str] | None = None):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "multi_turn": {"enable": True, "tool_config_path": str(tool_config)},
                    "agent": {"agent_loop_config_path": str(resource_path(AGENT_LOOP_CONFIG))},
                }
            },
            "reward": {"custom_reward_function": {"path": None, "reward_kwargs": {"judge_url": reward_judge}}},
            "ray_kwargs": {"ray_init": {"runtime_env": {"env_vars": worker_env or {}}}},
        }
    )


def tool_yaml(tmp_path, **config) -> str:
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump({"tools": [{"class_name": CLASS, "config": {"type": "native", **config}}]}))
    return str(path)


def test_the_shipped_tool_yaml_follows_the_workers_judge_url(monkeypatch):
    monkeypatch.setenv("JUDGE_URL", "http://driver-only:1")  # the driver's own environment is not the workers'
    shipped = resource_path(TOOL_CONFIG)
    assert config_file_problems(run_config(shipped, "http://judge:9", {"JUDGE_URL": "http://judge:9"})) == []
    [problem] = config_file_problems(run_config(shipped, "http://judge:9"))
    assert "calls http://driver-only:1" in problem and "calls http://judge:9" in problem


@pytest.mark.parametrize("config", [{"judge_url": "http://tool:1"}, {"host_addr": "tool", "host_port": 1}, {}])
def test_a_tool_yaml_naming_another_judge_is_refused_naming_both(tmp_path, config):
    tool_judge = "http://127.0.0.1:8088" if not config else "http://tool:1"  # no key: the tool's default
    [problem] = config_file_problems(run_config(tool_yaml(tmp_path, **config), "http://reward:2"))
    assert problem.startswith(f"two judges: the tool {CLASS}")
    assert f"calls {tool_judge}" in problem and "calls http://reward:2" in problem


def test_the_same_judge_with_a_trailing_slash_is_one_judge(tmp_path):
    assert config_file_problems(run_config(tool_yaml(tmp_path, judge_url="http://j:1/"), "http://j:1")) == []


def test_a_tool_yaml_whose_interpolation_does_not_resolve_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("NO_SUCH_VARIABLE", raising=False)
    path = tool_yaml(tmp_path, judge_url="${oc.env:NO_SUCH_VARIABLE}")
    [problem] = config_file_problems(run_config(path, "http://j:1"))
    assert problem.startswith(f"actor_rollout_ref.rollout.multi_turn.tool_config_path: {path}:")
    assert "NO_SUCH_VARIABLE" in problem
