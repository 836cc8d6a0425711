"""Fixtures shared by the tests that run the real demo model."""

from __future__ import annotations

import pytest

from cleaner.models.model_assets import resolve_model_path


@pytest.fixture(scope="session")
def gguf():
    """Path of the demo GGUF (Qwen2.5-Coder-0.5B-Instruct) that `make setup` assembles."""
    try:
        return resolve_model_path(None)
    except FileNotFoundError as exc:
        pytest.fail(f"demo model unavailable ({exc}); `make setup` installs it")
