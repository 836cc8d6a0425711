"""Options and data-source routing of compute_score, and loading it through verl's own reward loader."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest

import cleaner.rewards
from cleaner.rewards import RewardConfig, RewardKind, compute_score, reward_kind

REWARDS_INIT = Path(cleaner.rewards.__file__)
MATH_REPLY = "<think>\nhalf\n</think>\n\nThe answer is \\boxed{\\frac{1}{2}}."


@pytest.mark.parametrize(
    "source, kind",
    [
        ("math_dapo", RewardKind.MATH),
        ("AIME2024", RewardKind.MATH),
        ("train-math-numinamath1.5_cn_contest", RewardKind.MATH),
        ("mega-science", RewardKind.MATH),
        ("gpqa_diamond", RewardKind.GPQA),
        ("LiveCodeBench_v6", RewardKind.CODE),
        ("train-code-taco-hard", RewardKind.CODE),
        ("test-code-leetcode-easy", RewardKind.CODE),
    ],
)
def test_known_sources_route_to_their_scorer(source, kind):
    assert reward_kind(source) is kind


def test_unknown_source_is_a_configuration_error_unless_mapped():
    with pytest.raises(ValueError, match="no reward for data_source 'my_quiz'.*data_sources"):
        reward_kind("my_quiz")
    assert reward_kind("my_quiz", {"my_quiz": "gpqa"}) is RewardKind.GPQA
    with pytest.raises(ValueError, match="maps 'my_quiz' to 'essay'"):
        reward_kind("my_quiz", {"my_quiz": "essay"})


def test_the_error_names_default_source_which_scores_unknown_sources_as_the_reference_did():
    with pytest.raises(ValueError, match="or set default_source=math to score every unknown source as math"):
        reward_kind("my_quiz")
    assert reward_kind("my_quiz", default_source="math") is RewardKind.MATH
    assert reward_kind("my_quiz", {"my_quiz": "gpqa"}, default_source="math") is RewardKind.GPQA
    assert reward_kind("train-code-x", default_source="math") is RewardKind.CODE  # known sources keep their scorer


async def test_default_source_math_scores_an_unknown_source_like_a_math_row():
    from cleaner.rewards import compute_score

    reply = "<think>\n2 + 2\n</think>\n\nThe answer is \\boxed{4}."
    result = await compute_score("my_quiz", reply, "4", default_source="math", math_equivalence="strict")
    assert (result["score"], result["acc"]) == (1.0, True)
    with pytest.raises(ValueError, match="default_source=math"):
        await compute_score("my_quiz", reply, "4")
    with pytest.raises(ValueError, match="default_source must be one of"):
        await compute_score("my_quiz", reply, "4", default_source="essay")


def test_options_are_validated_and_verl_routing_kwargs_ignored():
    config = RewardConfig.from_kwargs({"math_equivalence": "strict", "reward_router_address": None})
    assert config.math_equivalence == "strict"
    with pytest.raises(ValueError, match=r"unknown reward option\(s\) \['math_mode'\]"):
        RewardConfig.from_kwargs({"math_mode": "strict"})
    with pytest.raises(ValueError, match="code_scoring must be one of"):
        RewardConfig(code_scoring="best")
    with pytest.raises(ValueError, match="math_workers"):
        RewardConfig(math_workers=0)
    with pytest.raises(ValueError, match="math_workers must be int, got '2'"):
        RewardConfig.from_kwargs({"math_workers": "2"})


@pytest.mark.slow  # the first call of each reward kind starts its workers: seconds
async def test_every_result_has_the_same_keys_so_verl_can_concatenate_batches():
    math = await compute_score("math_dapo", MATH_REPLY, "0.5")
    gpqa = await compute_score("gpqa_diamond", "no box", "A")
    code = await compute_score("train-code-taco-easy", "no code", {"inputs": ["1"], "outputs": ["1"]})
    assert list(math) == list(gpqa) == list(code)
    assert {type(v) for v in (math["acc"], gpqa["acc"], code["acc"])} == {bool}


def _verl_config(path: str, **reward_kwargs):
    """verl's own trainer config (hydra compose of ppo_trainer.yaml) pointing at our reward."""
    from cleaner.verl.trainer_config import compose_trainer_config

    overrides = [f"reward.custom_reward_function.path={path}", "reward.custom_reward_function.name=compute_score"]
    overrides += [f"+reward.custom_reward_function.reward_kwargs.{k}={v}" for k, v in reward_kwargs.items()]
    return compose_trainer_config(overrides)


@pytest.mark.parametrize("path", [str(REWARDS_INIT), "pkg://cleaner.rewards"])
def test_verl_loads_the_async_reward_by_file_or_package_path_with_reward_kwargs(path):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    reward_fn = get_custom_reward_fn(_verl_config(path, math_equivalence="strict"))
    assert inspect.iscoroutinefunction(reward_fn)  # so verl's reward managers await it instead of using a thread
    result = asyncio.run(reward_fn(data_source="math_dapo", solution_str=MATH_REPLY, ground_truth="0.5", extra_info={}))
    assert result["reason"] == "wrong_answer"  # strict: "\frac{1}{2}" is not the string "0.5"
    result = asyncio.run(reward_fn(data_source="math_dapo", solution_str=MATH_REPLY, ground_truth="\\frac{1}{2}"))
    assert result["acc"] is True


def _half_of_one_batch(tokenizer, reply: str, **non_tensors):
    """A verl batch of one real Qwen3 trajectory: AIME2025 question "Half of one?" (gold 1/2), answered `reply`.

    `non_tensors` adds per-row fields (`extra_info`, `tool_extra_fields`) to the row.
    """
    import numpy as np
    import torch
    from verl import DataProto

    messages = [{"role": "user", "content": "Half of one?"}, {"role": "assistant", "content": reply}]
    prompt = tokenizer.apply_chat_template(messages[:1], tokenize=True, add_generation_prompt=True, return_dict=False)
    full = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)
    return DataProto.from_dict(
        tensors={
            "prompts": torch.tensor([prompt]),
            "responses": torch.tensor([full[len(prompt) :]]),
            "attention_mask": torch.ones(1, len(full), dtype=torch.long),
        },
        non_tensors={
            "data_source": np.array(["AIME2025"], dtype=object),
            "reward_model": np.array([{"ground_truth": "\\frac{1}{2}"}], dtype=object),
            **{key: np.array([value], dtype=object) for key, value in non_tensors.items()},
        },
    )


def test_verl_naive_reward_manager_scores_a_real_qwen3_trajectory(qwen3_tokenizer):
    """The full verl path: token ids -> verl's decode -> our compute_score -> reward_score + reward_extra_info."""
    from verl.trainer.ppo.reward import load_reward_manager

    reply = "<think>\nmaybe \\boxed{2}\n</think>\n\nThe answer is \\boxed{0.5}."

    async def score_one() -> dict:
        manager = load_reward_manager(_verl_config(str(REWARDS_INIT)), qwen3_tokenizer)
        return await manager.run_single(_half_of_one_batch(qwen3_tokenizer, reply, extra_info={}))

    output = asyncio.run(score_one())
    assert output["reward_score"] == 1.0
    assert output["reward_extra_info"]["pred"] == "0.5" and output["reward_extra_info"]["acc"] is True


async def test_saar_statistics_in_extra_info_are_returned_with_the_score_and_provenance_is_not():
    from cleaner.saar.stats import EXTRA_FIELD_KEYS, SCALAR_EXTRA_FIELD_KEYS, TrajectoryStats

    stats = TrajectoryStats(rollback_enabled=1, tool_calls=3, rollbacks_recovered=1).to_extra_fields()
    result = await compute_score("math_dapo", MATH_REPLY, "0.5", extra_info={"index": 7, **stats})
    assert result["acc"] is True
    assert {key: result[key] for key in SCALAR_EXTRA_FIELD_KEYS} == {key: stats[key] for key in SCALAR_EXTRA_FIELD_KEYS}
    assert not set(EXTRA_FIELD_KEYS[-2:]) & set(result)  # spans and events are lists: not reward columns
    assert "index" not in result
    plain = await compute_score("math_dapo", MATH_REPLY, "0.5", extra_info={"index": 7})
    assert not any(key.startswith("saar_") for key in plain)


def test_cleaner_dapo_manager_hands_the_agent_loops_statistics_to_the_reward(qwen3_tokenizer):
    """verl's DAPO manager drops `tool_extra_fields`; ours passes them on, so SAAR columns reach the dumps."""
    from verl.trainer.ppo.reward import load_reward_manager

    from cleaner.saar.stats import TrajectoryStats
    from cleaner.verl.reward_manager import CleanerDAPORewardManager

    stats = TrajectoryStats(
        rollback_enabled=1, tool_calls=2, rollbacks_triggered=1, rollbacks_recovered=1
    ).to_extra_fields()
    config = _verl_config(str(REWARDS_INIT))
    config.reward.reward_manager.source = "importlib"
    config.reward.reward_manager.name = "CleanerDAPORewardManager"
    config.reward.reward_manager.module.path = "pkg://cleaner.verl.reward_manager"
    data = _half_of_one_batch(
        qwen3_tokenizer, "The answer is \\boxed{0.5}.", extra_info={"index": 0}, tool_extra_fields=stats
    )

    async def score_one() -> dict:
        manager = load_reward_manager(config, qwen3_tokenizer)
        assert isinstance(manager, CleanerDAPORewardManager)
        return await manager.run_single(data)

    output = asyncio.run(score_one())
    assert output["reward_score"] == 1.0
    info = output["reward_extra_info"]
    assert (info["saar_tool_calls"], info["saar_rollbacks_recovered"], info["saar_rollback_enabled"]) == (2, 1, 1)
