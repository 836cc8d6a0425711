"""Every training and evaluation recipe config composes and passes the trainer-start checks against the installed verl.

The configs are composed here in one process (verl's import is paid once) and checked with the code the trainer
runs at start (`cleaner.verl.start_check.review_start`); two scripts also run DRY_RUN=1 end to end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from composed_snapshots import compose
from omegaconf import OmegaConf

from cleaner.data.run_inputs import config_file_problems
from cleaner.purify.config import CONFIG_KEYS as PURIFICATION_KEYS
from cleaner.recipes.overrides import translate_overrides
from cleaner.saar.config import CONFIG_KEYS as SAAR_KEYS
from cleaner.saar.config import SaarConfig
from cleaner.verl.start_check import CONFIG_MARKER, review_start

pytestmark = pytest.mark.slow  # composes every recipe with verl's Hydra config

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipe" / "cleaner"
CONFIGS = RECIPES / "config"

# The reference implementation's own lines (its qwen3_4b_cleaner.sh), appended as a user coming from it would.
REFERENCE_SAAR_LINES = [
    "+actor_rollout_ref.rollout.multi_turn.save_negative_samples=False",
    "+actor_rollout_ref.rollout.multi_turn.max_negative_samples_per_group=0",
    "+actor_rollout_ref.rollout.multi_turn.enable_tool_rollback=True",
    "+actor_rollout_ref.rollout.multi_turn.max_tool_retries=3",
]
REFERENCE_REWARD_LINES = [
    "reward_model.reward_manager=dapo",
    "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
    "+reward_model.reward_kwargs.overlong_buffer_cfg.len=4096",
    "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
    "+reward_model.reward_kwargs.overlong_buffer_cfg.log=false",
    "+reward_model.reward_kwargs.max_resp_len=20480",
]


def evaluation(saar: str, benchmarks: list[str], n: int, *extra: str) -> list[tuple[str, list[str]]]:
    """The runs eval_common.sh starts: one validation-only run of eval_tools per benchmark."""
    return [
        (
            "eval_tools",
            [
                "actor_rollout_ref.model.path=/models/m",
                f"data.train_files=['{ROOT}/dataset/prepared/{bench}.parquet']",
                f"data.val_files=['{ROOT}/dataset/prepared/{bench}.parquet']",
                f"actor_rollout_ref.rollout.val_kwargs.n={n}",
                f"trainer.validation_data_dir={ROOT}/output/eval/generations/{bench}",
                f"test_time_saar={saar}",
                *extra,
            ],
        )
        for bench in benchmarks
    ]


AIME_GPQA = ["aime2024", "aime2025", "gpqa-diamond"]
TRAINING = [
    "qwen3_4b_cleaner",
    "qwen3_4b_cleaner_dpo",
    "qwen2.5_7b_cleaner",
    "qwen3_4b_cleaner_is_gate",
    "qwen3_4b_cleaner_is_correction",
    "qwen3_4b_cleaner_one_tolerance",
    "qwen3_4b_dapo_tool",
    "qwen2.5_7b_dapo_tool",
    "qwen3_4b_dapo_notool",
    "qwen2.5_7b_dapo_notool",
    *(f"qwen3_4b_{mode}" for mode in ("no_purification", "error_turn_mask", "void_turn_filter")),
    *(f"qwen3_4b_{mode}" for mode in ("error_trajectory_filter", "roc", "roc_matched")),
]
MT = "actor_rollout_ref.rollout.multi_turn"


def user(*overrides: str) -> list[str]:
    """Overrides as a user appends them to a recipe script (launch.sh translates them first)."""
    return translate_overrides(overrides)[0]


# name -> the runs it composes: (config name, overrides)
CASES: dict[str, list[tuple[str, list[str]]]] = {
    **{name: [(name, [])] for name in TRAINING},
    "train_cpu": [("train_cpu", [])],
    "short_responses": [("qwen3_4b_cleaner", ["data.max_response_length=1024"])],
    "token_is_without_correction": [
        (
            "qwen3_4b_cleaner",
            ["algorithm.rollout_correction.rollout_is=token", "actor_rollout_ref.rollout.calculate_log_probs=True"],
        )
    ],
    "eval_aime_gpqa": evaluation("on", AIME_GPQA, 16),
    "eval_livecodebench": evaluation("off", ["livecodebench-v6"], 10),
    "eval_qwen2.5_7b_aime_gpqa": evaluation(
        "off",
        AIME_GPQA,
        32,
        "actor_rollout_ref.rollout.dtype=bfloat16",
        "actor_rollout_ref.actor.fsdp_config.dtype=bfloat16",
    ),
    "eval_notool": [
        (
            "eval_notool",
            [
                "actor_rollout_ref.model.path=/models/m",
                f"data.train_files=['{ROOT}/dataset/prepared/aime2024.notool.parquet']",
                f"data.val_files=['{ROOT}/dataset/prepared/aime2024.notool.parquet']",
            ],
        )
    ],
    "eval_cpu": [(name, ["+platform=cpu", *overrides]) for name, overrides in evaluation("on", ["aime2024"], 2)],
    "env_and_overrides": [
        (
            "qwen3_4b_cleaner",
            user(
                f"+{MT}.max_tool_retries=5",
                f"+{MT}.rollback_similarity_threshold=0.7",
                "trainer.n_gpus_per_node=8",
                "trainer.nnodes=2",
                "trainer.project_name=my-project",
                f"+{MT}.rollback_on_errors=[exception,syntax_error]",
                "trainer.save_freq=5",
            ),
        )
    ],
    "bad_saar_knob": [("qwen3_4b_cleaner", user(f"+{MT}.rollback_probability=1.5"))],
    "bad_tool_format": [("qwen3_4b_dapo_tool", [f"{MT}.format=no_such_parser"])],
    "lenient_tool_format": [("qwen3_4b_dapo_tool", [f"{MT}.format=cleaner_lenient"])],
    "reference_lines": [("qwen3_4b_cleaner", user(*REFERENCE_SAAR_LINES, *REFERENCE_REWARD_LINES))],
    "reference_lines_on_a_baseline": [
        (
            "qwen2.5_7b_dapo_tool",
            user(
                f"+{MT}.enable_tool_rollback=True",
                f"+{MT}.rollback_probability=0.7",
                "reward_model.reward_manager=naive",
                "+reward_model.reward_kwargs.overlong_buffer_cfg.len=1024",
                "algorithm.rollout_correction.rollout_is=null",
                "actor_rollout_ref.rollout.calculate_log_probs=False",
            ),
        )
    ],
    "reference_reward_function": [
        (
            "qwen3_4b_cleaner",
            user(
                "custom_reward_function.path=cleaner/rewards/__init__.py",
                "custom_reward_function.name=compute_score_outcome_reward",
            ),
        )
    ],
    "rollback_on_a_baseline": [
        (
            "qwen2.5_7b_dapo_tool",
            [
                f"{MT}.enable_tool_rollback=True",
                "actor_rollout_ref.rollout.calculate_log_probs=False",
                "algorithm.rollout_correction.rollout_is=null",
            ],
        )
    ],
    "rollback_with_rollout_is": [
        (
            "qwen2.5_7b_dapo_tool",
            [f"{MT}.enable_tool_rollback=True", "algorithm.rollout_correction.rollout_is=sequence"],
        )
    ],
    "rollback_in_bypass_mode": [
        (
            "qwen3_4b_cleaner",
            ["actor_rollout_ref.rollout.calculate_log_probs=True", "algorithm.rollout_correction.bypass_mode=True"],
        )
    ],
    "filter_zero_advantage_on": [("qwen3_4b_cleaner", ["+trainer.filter_zero_advantage_samples=True"])],
    "filter_zero_advantage_off": [("qwen3_4b_cleaner", ["+trainer.filter_zero_advantage_samples=False"])],
}
SCRIPT_ENV = {
    "CLEANER_ROOT": str(ROOT),
    "DATA_DIR": str(ROOT / "dataset" / "prepared"),
    "MODEL_DIR": str(ROOT / "pretrained_models"),
    "OUTPUT_ROOT": str(ROOT / "output"),
}
# What train_cpu.sh exports besides (MODEL_PATH would name every training recipe's model: only for train_cpu).
TRAIN_CPU_ENV = {
    "MODEL_PATH": "/models/m",
    "TRAIN_FILES": "/data/train.parquet",
    "VAL_FILES": "/data/val.parquet",
    "OUTPUT_DIR": "/out/train-cpu",
}


def check(config):
    """What the trainer-start check does before the run's inputs: raises on a config that would not run."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    verl_validate = getattr(validate_config, "__wrapped__", validate_config)  # `import verl` wrapped it
    review_start(
        config,
        lambda checked: verl_validate(
            checked, use_reference_policy=need_reference_policy(checked), use_critic=need_critic(checked)
        ),
    )


@pytest.fixture(scope="module")
def dry_runs() -> dict[str, list]:
    """Each case's configs (resolved, as dicts) or the error the trainer-start check raised."""
    saved = dict(os.environ)
    os.environ.update(SCRIPT_ENV)
    for key in ("JUDGE_URL", *TRAIN_CPU_ENV):
        os.environ.pop(key, None)
    try:
        results = {}
        for name, runs in CASES.items():
            configs = []
            os.environ.update(TRAIN_CPU_ENV if name == "train_cpu" else {})
            for config_name, overrides in runs:
                config = compose(config_name, overrides)
                try:
                    check(config)
                except ValueError as error:
                    configs.append(error)
                    continue
                configs.append(OmegaConf.to_container(config, resolve=True))
            results[name] = configs
            for key in TRAIN_CPU_ENV:
                os.environ.pop(key, None)
        return results
    finally:
        os.environ.clear()
        os.environ.update(saved)


def composed(configs: list) -> dict:
    assert len(configs) == 1
    assert isinstance(configs[0], dict), configs[0]
    return configs[0]


def test_every_recipe_script_runs_its_config():
    """Each training script's main_ppo line names its own config file, and every training config has a case."""
    for script in RECIPES.glob("qwen*.sh"):
        assert f"--config-name {script.stem} " in script.read_text(), script
    assert {p.stem for p in RECIPES.glob("qwen*.sh")} == set(TRAINING)
    assert {p.stem for p in CONFIGS.glob("qwen*.yaml")} == set(TRAINING)


# the run's name, and what verl derives from it (checkpoint and dump paths, the trace's name)
NAMES = {
    "trainer.experiment_name",
    "trainer.default_local_dir",
    "trainer.validation_data_dir",
    "actor_rollout_ref.rollout.trace.experiment_name",
}
# the initial policy and its learning rate (policy/), and the name verl derives from the model path
POLICY = {
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.rollout.prometheus.served_model_name",
}
TRAIN_DATA = {"data.train_files"}


def differing(dry_runs, first: str, second: str) -> set[str]:
    """The keys whose values differ between two composed recipes, their names left out."""
    one, other = _leaves(composed(dry_runs[first])), _leaves(composed(dry_runs[second]))
    return {key for key in one.keys() | other.keys() if one.get(key) != other.get(key)} - NAMES


def test_cleaner_4b(dry_runs):
    config = composed(dry_runs["qwen3_4b_cleaner"])
    rollout = config["actor_rollout_ref"]["rollout"]
    multi_turn = rollout["multi_turn"]
    # Every SAAR and purification key is in the config the run trains with, and in what DRY_RUN prints.
    assert set(SAAR_KEYS) | set(PURIFICATION_KEYS) <= set(multi_turn)
    assert multi_turn["_target_"] == "cleaner.verl.multi_turn_config.SaarMultiTurnConfig"
    # SAAR on; the recipes' two choices over the package defaults (docs/recipes.md) and nothing else.
    changed = {"enable_tool_rollback": True, "rollback_in_validation": True, "drop_infra_error_trajectories": True}
    assert SaarConfig.from_multi_turn(multi_turn) == SaarConfig(**changed)
    assert rollout["multi_turn"]["tool_config_path"] == str(CONFIGS / "python_tool.yaml")
    assert rollout["agent"]["agent_loop_config_path"] == str(CONFIGS / "agent_loop.yaml")
    assert config["reward"]["custom_reward_function"]["path"] == str(ROOT / "cleaner" / "rewards" / "__init__.py")
    tool = yaml.safe_load((CONFIGS / "python_tool.yaml").read_text())["tools"][0]["config"]
    assert tool["auto_imports"] == "reference"  # a reference tool call's namespace (docs/tool.md)


def test_cleaner_4b_is_its_tool_baseline_plus_saar_and_its_log_prob_handling(dry_runs):
    assert differing(dry_runs, "qwen3_4b_dapo_tool", "qwen3_4b_cleaner") == {
        f"{MT}.enable_tool_rollback",
        f"{MT}.rollback_in_validation",
        "actor_rollout_ref.rollout.calculate_log_probs",
        "algorithm.rollout_correction.rollout_is",
        "actor_rollout_ref.rollout.gpu_memory_utilization",
        *TRAIN_DATA,  # the full 30K set; the baselines train on the filtered one
    }


@pytest.mark.parametrize(
    ("small", "large", "also"),
    [
        ("qwen3_4b_cleaner", "qwen2.5_7b_cleaner", {*TRAIN_DATA, f"{MT}.rollback_probability"}),
        ("qwen3_4b_dapo_tool", "qwen2.5_7b_dapo_tool", set()),
        ("qwen3_4b_dapo_notool", "qwen2.5_7b_dapo_notool", set()),
    ],
)
def test_a_7b_recipe_differs_from_its_4b_recipe_in_model_lr_and_data_only(dry_runs, small, large, also):
    assert differing(dry_runs, small, large) == POLICY | also
    assert composed(dry_runs[large])["actor_rollout_ref"]["model"]["path"].endswith("/Qwen2.5-7B-RA-SFT")


def test_the_no_tool_baseline_differs_from_the_tool_baseline_in_the_tool_loop_and_prompts_only(dry_runs):
    tool_loop = {key for key in differing(dry_runs, "qwen3_4b_dapo_notool", "qwen3_4b_dapo_tool")}
    assert {key for key in tool_loop if not key.startswith(("actor_rollout_ref.rollout.multi_turn.", "data."))} == {
        "actor_rollout_ref.rollout.agent.agent_loop_config_path",
        "actor_rollout_ref.rollout.agent.agent_loop_manager_class",
    }
    # the prompts (with or without tool hints), and verl's copy of multi_turn.tool_config_path
    assert {key for key in tool_loop if key.startswith("data.")} == {
        "data.train_files",
        "data.val_files",
        "data.tool_config_path",
    }


@pytest.mark.parametrize("name", [*TRAINING, "train_cpu", "eval_livecodebench", "eval_cpu", "eval_notool"])
def test_token_budgets_follow_the_lengths(dry_runs, name):
    """A micro-batch holds one whole sequence (prompt + response); the reference's log-prob pass four."""
    for config in dry_runs[name]:
        actor, data = config["actor_rollout_ref"]["actor"], config["data"]
        assert actor["ppo_max_token_len_per_gpu"] == data["max_prompt_length"] + data["max_response_length"]
        assert (
            config["actor_rollout_ref"]["ref"]["log_prob_max_token_len_per_gpu"]
            == 4 * actor["ppo_max_token_len_per_gpu"]
        )


def test_is_gate_recipe_gates_like_the_reference_with_one_scoring_request_per_splice(dry_runs):
    config = composed(dry_runs["qwen3_4b_cleaner_is_gate"])
    rollout = config["actor_rollout_ref"]["rollout"]
    saar = SaarConfig.from_multi_turn(rollout["multi_turn"])
    assert (saar.rollback_is_threshold, saar.rollback_is_statistic, saar.enable_tool_rollback) == (
        0.5,
        "token_mean",
        True,
    )
    # rollout log-probs on at temperature 1: the behaviour side needs no second prefill; no rollout IS
    assert (rollout["calculate_log_probs"], config["algorithm"]["rollout_correction"]["rollout_is"]) == (True, None)
    assert (rollout["temperature"], rollout["top_p"], rollout["top_k"]) == (1.0, 1.0, -1)
    assert config["trainer"]["experiment_name"] == "Qwen3-4B-CLEANER-IS-gate"


def test_is_correction_recipe_runs_token_level_rollout_is_with_saar(dry_runs):
    config = composed(dry_runs["qwen3_4b_cleaner_is_correction"])
    rollout = config["actor_rollout_ref"]["rollout"]
    assert rollout["multi_turn"]["rollback_is_correction"] is True
    assert (rollout["calculate_log_probs"], config["algorithm"]["rollout_correction"]["rollout_is"]) == (True, "token")


def test_token_level_rollout_is_with_saar_is_refused_without_the_correction_key(dry_runs):
    [error] = dry_runs["token_is_without_correction"]
    assert isinstance(error, ValueError) and "cannot train with algorithm.rollout_correction.rollout_is=token" in str(
        error
    )
    assert "rollback_is_correction=True" in str(error)


def test_an_overlong_buffer_longer_than_the_responses_is_refused_by_name(dry_runs):
    [error] = dry_runs["short_responses"]
    assert "reward.reward_kwargs.overlong_buffer_cfg.len=4096 must be" in str(error) and "OVERLONG_BUFFER_LEN" in str(
        error
    )


def test_one_tolerance_recipe(dry_runs):
    multi_turn = composed(dry_runs["qwen3_4b_cleaner_one_tolerance"])["actor_rollout_ref"]["rollout"]["multi_turn"]
    assert (multi_turn["rollback_after_errors"], multi_turn["enable_tool_rollback"]) == (2, True)


@pytest.mark.parametrize("name", ["qwen3_4b_dapo_tool", "qwen2.5_7b_dapo_tool"])
def test_tool_baselines_turn_saar_off(dry_runs, name):
    config = composed(dry_runs[name])
    rollout = config["actor_rollout_ref"]["rollout"]
    assert rollout["multi_turn"]["enable"] is True and rollout["multi_turn"]["enable_tool_rollback"] is False
    assert rollout["multi_turn"]["drop_infra_error_trajectories"] is True  # the same trajectories as CLEANER
    assert (rollout["calculate_log_probs"], config["algorithm"]["rollout_correction"]["rollout_is"]) == (
        True,
        "sequence",
    )
    assert rollout["gpu_memory_utilization"] == 0.65


@pytest.mark.parametrize("name", ["qwen3_4b_dapo_notool", "qwen2.5_7b_dapo_notool"])
def test_no_tool_baselines(dry_runs, name):
    config = composed(dry_runs[name])
    multi_turn = config["actor_rollout_ref"]["rollout"]["multi_turn"]
    assert multi_turn["enable"] is False and multi_turn["tool_config_path"] is None
    assert "enable_tool_rollback" not in multi_turn
    assert all(path.endswith(".notool.parquet") for path in config["data"]["val_files"])


def validated_benchmarks(configs: list[dict]) -> list[str]:
    """The benchmark each validation-only run of an evaluation script writes its dump for, in order."""
    return [config["trainer"]["validation_data_dir"].rsplit("/", 1)[1] for config in configs]


def test_eval_aime_gpqa_is_validation_only_with_test_time_saar(dry_runs):
    configs = dry_runs["eval_aime_gpqa"]
    assert validated_benchmarks(configs) == AIME_GPQA
    for config in configs:
        rollout = config["actor_rollout_ref"]["rollout"]
        assert config["trainer"]["val_only"] is True
        assert config["data"]["val_files"] == config["data"]["train_files"]
        assert (rollout["val_kwargs"]["n"], rollout["val_kwargs"]["temperature"], rollout["val_kwargs"]["top_p"]) == (
            16,
            1.0,
            0.6,
        )
        assert rollout["multi_turn"]["rollback_in_validation"] is True
        assert rollout["multi_turn"]["enable_tool_rollback"] is True


def test_eval_livecodebench(dry_runs):
    config = composed(dry_runs["eval_livecodebench"])
    rollout = config["actor_rollout_ref"]["rollout"]
    assert rollout["val_kwargs"]["n"] == 10 and rollout["multi_turn"]["enable_tool_rollback"] is False
    assert config["data"]["val_files"][0].endswith("livecodebench-v6.parquet")
    assert (config["data"]["max_prompt_length"], rollout["dtype"]) == (4096, "float16")


@pytest.mark.parametrize(
    ("name", "saar", "n", "dtype"),
    [("eval_aime_gpqa", True, 16, "float16"), ("eval_qwen2.5_7b_aime_gpqa", False, 32, "bfloat16")],
)
def test_per_model_evaluations_use_the_references_settings(dry_runs, name, saar, n, dtype):
    """The reference evaluated CLEANER-4B on AIME/GPQA with n=16, fp16 and test-time SAAR on; CLEANER-7B with n=32,
    bf16 and SAAR off; both with 4096 prompt tokens."""
    configs = dry_runs[name]
    assert validated_benchmarks(configs) == AIME_GPQA
    for config in configs:
        rollout = config["actor_rollout_ref"]["rollout"]
        assert (rollout["multi_turn"]["enable_tool_rollback"], rollout["multi_turn"]["rollback_in_validation"]) == (
            saar,
            saar,
        )
        assert (rollout["val_kwargs"]["n"], rollout["dtype"], config["data"]["max_prompt_length"]) == (n, dtype, 4096)
        assert (rollout["val_kwargs"]["temperature"], rollout["val_kwargs"]["top_p"]) == (1.0, 0.6)


def test_a_users_overrides_reach_the_config(dry_runs):
    config = composed(dry_runs["env_and_overrides"])
    multi_turn = config["actor_rollout_ref"]["rollout"]["multi_turn"]
    assert (multi_turn["max_tool_retries"], multi_turn["rollback_similarity_threshold"]) == (5, 0.7)
    assert multi_turn["rollback_on_errors"] == ["exception", "syntax_error"]
    assert (config["trainer"]["n_gpus_per_node"], config["trainer"]["nnodes"]) == (8, 2)
    assert (config["trainer"]["project_name"], config["trainer"]["save_freq"]) == ("my-project", 5)


def test_invalid_saar_knob_fails_validation_with_its_name(dry_runs):
    [error] = dry_runs["bad_saar_knob"]
    assert isinstance(error, ValueError)
    assert "rollback_probability must be a number in [0, 1], got 1.5" in str(error)


def test_tool_format_must_be_a_registered_parser(dry_runs):
    [error] = dry_runs["bad_tool_format"]
    assert isinstance(error, ValueError) and "format='no_such_parser' is not a registered tool parser" in str(error)
    assert (
        composed(dry_runs["lenient_tool_format"])["actor_rollout_ref"]["rollout"]["multi_turn"]["format"]
        == "cleaner_lenient"
    )


def test_validation_only_runs_size_the_schedule_for_one_step(dry_runs):
    for config in dry_runs["eval_aime_gpqa"] + dry_runs["eval_livecodebench"]:
        assert config["trainer"]["total_training_steps"] == 1


def run_script(script: str, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    inherited = {k: v for k, v in os.environ.items() if k not in ("MODEL_PATH", "JUDGE_URL", "DATA_DIR", "MODEL_DIR")}
    full_env = {**inherited, "PYTHON": sys.executable, "OUTPUT_ROOT": str(tmp_path / "out"), **env}
    return subprocess.run(
        ["bash", str(RECIPES / script), *args], env=full_env, capture_output=True, text=True, timeout=280
    )


def test_dry_run_end_to_end(tmp_path):
    """DRY_RUN=1 itself: main_ppo composes and checks, prints every key the run uses, warns what a real run would
    miss, no GPU; a reference line is translated with a note; the reward and the tool read one JUDGE_URL."""
    result = run_script(
        "qwen3_4b_cleaner.sh",
        tmp_path,
        "+actor_rollout_ref.rollout.multi_turn.max_tool_retries=5",
        "reward_model.reward_manager=dapo",
        DRY_RUN="1",
        JUDGE_URL="http://127.0.0.1:9",  # nothing listens there
        MODEL_DIR=str(tmp_path / "models"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "DRY_RUN ok: Qwen3-4B-CLEANER" in result.stdout
    config = yaml.safe_load(result.stdout.split(CONFIG_MARKER, 1)[1].rsplit("DRY_RUN ok", 1)[0])
    multi_turn = config["actor_rollout_ref"]["rollout"]["multi_turn"]
    assert (multi_turn["enable_tool_rollback"], multi_turn["max_tool_retries"]) == (True, 5)
    assert set(SAAR_KEYS) | set(PURIFICATION_KEYS) <= set(multi_turn)  # the defaults too
    assert "note: reward_model.reward_manager=dapo: dropped" in result.stderr
    assert "a real run would stop here" in result.stderr
    assert f"model: {tmp_path}/models/Qwen3-4B-RA-SFT has no config.json" in result.stderr
    assert "judge: no answer from http://127.0.0.1:9/ping" in result.stderr
    assert config["reward"]["custom_reward_function"]["reward_kwargs"]["judge_url"] == "http://127.0.0.1:9"
    assert multi_turn["tool_config_path"] == str(CONFIGS / "python_tool.yaml")  # the shipped yaml, no copy
    assert "two judges" not in result.stderr
    assert not (tmp_path / "out").exists()  # nothing written


def test_the_training_scripts_honour_model_path(tmp_path):
    """MODEL_PATH names the initial policy, as for the evaluation and CPU scripts."""
    model = tmp_path / "my-model"
    result = run_script("qwen2.5_7b_cleaner.sh", tmp_path, DRY_RUN="1", MODEL_PATH=str(model))
    assert result.returncode == 0, result.stderr[-3000:]
    config = yaml.safe_load(result.stdout.split(CONFIG_MARKER, 1)[1].rsplit("DRY_RUN ok", 1)[0])
    assert config["actor_rollout_ref"]["model"]["path"] == str(model)
    assert config["actor_rollout_ref"]["actor"]["optim"]["lr"] == 1e-6  # the recipe's, for its model
    assert f"model: {model} has no config.json" in result.stderr


def tool_judge(config) -> str:
    """The judge URL of the tool as an agent-loop worker builds it: verl's tool registry loads the config's tool yaml
    in the worker's environment, which on one node is the driver's (Ray workers inherit it)."""
    from verl.tools.tool_registry import initialize_tools_from_config

    [tool] = initialize_tools_from_config(config.actor_rollout_ref.rollout.multi_turn.tool_config_path)
    return tool.settings.judge.url


REWARD_JUDGE = "reward.custom_reward_function.reward_kwargs.judge_url"


@pytest.mark.parametrize("name", ["qwen3_4b_cleaner", "qwen3_4b_dapo_tool", "eval_tools"])
def test_the_hand_typed_main_ppo_line_with_judge_url_gives_reward_and_tool_one_judge(monkeypatch, name):
    """`JUDGE_URL=... python -m verl.trainer.main_ppo --config-dir recipe/cleaner/config --config-name NAME`, no
    script: the reward and the tool both call JUDGE_URL, and the start check finds one judge."""
    monkeypatch.setenv("CLEANER_ROOT", str(ROOT))
    monkeypatch.setenv("JUDGE_URL", "http://judge.example:9000")
    config = compose(name, ["actor_rollout_ref.model.path=/m"])
    assert OmegaConf.select(config, REWARD_JUDGE) == tool_judge(config) == "http://judge.example:9000"
    assert config_file_problems(config) == []
    monkeypatch.delenv("JUDGE_URL")
    config = compose(name, ["actor_rollout_ref.model.path=/m"])
    assert OmegaConf.select(config, REWARD_JUDGE) == tool_judge(config) == "http://127.0.0.1:8088"


def test_a_judge_set_on_the_rewards_key_alone_is_refused_naming_both(monkeypatch):
    """The tool reads JUDGE_URL: a run that moves only the reward's judge would score with another judge than its
    tool calls."""
    monkeypatch.setenv("CLEANER_ROOT", str(ROOT))
    monkeypatch.delenv("JUDGE_URL", raising=False)
    config = compose("qwen3_4b_cleaner", [f"{REWARD_JUDGE}=http://judge-b:8088"])
    assert tool_judge(config) == "http://127.0.0.1:8088"
    [problem] = config_file_problems(config)
    assert "two judges" in problem and "calls http://127.0.0.1:8088" in problem and "http://judge-b:8088" in problem


def test_a_run_whose_reward_and_tool_call_different_judges_is_refused_naming_both(monkeypatch, tmp_path):
    """A tool yaml that names its judge itself (e.g. a copy of the reference's) against the reward's judge."""
    monkeypatch.setenv("CLEANER_ROOT", str(ROOT))
    monkeypatch.delenv("JUDGE_URL", raising=False)
    tools = yaml.safe_load((CONFIGS / "python_tool.yaml").read_text())
    tools["tools"][0]["config"]["judge_url"] = "http://judge-a:8088"
    (tmp_path / "tools.yaml").write_text(yaml.safe_dump(tools))
    config = compose("qwen3_4b_cleaner", [f"{MT}.tool_config_path={tmp_path / 'tools.yaml'}"])
    with pytest.raises(ValueError) as raised:
        review_start(config, verl_validate=lambda _: pytest.fail("verl's validation ran first"))
    [line] = [line for line in str(raised.value).splitlines() if "two judges" in line]
    assert "calls http://judge-a:8088" in line and "calls http://127.0.0.1:8088" in line


def test_dry_run_reports_an_invalid_config_by_name_and_fails(tmp_path):
    """A no-tool recipe gets the trainer-start checks too (cleaner's reward manager selects them)."""
    result = run_script("qwen3_4b_dapo_notool.sh", tmp_path, "+trainer.filter_zero_advantage_samples=True", DRY_RUN="1")
    assert result.returncode == 1
    assert "DRY_RUN ok" not in result.stdout
    assert "trainer.filter_zero_advantage_samples=True belongs to the reference's" in result.stderr


def test_a_recipe_config_that_would_not_run_is_refused_before_verls_own_checks():
    config = compose("qwen3_4b_cleaner", [f"{MT}.rollback_probability=1.5"])
    with pytest.raises(ValueError, match="rollback_probability must be a number in \\[0, 1\\], got 1.5"):
        review_start(config, verl_validate=lambda _: pytest.fail("verl's validation ran first"))


def test_the_reference_recipes_saar_and_reward_lines_keep_their_meaning(dry_runs):
    config = composed(dry_runs["reference_lines"])
    multi_turn = config["actor_rollout_ref"]["rollout"]["multi_turn"]
    assert (multi_turn["enable_tool_rollback"], multi_turn["max_tool_retries"]) == (True, 3)
    assert (multi_turn["save_negative_samples"], multi_turn["max_negative_samples_per_group"]) == (False, 0)
    reward = config["reward"]
    assert reward["reward_kwargs"] == {
        "overlong_buffer_cfg": {"enable": True, "len": 4096, "penalty_factor": 1.0, "log": False},
        "max_resp_len": 20480,
    }
    assert reward["reward_manager"]["name"] == "CleanerDAPORewardManager"  # verl's DAPO manager, as `dapo` asked
    assert config["reward_model"]["reward_manager"] is None and "reward_kwargs" not in config["reward_model"]


def test_legacy_reward_keys_become_the_keys_verl_reads(dry_runs):
    config = composed(dry_runs["reference_lines_on_a_baseline"])
    assert config["actor_rollout_ref"]["rollout"]["multi_turn"]["rollback_probability"] == 0.7
    assert config["reward"]["reward_manager"]["source"] == "register"
    assert config["reward"]["reward_manager"]["name"] == "naive"
    assert config["reward"]["reward_kwargs"]["overlong_buffer_cfg"]["len"] == 1024


def test_the_reference_reward_function_name_is_refused_by_name(dry_runs):
    [error] = dry_runs["reference_reward_function"]
    assert isinstance(error, ValueError)
    assert "reward.custom_reward_function.name='compute_score_outcome_reward'" in str(error)
    assert "CLEANER's is compute_score" in str(error)


def test_appending_a_key_the_recipe_sets_fails_in_hydra_without_the_translation():
    """The reference appends its SAAR keys with `+`; a recipe config already has them, so `+` must become `++`."""
    with pytest.raises(Exception, match="Could not append to config"):
        compose("qwen3_4b_cleaner", [f"+{MT}.rollback_probability=0.7"])
    config = compose("qwen3_4b_cleaner", user(f"+{MT}.rollback_probability=0.7"))
    assert config.actor_rollout_ref.rollout.multi_turn.rollback_probability == 0.7


def test_turning_saar_on_in_a_baseline_gets_cleaners_log_prob_handling(dry_runs):
    config = composed(dry_runs["rollback_on_a_baseline"])
    rollout = config["actor_rollout_ref"]["rollout"]
    assert rollout["multi_turn"]["enable_tool_rollback"] is True
    assert (rollout["calculate_log_probs"], config["algorithm"]["rollout_correction"]["rollout_is"]) == (False, None)


@pytest.mark.parametrize(
    ("name", "named"),
    [
        ("rollback_with_rollout_is", "algorithm.rollout_correction.rollout_is=sequence"),
        ("rollback_in_bypass_mode", "algorithm.rollout_correction.bypass_mode=True"),
    ],
)
def test_saar_with_rollout_is_or_bypass_mode_is_refused(dry_runs, name, named):
    [error] = dry_runs[name]
    assert isinstance(error, ValueError) and "SAAR (multi_turn.enable_tool_rollback=True) cannot train" in str(error)
    assert named in str(error)


def test_filter_zero_advantage_samples_is_refused_when_on(dry_runs):
    [error] = dry_runs["filter_zero_advantage_on"]
    assert isinstance(error, ValueError) and "trainer.filter_zero_advantage_samples=True" in str(error)
    assert composed(dry_runs["filter_zero_advantage_off"])["trainer"]["filter_zero_advantage_samples"] is False


def test_an_untranslated_legacy_reward_key_is_refused_naming_the_new_key():
    config = compose("qwen3_4b_cleaner", ["+reward_model.reward_kwargs.overlong_buffer_cfg.len=1024"])
    with pytest.raises(ValueError) as raised:
        check(config)
    expected = "reward_model.reward_kwargs.overlong_buffer_cfg.len -> reward.reward_kwargs.overlong_buffer_cfg.len"
    assert expected in str(raised.value)


def test_user_overrides_are_translated_with_a_note_each():
    translated, notes = translate_overrides(
        [
            "+actor_rollout_ref.rollout.multi_turn.enable_tool_rollback=False",
            "+trainer.save_freq=5",
            "reward_model.reward_manager=dapo",
            "custom_reward_function.name=compute_score",
            "~trainer.logger",
            "trainer.test_freq=3",
        ]
    )
    assert translated == [
        "++actor_rollout_ref.rollout.multi_turn.enable_tool_rollback=False",
        "++trainer.save_freq=5",
        "++reward.custom_reward_function.name=compute_score",
        "~trainer.logger",
        "trainer.test_freq=3",
    ]
    assert len(notes) == 2 and "dropped, the recipe already uses verl's DAPO reward manager" in notes[0]


def test_a_config_without_reward_kwargs_passes():
    """verl's schema has no reward_kwargs under custom_reward_function: a config without them must pass."""
    check(compose("qwen3_4b_dapo_tool", ["~reward.custom_reward_function.reward_kwargs"]))


def test_the_cpu_configs_pass_the_checks_on_the_cpu_backend(dry_runs):
    train = composed(dry_runs["train_cpu"])
    assert (train["actor_rollout_ref"]["rollout"]["name"], train["trainer"]["device"]) == ("cpu", "cpu")
    assert train["actor_rollout_ref"]["rollout"]["multi_turn"]["enable_tool_rollback"] is True
    assert train["trainer"]["logger"] == ["console", "file", "wandb"]
    [evaluation] = dry_runs["eval_cpu"]
    assert (evaluation["actor_rollout_ref"]["rollout"]["name"], evaluation["trainer"]["val_only"]) == ("cpu", True)
    assert evaluation["data"]["max_prompt_length"] == 1024  # the platform's, over validation_only's 4096


def test_no_tool_evaluation_runs_single_turn(dry_runs):
    config = composed(dry_runs["eval_notool"])
    assert config["actor_rollout_ref"]["rollout"]["multi_turn"]["enable"] is False
    assert config["trainer"]["val_only"] is True


def _leaves(value, prefix: str = "") -> dict:
    if isinstance(value, dict):
        return {key: leaf for name, item in value.items() for key, leaf in _leaves(item, f"{prefix}.{name}").items()}
    return {prefix.lstrip("."): value}


# name -> (mode, the keys besides the mode and the run's name that it sets differently from qwen3_4b_cleaner)


def mini_batch(size: int) -> dict[str, int]:
    """The actor's ppo_mini_batch_size and verl's critic copy of it."""
    return {"actor_rollout_ref.actor.ppo_mini_batch_size": size, "critic.ppo_mini_batch_size": size}


PURIFICATION_RECIPES = {
    "qwen3_4b_no_purification": ("none", {}),
    "qwen3_4b_error_turn_mask": ("error_turn_mask", {}),
    "qwen3_4b_void_turn_filter": ("void_turn_filter", {}),
    "qwen3_4b_error_trajectory_filter": ("error_trajectory_filter", {}),
    "qwen3_4b_roc": ("roc", {"actor_rollout_ref.rollout.n": 32, **mini_batch(16)}),
    "qwen3_4b_roc_matched": ("roc", {"actor_rollout_ref.rollout.n": 32, **mini_batch(12), "data.train_batch_size": 96}),
}
# verl's copies of rollout.n (interpolated in ppo_trainer)
ROLLOUT_N_COPIES = ("actor_rollout_ref.actor.rollout_n", "actor_rollout_ref.ref.rollout_n", "critic.rollout_n")


@pytest.mark.parametrize("name", PURIFICATION_RECIPES)
def test_a_purification_recipe_shares_everything_but_its_mode_with_cleaner_4b(dry_runs, name):
    mode, differences = PURIFICATION_RECIPES[name]
    cleaner = _leaves(composed(dry_runs["qwen3_4b_cleaner"]))
    recipe = _leaves(composed(dry_runs[name]))
    mode_keys = {f"{MT}.{key}" for key in ("enable_tool_rollback", "rollback_in_validation", "purification")}
    mode_keys |= {
        f"{MT}.roc_{key}"
        for key in (
            "oversampling",
            "min_correct",
            "min_incorrect",
            "reject_equal_reward",
            "error_ratio",
            "answer_format",
        )
    }
    changed = {
        key: recipe.get(key)
        for key in cleaner.keys() | recipe.keys()
        if cleaner.get(key) != recipe.get(key) and key not in mode_keys | NAMES
    }
    for copy in ROLLOUT_N_COPIES:
        assert changed.pop(copy, recipe["actor_rollout_ref.rollout.n"]) == recipe["actor_rollout_ref.rollout.n"]
    assert changed == differences
    assert recipe[f"{MT}.purification"] == mode
    assert recipe[f"{MT}.enable_tool_rollback"] is False


def updates_per_step(config: dict) -> float:
    """verl's optimizer updates per step on the rows the actor trains: every row, or RoC's kept share of them."""
    rollout = config["actor_rollout_ref"]["rollout"]
    kept = config["data"]["train_batch_size"] * rollout["n"]
    if rollout["multi_turn"]["purification"] == "roc":
        kept //= rollout["multi_turn"]["roc_oversampling"]
    return kept / (config["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] * rollout["n"])


def test_roc_recipes_update_as_often_as_cleaner_4b(dry_runs):
    cleaner = updates_per_step(composed(dry_runs["qwen3_4b_cleaner"]))
    assert updates_per_step(composed(dry_runs["qwen3_4b_roc"])) == cleaner
    assert updates_per_step(composed(dry_runs["qwen3_4b_roc_matched"])) == cleaner


def test_roc_matched_samples_cleaner_4bs_rollouts_plus_saars_resample_share(dry_runs):
    """SAAR's resamples add about half again to CLEANER-4B's generated tokens (the recipe's comment): RoC-matched
    samples that many more rollouts per step."""

    def rollouts(config: dict) -> int:
        return config["data"]["train_batch_size"] * config["actor_rollout_ref"]["rollout"]["n"]

    ratio = rollouts(composed(dry_runs["qwen3_4b_roc_matched"])) / rollouts(composed(dry_runs["qwen3_4b_cleaner"]))
    assert ratio == 1.5


@pytest.mark.parametrize("name", [*TRAINING, "train_cpu", "eval_tools", "eval_notool"])
def test_ray_workers_environment_holds_no_interpolation(name):
    """main_ppo merges `ray_kwargs.ray_init.runtime_env` into a config of its own and hands it to `ray.init`
    unresolved, so a `${...}` there would reach every Ray worker as its literal text (an environment variable
    `JUDGE_URL` holding `${oc.env:JUDGE_URL,...}`); the top-level `ray_init` values are resolved."""
    config = compose(name, ["actor_rollout_ref.model.path=/m"])
    runtime_env = OmegaConf.to_container(config.ray_kwargs.ray_init.get("runtime_env") or OmegaConf.create({}))
    assert "${" not in repr(runtime_env)
