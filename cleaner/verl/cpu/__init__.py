"""verl on a CPU-only machine: a `cpu` platform, the `cleaner_cpu` rollout backend and the CPU patches.

`cleaner.verl.cpu.plugin` registers them with verl (docs/train-cpu.md); importing this package alone
imports nothing from verl.
"""
