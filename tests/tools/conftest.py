"""Fixtures of the tool tests."""

from tool_fake_judge import fake_judge  # noqa: F401  (a pytest fixture)
