"""verl's FSDP training engines, registered for device `cpu` too.

verl picks a training engine by (model type, backend, device); its FSDP engines are registered for `cuda` and
`npu` only, although FSDP2 runs on CPU over gloo. This adds the same classes under `cpu` through verl's
own `EngineRegistry.register`, without changing them.
"""

from __future__ import annotations

from verl.workers.engine.base import EngineRegistry
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

CPU_DEVICE = "cpu"
FSDP_BACKENDS = ["fsdp", "fsdp2"]


def register_fsdp_engines() -> None:
    for model_type, engine in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        if CPU_DEVICE not in EngineRegistry._engines.get(model_type, {}).get("fsdp2", {}):
            EngineRegistry.register(model_type=model_type, backend=FSDP_BACKENDS, device=CPU_DEVICE)(engine)
