"""Helpers shared by the tests (not shipped with the package; benchmarks do not import them).

- `scripted_llm`: a scripted stand-in for verl's LLM server, a scripted Python tool, agent-loop set-up;
- `saar_script`: the scripted SAAR trajectories the agent-loop tests share (codes, turns, messages);
- `cli`: `run_cli`, the `cleaner` command in-process.
"""
