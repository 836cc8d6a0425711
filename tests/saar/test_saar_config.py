from dataclasses import fields

import pytest

from cleaner.saar.config import CONFIG_KEYS, SaarConfig, SaarConfigError
from cleaner.saar.outcome import MODEL_ERROR_CATEGORIES, ErrorCategory


def test_defaults_match_the_reference_and_paper():
    config = SaarConfig.from_multi_turn({})
    assert config.enable_tool_rollback is False
    assert config.max_tool_retries == 3
    assert config.rollback_probability == 1.0
    assert config.rollback_similarity_threshold == 0.5
    assert config.rollback_similarity == "difflib"
    assert config.rollback_in_validation is False
    assert config.rollback_on_errors == MODEL_ERROR_CATEGORIES
    assert (config.save_negative_samples, config.max_negative_samples_per_group) == (False, 1)
    assert (config.rollback_exhausted_keep, config.drop_infra_error_trajectories) == ("last", False)
    # off-policy spans: the paper's behaviour (replace, nothing scored, roll back from the first failure)
    assert (config.rollback_is_threshold, config.rollback_is_measure, config.rollback_is_correction) == (
        None,
        False,
        False,
    )
    assert config.rollback_after_errors == 1 and not config.scores_splices
    assert config.rollback_is_statistic == "sequence"  # the reference's design note: the sequence sum


# A valid value other than the default for every field: a new field without one here fails the test below.
NON_DEFAULT = {
    "enable_tool_rollback": True,
    "max_tool_retries": 2,
    "rollback_probability": 0.7,
    "rollback_similarity_threshold": 0.8,
    "rollback_similarity": "token",
    "rollback_in_validation": True,
    "rollback_on_errors": ["timeout"],
    "rollback_seed": 11,
    "save_negative_samples": True,
    "max_negative_samples_per_group": 0,
    "rollback_exhausted_keep": "all",
    "drop_infra_error_trajectories": True,
    "rollback_is_threshold": 0.5,
    "rollback_is_statistic": "token_mean",
    "rollback_is_measure": True,
    "rollback_is_max_concurrent_scoring": 2,
    "rollback_is_shallow_span": "turn",
    "rollback_is_correction": True,
    "rollback_after_errors": 2,
}


def test_every_field_is_a_multi_turn_key_and_is_read():
    assert CONFIG_KEYS == tuple(spec.name for spec in fields(SaarConfig))
    missing = [key for key in CONFIG_KEYS if key not in NON_DEFAULT]
    assert not missing, f"add a non-default value for {missing} to NON_DEFAULT"
    config = SaarConfig.from_multi_turn(NON_DEFAULT)
    for key, value in NON_DEFAULT.items():
        got = getattr(config, key)
        assert (got == (ErrorCategory.TIMEOUT,)) if key == "rollback_on_errors" else (got == value), key


def test_reads_reference_override_keys_and_ignores_verl_keys():
    config = SaarConfig.from_multi_turn(
        {
            "enable": True,
            "format": "hermes",
            "enable_tool_rollback": True,
            "max_tool_retries": 2,
            "rollback_probability": 0.7,
            "rollback_on_errors": ["exception", "timeout"],
            "rollback_seed": 7,
        }
    )
    assert (config.enable_tool_rollback, config.max_tool_retries, config.rollback_probability) == (True, 2, 0.7)
    assert config.rollback_on_errors == (ErrorCategory.EXCEPTION, ErrorCategory.TIMEOUT)
    assert config.rollback_seed == 7


def test_reads_an_omegaconf_section():
    from omegaconf import OmegaConf

    section = OmegaConf.create(
        {"enable_tool_rollback": True, "rollback_on_errors": ["syntax_error"], "max_tool_retries": None}
    )
    config = SaarConfig.from_multi_turn(section)
    assert config.rollback_on_errors == (ErrorCategory.SYNTAX_ERROR,)
    assert config.max_tool_retries == 3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_tool_retries": -1}, "max_tool_retries"),
        ({"max_tool_retries": 1.5}, "max_tool_retries"),
        ({"rollback_probability": 1.5}, "rollback_probability"),
        ({"rollback_probability": "0.5"}, "rollback_probability"),
        ({"rollback_similarity_threshold": -0.1}, "rollback_similarity_threshold"),
        ({"rollback_similarity": "cosine"}, "rollback_similarity"),
        ({"enable_tool_rollback": "yes"}, "enable_tool_rollback"),
        ({"rollback_on_errors": []}, "at least one"),
        ({"rollback_on_errors": "exception"}, "list"),
        ({"rollback_on_errors": ["queue_timeout"]}, "infrastructure error"),
        ({"rollback_on_errors": ["NameError"]}, "only labels"),
        ({"rollback_on_errors": ["segfault"]}, "unknown category"),
        ({"rollback_exhausted_keep": "first"}, "rollback_exhausted_keep"),
        ({"drop_infra_error_trajectories": "yes"}, "drop_infra_error_trajectories"),
        ({"save_negative_samples": 1}, "save_negative_samples"),
        ({"max_negative_samples_per_group": -1}, "max_negative_samples_per_group"),
        ({"rollback_is_threshold": 0.0}, "rollback_is_threshold"),
        ({"rollback_is_threshold": -1.0}, "rollback_is_threshold"),
        ({"rollback_is_threshold": float("inf")}, "rollback_is_threshold"),
        ({"rollback_is_threshold": "0.5"}, "rollback_is_threshold"),
        ({"rollback_is_measure": "yes"}, "rollback_is_measure"),
        ({"rollback_is_max_concurrent_scoring": 0}, "rollback_is_max_concurrent_scoring"),
        ({"rollback_is_shallow_span": "reasoning", "rollback_is_measure": True}, "rollback_is_shallow_span must be"),
        ({"rollback_is_shallow_span": "turn"}, "without rollback_is_threshold or rollback_is_measure"),
        ({"rollback_is_statistic": "mean"}, "rollback_is_statistic must be one of"),
        ({"rollback_is_statistic": 1}, "rollback_is_statistic"),
        ({"rollback_is_statistic": "token_mean", "rollback_is_measure": True}, "without rollback_is_threshold"),
        ({"rollback_is_correction": 1}, "rollback_is_correction"),
        ({"rollback_after_errors": 0}, "rollback_after_errors"),
        ({"rollback_after_errors": 1.5}, "rollback_after_errors"),
    ],
)
def test_invalid_settings_fail_with_a_message_naming_the_key(overrides, message):
    with pytest.raises(SaarConfigError, match=message):
        SaarConfig.from_multi_turn(overrides)


@pytest.mark.parametrize("key", ["rollback_is_threshold", "rollback_is_measure"])
def test_either_off_policy_key_asks_for_scored_splices(key):
    value = 0.5 if key == "rollback_is_threshold" else True
    assert SaarConfig.from_multi_turn({key: value}).scores_splices
