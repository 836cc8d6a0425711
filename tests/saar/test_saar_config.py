import pytest

from cleaner.saar.config import SaarConfig, SaarConfigError
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
    ],
)
def test_invalid_settings_fail_with_a_message_naming_the_key(overrides, message):
    with pytest.raises(SaarConfigError, match=message):
        SaarConfig.from_multi_turn(overrides)
