"""Evaluation: pass@k / maj@k tables from generation dumps, LiveCodeBench export and judge scoring."""
