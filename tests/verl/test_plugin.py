"""cleaner.verl.plugin: both verl registration routes work, and a broken plugin fails loudly."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from cleaner.names import AGENT_NAME
from cleaner.resources import AGENT_LOOP_CONFIG, resource_path
from cleaner.saar.config import SaarConfig
from cleaner.verl import multi_turn_config, plugin
from cleaner.verl.trainer_config import compose_trainer_config

REPO = Path(__file__).resolve().parents[2]
AGENT_LOOP_YAML = resource_path(AGENT_LOOP_CONFIG)


def run_python(*args: str) -> subprocess.CompletedProcess:
    """A fresh interpreter (verl loads entry points once per process, at `import verl`), default plugin policy."""
    env = {key: value for key, value in os.environ.items() if key != "VERL_USE_EXTERNAL_PLUGINS"}
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )


def test_entry_point_is_declared_in_the_verl_plugins_group():
    (found,) = [ep for ep in entry_points(group="verl.plugins") if ep.name == "cleaner"]
    assert found.value == "cleaner.verl.plugin"
    assert plugin.check_entry_point().ok


@pytest.mark.slow  # a fresh interpreter importing verl
def test_check_cli_passes_on_a_healthy_install():
    """`--check` runs as __main__, so the registry entry it finds comes from verl's entry-point loading."""
    result = run_python("-m", "cleaner.verl.plugin", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and all(line.startswith("ok") for line in lines), lines


# What the plugin imports when it registers (python -c "import cleaner.verl.plugin; print(sys.modules)").
REGISTRATION_MODULES = [
    "cleaner.verl.agent_loop",
    "cleaner.verl.bad_call_parser",
    "cleaner.verl.tool_dpo.estimator",
    "cleaner.verl.tool_dpo.negative_outputs",
    "cleaner.verl.tool_execution",
    "cleaner.verl.tool_parser",
]


@pytest.mark.slow  # a fresh interpreter importing verl for each module
def test_any_module_of_the_plugin_imported_first_registers_the_agent_loop_cleanly():
    """Importing one of these first imports verl, whose plugin loader imports the agent loop while that module
    is half-initialized: the registration must still succeed, without an error in the log."""
    script = "import importlib, sys; importlib.import_module(sys.argv[1]); from cleaner.verl.plugin import registered_target; print(registered_target())"
    env = {key: value for key, value in os.environ.items() if key != "VERL_USE_EXTERNAL_PLUGINS"}
    runs = {
        module: subprocess.Popen(
            [sys.executable, "-c", script, module],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
        )
        for module in REGISTRATION_MODULES
    }
    for module, process in runs.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, f"{module}: {err[-2000:]}"
        assert out.strip() == plugin.AGENT_LOOP_TARGET, f"{module}: {out} {err[-2000:]}"
        assert "NOT registered" not in err, f"{module}: {err[-2000:]}"


@pytest.mark.slow  # a fresh interpreter importing verl
def test_broken_agent_loop_import_is_loud_in_every_path():
    """verl itself swallows the plugin's exception (DEBUG log); ours must still shout and refuse."""
    result = run_python(
        "-c",
        textwrap.dedent(
            """
        import importlib.abc, sys

        class BrokenAgentLoop(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "cleaner.verl.agent_loop":
                    raise RuntimeError("simulated bug in cleaner.verl.agent_loop")

        sys.meta_path.insert(0, BrokenAgentLoop())
        import verl  # must not raise: verl swallows entry-point errors
        from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
        assert "cleaner_tool_agent" not in _agent_loop_registry
        print("IMPORT_VERL_SURVIVED")
        try:
            import cleaner.verl.agent_loop_manager  # what verl's agent_loop_manager_class loading does
        except Exception as exc:
            print("MANAGER_RAISED:", type(exc).__name__, exc, "| cause:", type(exc.__cause__).__name__)
        import runpy
        sys.argv = ["cleaner.verl.plugin", "--check"]
        try:
            runpy.run_module("cleaner.verl.plugin", run_name="__main__")
        except SystemExit as exit_:
            print("CHECK_EXIT:", exit_.code)
        """
        ),
    )
    assert "IMPORT_VERL_SURVIVED" in result.stdout, result.stderr
    # 1. at `import verl`, logged at ERROR with the cause, although verl swallows the exception
    assert "ERROR" in result.stderr
    assert (
        "importing cleaner.verl.agent_loop failed (RuntimeError: simulated bug in cleaner.verl.agent_loop)"
        in result.stderr
    )
    assert "'cleaner_tool_agent' is NOT registered" in result.stderr
    # 2. the cleaner agent-loop manager (and its workers) refuse to start, naming the failed import
    assert "MANAGER_RAISED: PluginError cleaner verl plugin: importing cleaner.verl.agent_loop failed" in result.stdout
    assert "| cause: RuntimeError" in result.stdout
    # 3. the CLI check fails both routes and exits 1
    assert "FAIL  import verl registers the agent loop" in result.stdout
    assert "FAIL  agent loop config" in result.stdout
    assert "CHECK_EXIT: 1" in result.stdout


@pytest.mark.parametrize(
    ("policy", "allowed"),
    [("auto", True), ("AUTO", True), ("none", False), ("cleaner", True), ("other, cleaner", True), ("other", False)],
)
def test_plugin_policy_mirrors_verl(policy, allowed):
    assert plugin.plugin_policy_allows_cleaner(policy) is allowed


def test_check_explains_a_policy_that_disables_the_entry_point(monkeypatch):
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "none")
    result = plugin.check_import_verl_registers()
    assert not result.ok
    assert "VERL_USE_EXTERNAL_PLUGINS='none'" in result.detail and "yaml" in result.detail


def test_agent_loop_yaml_route():
    """The yaml is what AgentLoopWorker loads into verl's registry (see the worker tests for a real run)."""
    from omegaconf import OmegaConf

    entries = OmegaConf.load(AGENT_LOOP_YAML)
    assert [(e.name, e._target_) for e in entries] == [(AGENT_NAME, plugin.AGENT_LOOP_TARGET)]
    assert plugin.check_agent_loop_config(AGENT_LOOP_YAML).ok


def test_agent_loop_yaml_with_a_bad_target_fails_the_check(tmp_path):
    bad = tmp_path / "agent_loop.yaml"
    bad.write_text("- name: cleaner_tool_agent\n  _target_: cleaner.no_such_module.Loop\n")
    result = plugin.check_agent_loop_config(bad)
    assert not result.ok and "cleaner.no_such_module.Loop" in result.detail
    not_a_loop = tmp_path / "not_a_loop.yaml"
    not_a_loop.write_text("- name: cleaner_tool_agent\n  _target_: cleaner.verl.saar_metrics.SaarStatsError\n")
    assert "not a verl ToolAgentLoop subclass" in plugin.check_agent_loop_config(not_a_loop).detail
    assert "file not found" in plugin.check_agent_loop_config(tmp_path / "missing.yaml").detail


def compose_rollout(overrides: list[str]):
    config = compose_trainer_config(["actor_rollout_ref.rollout.name=sglang", *overrides])
    return config.actor_rollout_ref.rollout


# Every multi_turn line of the reference's recipes (values as its scripts pass them, K changed to 2).
REFERENCE_OVERRIDES = [
    "+actor_rollout_ref.rollout.multi_turn.enable_tool_rollback=True",
    "+actor_rollout_ref.rollout.multi_turn.max_tool_retries=2",
    "+actor_rollout_ref.rollout.multi_turn.rollback_probability=0.5",
    "+actor_rollout_ref.rollout.multi_turn.save_negative_samples=False",
    "+actor_rollout_ref.rollout.multi_turn.max_negative_samples_per_group=0",
]


@pytest.mark.slow  # composes verl's Hydra config
def test_reference_overrides_need_the_saar_multi_turn_schema():
    """verl 0.9.1 converts multi_turn into its MultiTurnConfig dataclass (every worker does) and rejects extra keys."""
    from hydra.errors import InstantiationException
    from verl.utils.config import omega_conf_to_dataclass

    with pytest.raises(InstantiationException, match="enable_tool_rollback"):
        omega_conf_to_dataclass(compose_rollout(REFERENCE_OVERRIDES))

    rollout = omega_conf_to_dataclass(
        compose_rollout(
            [
                f"actor_rollout_ref.rollout.multi_turn._target_={multi_turn_config.MULTI_TURN_TARGET}",
                *REFERENCE_OVERRIDES,
            ]
        )
    )
    multi_turn = rollout.multi_turn
    assert isinstance(multi_turn, multi_turn_config.SaarMultiTurnConfig)
    assert (multi_turn.enable_tool_rollback, multi_turn.max_tool_retries, multi_turn.rollback_probability) == (
        True,
        2,
        0.5,
    )
    assert (multi_turn.save_negative_samples, multi_turn.max_negative_samples_per_group) == (False, 0)
    assert multi_turn.rollback_similarity is None  # unset: the agent loop applies SaarConfig's default
    saar = SaarConfig.from_multi_turn(compose_rollout(REFERENCE_OVERRIDES).multi_turn)
    assert (saar.enable_tool_rollback, saar.max_tool_retries, saar.max_negative_samples_per_group) == (True, 2, 0)
    assert multi_turn.format == "hermes"  # verl's own fields are untouched

    with pytest.raises(InstantiationException, match="enable_tool_rolback"):  # a typo is still rejected
        omega_conf_to_dataclass(
            compose_rollout(
                [
                    f"actor_rollout_ref.rollout.multi_turn._target_={multi_turn_config.MULTI_TURN_TARGET}",
                    "+actor_rollout_ref.rollout.multi_turn.enable_tool_rolback=True",
                ]
            )
        )
