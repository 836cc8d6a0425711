"""Negative samples and the DPO-style tool-call advantage (the CLEANER paper's ablation; off by default).

- `estimator`: `grpo_tool_dpo` and `dapo_tool_dpo`, registered with verl's advantage-estimator registry when
  that module is imported (the cleaner verl plugin imports it, so every process that imports verl has them);
- `hooks`: the v1 trainer hook that gives them the old log-probs and the pairing (installed by the cleaner
  agent-loop manager);
- `negative_outputs`: the agent loop's extra outputs, one per kept negative;
- `settings` / `checks`: the config keys and their config-time checks (verl-free).

docs/negative-samples.md describes the whole feature. This package module imports nothing, so the verl-free
parts can be imported without verl.
"""
