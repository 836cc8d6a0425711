from __future__ import annotations

import pytest

from code_judge.settings import MIB, JudgeSettings, SettingsError


def test_upstream_environment_variables_are_read():
    settings = JudgeSettings.from_env(
        {
            "REDIS_URI": "redis://10.0.0.5:6379/0",
            "MAX_EXECUTION_TIME": "4",
            "MAX_MEMORY": "512",
            "MAX_FILE_SIZE_MB": "",  # empty means unset, as in a shell `MAX_FILE_SIZE_MB= code-judge ...`
            "MAX_WORKERS": "7",
            "MAX_STDOUT_ERROR_LENGTH": "50",
            "PRELOAD_MODULES": "math, numpy",
        }
    )
    assert settings.redis_uri == "redis://10.0.0.5:6379/0"
    assert settings.max_execution_time == 4.0
    assert settings.max_workers == 7
    assert settings.max_stdout_error_length == 50
    assert settings.preload_modules == ("math", "numpy")
    assert settings.limits.memory_bytes == 512 * MIB
    assert settings.limits.wall_time_s == settings.limits.cpu_time_s == 4.0


def test_no_redis_uri_means_embedded_redis():
    assert JudgeSettings.from_env({}).redis_uri is None


@pytest.mark.parametrize(
    ("name", "value"),
    [("MAX_EXECUTION_TIME", "ten"), ("MAX_WORKERS", "0"), ("MAX_QUEUE_LENGTH", "-1"), ("MAX_WORKERS", "2.5")],
)
def test_bad_values_name_the_variable(name, value):
    with pytest.raises(SettingsError, match=name):
        JudgeSettings.from_env({name: value})


def test_heartbeat_timeout_must_leave_room_for_missed_beats():
    with pytest.raises(SettingsError, match="WORKER_HEARTBEAT_TIMEOUT"):
        JudgeSettings(worker_heartbeat_interval=1.0, worker_heartbeat_timeout=1.5)


def test_cpu_budget_and_slots_are_read_and_checked():
    settings = JudgeSettings.from_env(
        {"MAX_EXECUTION_TIME": "10", "MAX_CPU_TIME": "2.5", "WORKER_SLOTS": "8", "STARVED_CPU_SHARE": "0.05"}
    )
    assert (settings.limits.wall_time_s, settings.limits.cpu_time_s) == (10.0, 2.5)
    assert settings.worker_slots == 8 and settings.starved_cpu_share == 0.05
    with pytest.raises(SettingsError, match="WORKER_SHORT_SLOTS"):
        JudgeSettings(worker_slots=2, worker_short_slots=3)
    with pytest.raises(SettingsError, match="DEMOTED_NICE"):
        JudgeSettings.from_env({"DEMOTED_NICE": "-5"})
    with pytest.raises(SettingsError, match="MAX_CPU_TIME"):
        JudgeSettings.from_env({"MAX_CPU_TIME": "0"})
