"""The tool yaml and its judge: the shipped one reads JUDGE_URL; `cleaner rollout --judge-url` writes a copy naming one."""

from __future__ import annotations

import pytest
import yaml

from cleaner.resources import TOOL_CONFIG, resource_path
from cleaner.tools.code_interpreter import CodeInterpreterConfig
from cleaner.tools.judge_client import JudgeClientConfig
from cleaner.tools.tool_config import write_tool_config


def test_every_tool_gets_the_judge_url_and_keeps_its_other_settings(tmp_path):
    target = write_tool_config(resource_path(TOOL_CONFIG), tmp_path / "sub" / "tools.yaml", "http://judge:9000")
    shipped = yaml.safe_load(resource_path(TOOL_CONFIG).read_text())
    written = yaml.safe_load(target.read_text())
    [tool] = written["tools"]
    assert tool["config"]["judge_url"] == "http://judge:9000"
    assert tool["class_name"] == shipped["tools"][0]["class_name"]
    assert {k: v for k, v in tool["config"].items() if k != "judge_url"} == {
        k: v for k, v in shipped["tools"][0]["config"].items() if k != "judge_url"
    }
    assert CodeInterpreterConfig.from_dict(tool["config"]).judge.url == "http://judge:9000"


def test_a_file_without_tools_is_refused_by_name(tmp_path):
    source = tmp_path / "agent_loop.yaml"
    source.write_text("- name: x\n")
    with pytest.raises(ValueError, match="agent_loop.yaml: not a verl tool config"):
        write_tool_config(source, tmp_path / "out.yaml", "http://judge:9000")


def test_the_shipped_tool_yaml_calls_the_judge_at_judge_url(monkeypatch):
    """Resolved as verl's tool registry resolves it: JUDGE_URL, as the recipes' reward reads it, else the default."""
    from omegaconf import OmegaConf

    def judge() -> str:
        [tool] = OmegaConf.to_container(OmegaConf.load(resource_path(TOOL_CONFIG)), resolve=True)["tools"]
        return CodeInterpreterConfig.from_dict(tool["config"]).judge.url

    monkeypatch.setenv("JUDGE_URL", "http://judge:9000")
    assert judge() == "http://judge:9000"
    monkeypatch.delenv("JUDGE_URL")
    assert judge() == JudgeClientConfig().url == "http://127.0.0.1:8088"
