"""Helpers shared by the tests and benchmarks (not shipped with the package)."""
