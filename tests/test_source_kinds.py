"""One data-source classifier: data preparation and the reward agree on every source."""

from __future__ import annotations

import pytest

from cleaner.data.sources import is_code_source, rule_for
from cleaner.rewards import RewardKind, reward_kind
from cleaner.source_kinds import TaskKind, source_rule

SOURCES = {
    "math_dapo": (TaskKind.MATH, RewardKind.MATH, True),
    "mega-science": (TaskKind.MATH, RewardKind.MATH, True),
    "train-math-numinamath1.5_cn_contest": (TaskKind.MATH, RewardKind.MATH, True),
    "train-math-aime19832023": (TaskKind.MATH, RewardKind.MATH, True),
    "AIME2024": (TaskKind.AIME, RewardKind.MATH, False),
    "AIME2025": (TaskKind.AIME, RewardKind.MATH, False),
    "gpqa_diamond": (TaskKind.GPQA, RewardKind.GPQA, False),
    "LiveCodeBench_v6": (TaskKind.LCB, RewardKind.CODE, False),
    "train-code-taco-hard": (TaskKind.CODE, RewardKind.CODE, False),
    "test-code-leetcode-easy": (TaskKind.CODE, RewardKind.CODE, False),
    "demo-math": (TaskKind.MATH, RewardKind.MATH, False),
}


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_data_preparation_and_reward_classify_alike(source):
    kind, reward, numeric = SOURCES[source]
    rule = rule_for(source)
    assert (rule.kind, rule.numeric_answer) == (kind, numeric)
    assert reward_kind(source) is reward
    assert is_code_source(source) is (reward is RewardKind.CODE)


def test_an_unknown_source_is_unknown_to_both():
    assert source_rule("my_quiz") is None
    with pytest.raises(ValueError, match="unknown data_source 'my_quiz'"):
        rule_for("my_quiz")
    with pytest.raises(ValueError, match="no reward for data_source 'my_quiz'"):
        reward_kind("my_quiz")
