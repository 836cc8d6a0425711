"""The CPU pieces live in the verl-cpu package: an old `cleaner.verl.cpu.*` path fails naming the new one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("old", "new"),
    [("plugin", "verl_cpu.plugin"), ("generation", "verl_cpu.decoding"), ("ray_cleanup", "verl_cpu.ray_cleanup")],
)
def test_an_old_module_path_raises_an_import_error_naming_the_new_one(old, new):
    with pytest.raises(ImportError, match=f"cleaner.verl.cpu.{old} moved to the verl-cpu package: use {new}"):
        __import__(f"cleaner.verl.cpu.{old}")


def test_the_smoke_data_stays_importable():
    from cleaner.verl.cpu import smoke_data

    assert callable(smoke_data.write_smoke_data)


@pytest.mark.slow
def test_an_old_plugin_override_stops_verl_with_the_new_path():
    env = {key: value for key, value in os.environ.items() if not key.startswith("VERL_")}
    env.update(VERL_PLATFORM="cpu", VERL_USE_EXTERNAL_MODULES="cleaner.verl.cpu.plugin")
    result = subprocess.run([sys.executable, "-c", "import verl"], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode != 0
    assert "cleaner.verl.cpu.plugin moved to the verl-cpu package: use verl_cpu.plugin" in result.stderr
