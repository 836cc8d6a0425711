"""verl's own trainer on a CPU-only machine: a `cpu` platform, FSDP engines for device `cpu`, a transformers
rollout backend (`cpu`) with verl's weight sync, and two guarded patches.

`verl_cpu.plugin` registers them with verl when `VERL_PLATFORM=cpu` (README.md); importing this package alone
imports nothing from verl or torch.
"""

PLATFORM_NAME = "cpu"
