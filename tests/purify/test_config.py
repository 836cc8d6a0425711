"""`multi_turn.purification` and RoC's keys: parsing, refusals naming the key."""

from __future__ import annotations

import re

import pytest

from cleaner.purify.config import Purification, PurificationConfig, PurificationConfigError, saar_requested


def test_unset_purification_follows_enable_tool_rollback():
    assert PurificationConfig.from_multi_turn({}).mode is Purification.NONE
    assert PurificationConfig.from_multi_turn({"enable_tool_rollback": True}).mode is Purification.SAAR
    assert saar_requested({"purification": "saar"}) and saar_requested({"enable_tool_rollback": True})
    assert not saar_requested({"purification": "roc"})


@pytest.mark.parametrize("mode", list(Purification))
def test_every_mode_is_one_value(mode):
    assert PurificationConfig.from_multi_turn({"purification": mode.value}).mode is mode


def test_a_bad_value_is_refused_naming_the_key():
    with pytest.raises(PurificationConfigError, match=r"multi_turn\.purification must be one of .*got 'rock'"):
        PurificationConfig.from_multi_turn({"purification": "rock"})


@pytest.mark.parametrize("mode", ["none", "roc", "error_turn_mask"])
def test_a_mode_other_than_saar_with_rollback_is_refused(mode):
    with pytest.raises(PurificationConfigError, match=f"purification={mode} contradicts .*enable_tool_rollback"):
        PurificationConfig.from_multi_turn({"purification": mode, "enable_tool_rollback": True})


def test_saar_with_rollback_is_the_same_thing():
    config = PurificationConfig.from_multi_turn({"purification": "saar", "enable_tool_rollback": True})
    assert config.mode is Purification.SAAR


@pytest.mark.parametrize(
    ("values", "n", "message"),
    [
        ({}, 6, r"rollout\.n=6 must be a multiple of .*roc_oversampling=4"),
        ({}, 4, "keeps .* = 1 rollout per prompt"),
        ({"roc_min_correct": 2, "roc_min_incorrect": 1}, 8, "exceeds the kept group size 2"),
        # 12 cut to 3 with 6 correct: round(1.5) + round(1.5) = 4 (rStar's code asserts the shares add up)
        ({}, 12, r"do not add up to the kept group size 3 when 6 correct of 12 keeps 4"),
    ],
)
def test_roc_refuses_groups_it_cannot_cut(values, n, message):
    config = PurificationConfig(purification=Purification.ROC, roc_oversampling=4, **values)
    assert any(re.search(message, problem) for problem in config.roc_problems(n))


def test_roc_follows_rstar2_agents_script_unless_told_otherwise():
    config = PurificationConfig.from_multi_turn({"purification": "roc"})
    assert (config.roc_reject_equal_reward, config.roc_error_ratio, config.roc_answer_format) == (True, True, True)
    config = PurificationConfig.from_multi_turn({"purification": "roc", "roc_reject_equal_reward": False})
    assert config.roc_reject_equal_reward is False
    with pytest.raises(PurificationConfigError, match="roc_error_ratio must be true or false"):
        PurificationConfig.from_multi_turn({"purification": "roc", "roc_error_ratio": "yes"})


def test_roc_accepts_n_as_a_multiple_of_the_ratio():
    assert PurificationConfig(purification=Purification.ROC).roc_problems(8) == []
    assert PurificationConfig(purification=Purification.ROC).kept_group_size(8) == 4


def test_roc_keys_must_be_integers():
    with pytest.raises(PurificationConfigError, match="roc_oversampling must be an integer"):
        PurificationConfig.from_multi_turn({"purification": "roc", "roc_oversampling": 2.5})
