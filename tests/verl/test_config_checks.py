"""cleaner.verl.config_checks: settings that compose but would not train as the user believes are refused.

Built from the reference's published setup (shared notes, "Training recipes" and "Known defects"): its scripts
pass the reward through `reward_model.*` / `custom_reward_function.*`, which verl 0.9.1's main_ppo never reads;
CLEANER runs with `calculate_log_probs=False` and rollout IS off, because SAAR splices tokens sampled in another
context. The real composed config of every recipe is checked in test_recipe_dry_run.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest
from omegaconf import OmegaConf

from cleaner.names import AGENT_NAME
from cleaner.verl.config_checks import (
    TrainerConfigError,
    check_trainer_config,
    current_reward_key,
    data_agent_problems,
    review_trainer_config,
    uses_cleaner,
)


def trainer_config(saar: bool = True, **sections) -> OmegaConf:
    """The parts of verl's trainer config the checks read, with the CLEANER recipes' values."""
    base = {
        "actor_rollout_ref": {
            "rollout": {
                "calculate_log_probs": not saar,
                "multi_turn": {"enable": True, "enable_tool_rollback": saar},
                "agent": {"default_agent_loop": "single_turn_agent"},
            }
        },
        "algorithm": {
            "adv_estimator": "grpo",
            "rollout_correction": {
                "rollout_is": None if saar else "sequence",
                "rollout_rs": None,
                "bypass_mode": False,
            },
        },
        "trainer": {"val_only": False},
        "data": {"train_files": [], "val_files": []},
        "reward_model": {"reward_manager": None, "model": {"path": None}},
        "custom_reward_function": {"path": None, "name": None},
    }
    return OmegaConf.merge(OmegaConf.create(base), OmegaConf.create(sections))


def problems(config) -> list[str]:
    return review_trainer_config(config, read_data=False).problems


def test_the_recipes_settings_pass():
    assert problems(trainer_config(saar=True)) == []
    assert problems(trainer_config(saar=False)) == []


@pytest.mark.parametrize(
    ("legacy", "current"),
    [
        ("reward_model.reward_manager", "reward.reward_manager.name"),
        ("reward_model.reward_kwargs.overlong_buffer_cfg.len", "reward.reward_kwargs.overlong_buffer_cfg.len"),
        ("reward_model.reward_kwargs.max_resp_len", "reward.reward_kwargs.max_resp_len"),
        ("custom_reward_function.path", "reward.custom_reward_function.path"),
        ("custom_reward_function.name", "reward.custom_reward_function.name"),
        ("reward_model.model.path", "reward.reward_model.model_path"),
        ("reward_model.num_workers", "reward.num_workers"),
        ("reward.reward_kwargs.max_resp_len", None),
        ("reward_model_x", None),
    ],
)
def test_legacy_reward_keys_map_to_the_keys_verl_reads(legacy, current):
    assert current_reward_key(legacy) == current


def test_legacy_reward_keys_are_refused_naming_the_new_key():
    config = trainer_config(
        reward_model={"reward_manager": "dapo", "reward_kwargs": {"overlong_buffer_cfg": {"enable": True}}},
        custom_reward_function={"name": "compute_score_outcome_reward"},
    )
    [problem] = problems(config)
    assert "never reads" in problem
    assert "reward_model.reward_manager -> reward.reward_manager.name" in problem
    assert (
        "reward_model.reward_kwargs.overlong_buffer_cfg.enable -> reward.reward_kwargs.overlong_buffer_cfg.enable"
        in problem
    )
    assert "custom_reward_function.name -> reward.custom_reward_function.name" in problem
    with pytest.raises(TrainerConfigError, match="reward.reward_manager.name"):
        check_trainer_config(config, read_data=False)


def test_a_legacy_key_without_an_equivalent_is_still_refused():
    [problem] = problems(trainer_config(reward_model={"model": {"external_lib": "my_lib"}}))
    assert "reward_model.model.external_lib -> (no verl 0.9.1 equivalent)" in problem


def test_filter_zero_advantage_samples_true_is_refused_false_accepted():
    [problem] = problems(trainer_config(trainer={"filter_zero_advantage_samples": True}))
    assert problem.startswith("trainer.filter_zero_advantage_samples=True") and "algorithm.filter_groups" in problem
    assert problems(trainer_config(trainer={"filter_zero_advantage_samples": False})) == []


@pytest.mark.parametrize(
    ("correction", "named"),
    [
        ({"rollout_is": "sequence"}, "algorithm.rollout_correction.rollout_is=sequence"),
        ({"rollout_is": "token"}, "algorithm.rollout_correction.rollout_is=token"),
        ({"rollout_rs": "seq_mean_k1"}, "algorithm.rollout_correction.rollout_rs=seq_mean_k1"),
        ({"bypass_mode": True}, "algorithm.rollout_correction.bypass_mode=True"),
    ],
)
def test_saar_with_rollout_importance_sampling_or_bypass_mode_is_refused(correction, named):
    config = trainer_config(algorithm={"rollout_correction": correction})
    [problem] = problems(config)
    assert problem.startswith("SAAR (multi_turn.enable_tool_rollback=True) cannot train with") and named in problem
    assert "calculate_log_probs=False" in problem


def test_rollout_importance_sampling_without_saar_is_the_baselines_setting():
    assert problems(trainer_config(saar=False, algorithm={"rollout_correction": {"rollout_is": "sequence"}})) == []


def test_validation_only_runs_train_nothing_and_are_not_refused():
    config = trainer_config(algorithm={"rollout_correction": {"rollout_is": "sequence"}}, trainer={"val_only": True})
    assert problems(config) == []


def test_rollout_log_probs_with_saar_train_correctly_but_are_warned_about():
    report = review_trainer_config(
        trainer_config(actor_rollout_ref={"rollout": {"calculate_log_probs": True}}), read_data=False
    )
    assert report.problems == []
    [warning] = report.warnings
    assert "training/rollout_probs_diff_" in warning


def write_parquet(path, agent_names: list[str] | None, rows: int = 3):
    frame = pd.DataFrame({"prompt": [f"p{i}" for i in range(rows)]})
    if agent_names is not None:
        frame["agent_name"] = agent_names
    frame.to_parquet(path)
    return str(path)


def test_data_rows_that_would_run_without_saar_are_named(tmp_path):
    raw = write_parquet(tmp_path / "raw.parquet", None)
    mixed = write_parquet(tmp_path / "mixed.parquet", [AGENT_NAME, "tool_agent", "tool_agent"])
    prepared = write_parquet(tmp_path / "prepared.parquet", [AGENT_NAME] * 3)
    config = trainer_config(data={"train_files": [raw, prepared], "val_files": [mixed, str(tmp_path / "absent")]})
    found = data_agent_problems(config)
    assert len(found) == 2
    assert found[0].startswith(f"data: {raw}: 3 of 3 rows would run without SAAR (3 select single_turn_agent")
    assert "actor_rollout_ref.rollout.agent.default_agent_loop=cleaner_tool_agent" in found[0]
    assert found[1].startswith(f"data: {mixed}: 2 of 3 rows would run without SAAR (2 select tool_agent")
    with pytest.raises(TrainerConfigError, match="raw.parquet"):
        check_trainer_config(config)


def test_rows_without_agent_name_follow_the_default_agent_loop(tmp_path):
    raw = write_parquet(tmp_path / "raw.parquet", None)
    config = trainer_config(
        data={"train_files": raw, "val_files": raw},
        actor_rollout_ref={"rollout": {"agent": {"default_agent_loop": AGENT_NAME}}},
    )
    assert data_agent_problems(config) == []


def test_data_is_not_checked_when_saar_is_off(tmp_path):
    raw = write_parquet(tmp_path / "raw.parquet", None)
    assert data_agent_problems(trainer_config(saar=False, data={"train_files": [raw], "val_files": [raw]})) == []


@pytest.mark.slow
def test_the_trainer_refuses_before_building_its_agent_loop_manager():
    """verl's main_ppo calls Manager.create(config=...) with the full trainer config: the checks run there too."""
    from cleaner.verl.agent_loop_manager import CleanerAgentLoopManager

    config = trainer_config(algorithm={"rollout_correction": {"rollout_is": "sequence"}})
    with pytest.raises(TrainerConfigError, match="SAAR .* cannot train with algorithm.rollout_correction.rollout_is"):
        CleanerAgentLoopManager.create(config=config)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("rollback_probability", 1.5, "rollback_probability must be a number in [0, 1], got 1.5"),
        ("max_tool_retries", -1, "max_tool_retries must be an integer >= 0"),
        ("rollback_on_errors", ["NameError"], "rollback_on_errors: unknown category 'NameError'"),
        ("rollback_is_threshold", 0, "rollback_is_threshold must be a number > 0"),
        ("rollback_after_errors", 0, "rollback_after_errors must be an integer >= 1"),
        ("rollback_is_correction", "yes", "rollback_is_correction must be true or false"),
    ],
)
def test_a_bad_saar_value_is_a_problem_naming_its_key(key, value, message):
    [problem] = problems(trainer_config(actor_rollout_ref={"rollout": {"multi_turn": {key: value}}}))
    assert problem.startswith("actor_rollout_ref.rollout.multi_turn") and message in problem


def test_bad_saar_value_with_negative_samples_is_reported_once_by_the_saar_check():
    multi_turn = {"save_negative_samples": True, "rollback_probability": 2}
    [problem] = problems(trainer_config(actor_rollout_ref={"rollout": {"multi_turn": multi_turn}}))
    assert "rollback_probability must be a number in [0, 1], got 2" in problem


PLAN_C = {
    "actor_rollout_ref": {"rollout": {"calculate_log_probs": True, "multi_turn": {"rollback_is_correction": True}}}
}


def test_rollback_is_correction_lifts_the_guard_for_token_level_is_only():
    token = {"algorithm": {"rollout_correction": {"rollout_is": "token"}}}
    assert problems(trainer_config(**PLAN_C, **token)) == []
    # without the key the guard stays
    [problem] = problems(trainer_config(**token))
    assert "cannot train with algorithm.rollout_correction.rollout_is=token" in problem
    assert "rollback_is_correction=True" in problem  # and names the way out


@pytest.mark.parametrize(
    ("correction", "named"),
    [
        ({"rollout_is": None}, "set algorithm.rollout_correction.rollout_is=token (got None)"),
        ({"rollout_is": "sequence"}, "set algorithm.rollout_correction.rollout_is=token (got sequence)"),
        ({"rollout_is": "token", "rollout_rs": "seq_mean_k1"}, "rollout_rs=seq_mean_k1"),
        ({"rollout_is": "token", "bypass_mode": True}, "bypass_mode=True"),
    ],
)
def test_rollback_is_correction_still_refuses_everything_but_token_level_is(correction, named):
    [problem] = problems(trainer_config(**PLAN_C, algorithm={"rollout_correction": correction}))
    assert named in problem


def test_only_configs_that_select_a_cleaner_piece_are_checked_at_trainer_start():
    assert uses_cleaner(trainer_config(actor_rollout_ref={"rollout": {"agent": {"default_agent_loop": AGENT_NAME}}}))
    assert uses_cleaner(
        trainer_config(actor_rollout_ref={"rollout": {"multi_turn": {"_target_": "cleaner.verl.multi_turn_config.X"}}})
    )
    plain = OmegaConf.create({"actor_rollout_ref": {"rollout": {"multi_turn": {"enable": True}, "agent": {}}}})
    assert not uses_cleaner(plain)


@pytest.mark.slow
def test_a_hand_started_main_ppo_with_a_bad_saar_value_fails_before_ray_starts_naming_the_key(tmp_path):
    """The plugin's start check runs the config checks where main_ppo validates its config, in the driver."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("VERL_USE_EXTERNAL")}
    command = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        f"actor_rollout_ref.model.path={tmp_path}",
        "actor_rollout_ref.rollout.multi_turn.enable=True",
        "actor_rollout_ref.rollout.multi_turn._target_=cleaner.verl.multi_turn_config.SaarMultiTurnConfig",
        "+actor_rollout_ref.rollout.multi_turn.enable_tool_rollback=True",
        "+actor_rollout_ref.rollout.multi_turn.rollback_probability=1.5",
    ]
    result = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "TrainerConfigError: actor_rollout_ref.rollout.multi_turn: rollback_probability must be a number" in output
    assert "ray init kwargs" not in output  # run_ppo prints it just before ray.init


@pytest.mark.parametrize(
    ("reward_kwargs", "named"),
    [
        ({"overlong_buffer_cfg": {"enable": True, "len": 4096}, "max_resp_len": 512}, "len=4096 must be"),
        ({"overlong_buffer_cfg": {"enable": True, "len": 0}, "max_resp_len": 512}, "len=0 must be a positive"),
        ({"overlong_buffer_cfg": {"enable": True, "len": 128}}, "needs reward.reward_kwargs.max_resp_len"),
    ],
)
def test_an_overlong_buffer_verls_dapo_manager_would_refuse_is_a_problem_at_start(reward_kwargs, named):
    [problem] = problems(trainer_config(reward={"reward_kwargs": reward_kwargs}))
    assert problem.startswith("reward.reward_kwargs") and named in problem


def test_an_overlong_buffer_that_fits_or_is_off_passes():
    fits = {"overlong_buffer_cfg": {"enable": True, "len": 128}, "max_resp_len": 512}
    off = {"overlong_buffer_cfg": {"enable": False, "len": 4096}, "max_resp_len": 512}
    assert problems(trainer_config(reward={"reward_kwargs": fits})) == []
    assert problems(trainer_config(reward={"reward_kwargs": off})) == []


def test_a_retired_class_path_or_backend_name_is_refused_naming_the_current_one():
    config = trainer_config(
        actor_rollout_ref={
            "rollout": {
                "name": "cleaner_cpu",
                "engine_kwargs": {"cleaner_cpu": {"prefix_cache": True}},
                "multi_turn": {"_target_": "cleaner.plugin.SaarMultiTurnConfig"},
                "agent": {"agent_loop_manager_class": "cleaner.agent_loop_manager.CleanerAgentLoopManager"},
            }
        }
    )
    found = problems(config)
    assert found == [
        "actor_rollout_ref.rollout.multi_turn._target_=cleaner.plugin.SaarMultiTurnConfig is a retired name: write "
        "actor_rollout_ref.rollout.multi_turn._target_=cleaner.verl.multi_turn_config.SaarMultiTurnConfig",
        "actor_rollout_ref.rollout.agent.agent_loop_manager_class=cleaner.agent_loop_manager.CleanerAgentLoopManager "
        "is a retired name: write actor_rollout_ref.rollout.agent.agent_loop_manager_class="
        "cleaner.verl.agent_loop_manager.CleanerAgentLoopManager",
        "actor_rollout_ref.rollout.name=cleaner_cpu is a retired name: write actor_rollout_ref.rollout.name=cpu",
        "actor_rollout_ref.rollout.engine_kwargs.cleaner_cpu is a retired key: write "
        "actor_rollout_ref.rollout.engine_kwargs.cpu",
    ]


def test_plan_c_without_rollout_log_probs_is_refused_naming_calculate_log_probs():
    """verl skips rollout IS without rollout log-probs: Plan C would train exactly as the paper, silently."""
    token = {"algorithm": {"rollout_correction": {"rollout_is": "token"}}}
    for log_probs in (False, None):
        plan_c = {"rollout": {"calculate_log_probs": log_probs, "multi_turn": {"rollback_is_correction": True}}}
        [problem] = problems(trainer_config(actor_rollout_ref=plan_c, **token))
        assert (
            "rollback_is_correction=True (Plan C) needs actor_rollout_ref.rollout.calculate_log_probs=True" in problem
        )
    plan_c["rollout"]["calculate_log_probs"] = False
    with pytest.raises(TrainerConfigError, match="actor_rollout_ref.rollout.calculate_log_probs=True"):
        check_trainer_config(trainer_config(actor_rollout_ref=plan_c, **token), read_data=False)


@pytest.mark.parametrize("correction", [{"rollout_is": "sequence"}, {"rollout_rs": "seq_mean_k1"}])
def test_rollout_correction_without_rollout_log_probs_is_refused(correction):
    """The check DRY_RUN used to make alone, now at trainer start (SAAR off: the baselines' setting)."""
    off = {"rollout": {"calculate_log_probs": False}}
    [problem] = problems(
        trainer_config(saar=False, actor_rollout_ref=off, algorithm={"rollout_correction": correction})
    )
    assert "needs actor_rollout_ref.rollout.calculate_log_probs=True" in problem
    assert f"algorithm.rollout_correction.{next(iter(correction))}" in problem


def scoring(key: str, value, **sections):
    config = trainer_config(actor_rollout_ref={"rollout": {"multi_turn": {key: value}}})
    return OmegaConf.merge(config, OmegaConf.create(sections))


@pytest.mark.parametrize(("key", "value"), [("rollback_is_threshold", 0.5), ("rollback_is_measure", True)])
@pytest.mark.parametrize(
    ("sections", "named"),
    [
        ({"actor_rollout_ref": {"rollout": {"name": "trtllm"}}}, "actor_rollout_ref.rollout.name=trtllm"),
        ({"trainer": {"v1": {"trainer_mode": "colocate_async"}}}, "trainer.v1.trainer_mode=colocate_async"),
        ({"trainer": {"use_v1": True, "v1": {"trainer_mode": "separate_async"}}}, "trainer_mode=separate_async"),
        ({"async_training": {"staleness_threshold": 0.1}}, "fully_async_policy"),
    ],
)
def test_scoring_where_prompt_log_probs_never_reach_the_loop_is_refused(key, value, sections, named):
    [problem] = problems(scoring(key, value, **sections))
    assert f"{key}={value}" in problem and named in problem and "prompt log-probs" in problem


def test_scoring_on_a_sync_trainer_with_vllm_sglang_or_cpu_passes():
    for name in ("vllm", "sglang", "cpu"):
        config = scoring("rollback_is_threshold", 0.5, actor_rollout_ref={"rollout": {"name": name}})
        assert problems(config) == []
    # the legacy trainer ignores trainer.v1.trainer_mode (it uses the plain client)
    legacy = {"use_v1": False, "v1": {"trainer_mode": "colocate_async"}}
    assert problems(scoring("rollback_is_measure", True, trainer=legacy)) == []
    # without scoring the async modes are fine
    assert problems(trainer_config(trainer={"v1": {"trainer_mode": "colocate_async"}})) == []


@pytest.mark.parametrize(("key", "value"), [("rollback_is_threshold", 0.5), ("rollback_is_measure", True)])
@pytest.mark.parametrize("mode", ["raw_logits", "processed_logits"])
def test_scoring_with_a_logits_logprobs_mode_is_refused_naming_the_key(key, value, mode):
    """The server would report logits where the scoring reads the sampled tokens' log-probs."""
    [problem] = problems(scoring(key, value, actor_rollout_ref={"rollout": {"logprobs_mode": mode}}))
    assert f"actor_rollout_ref.rollout.logprobs_mode={mode}" in problem and f"{key}={value}" in problem
    for fine in ("processed_logprobs", "raw_logprobs"):
        assert problems(scoring(key, value, actor_rollout_ref={"rollout": {"logprobs_mode": fine}})) == []
    assert problems(trainer_config(actor_rollout_ref={"rollout": {"logprobs_mode": mode}})) == []  # no scoring


def test_fully_async_mains_own_driver_refuses_scoring_before_ray_starts():
    """verl's fully_async_main never calls validate_config; the function its driver calls first does the refusal."""
    from verl.experimental.fully_async_policy import fully_async_main

    config = scoring("rollback_is_threshold", 0.5, async_training={"staleness_threshold": 0.1})
    config.trainer.device = "cpu"
    with pytest.raises(TrainerConfigError, match="multi_turn.rollback_is_threshold=0.5"):
        fully_async_main.auto_set_device(config)
    config.actor_rollout_ref.rollout.multi_turn.rollback_is_threshold = None
    fully_async_main.auto_set_device(config)  # without scoring: verl's own function runs


def test_sglang_scoring_without_logits_chunking_is_warned_about():
    config = scoring("rollback_is_threshold", 0.5, actor_rollout_ref={"rollout": {"name": "sglang"}})
    [warning] = [w for w in review_trainer_config(config, read_data=False).warnings if "SGLANG" in w]
    assert "ray_kwargs.ray_init.runtime_env.env_vars.SGLANG_ENABLE_LOGITS_PROCESSER_CHUNK=1" in warning
    chunked = {"ray_init": {"runtime_env": {"env_vars": {"SGLANG_ENABLE_LOGITS_PROCESSER_CHUNK": "1"}}}}
    config = OmegaConf.merge(config, OmegaConf.create({"ray_kwargs": chunked}))
    assert not [w for w in review_trainer_config(config, read_data=False).warnings if "SGLANG" in w]


def test_dapo_dynamic_sampling_on_the_legacy_trainer_is_refused():
    dapo = {"filter_groups": {"enable": True, "metric": "acc"}}
    [problem] = problems(trainer_config(algorithm=dapo, trainer={"use_v1": False}))
    assert problem.startswith("algorithm.filter_groups.enable=True with trainer.use_v1=False")
    assert problems(trainer_config(algorithm=dapo, trainer={"use_v1": True})) == []


def test_purification_saar_alone_gets_the_saar_checks():
    """`purification: saar` without `enable_tool_rollback` is SAAR: its settings are checked like the rollback key's."""
    config = trainer_config(saar=False)
    multi_turn = {"enable": True, "purification": "saar", "rollback_probability": 1.5}
    config = OmegaConf.merge(config, {"actor_rollout_ref": {"rollout": {"multi_turn": multi_turn}}})
    assert any("rollback_probability must be a number in [0, 1]" in problem for problem in problems(config))
