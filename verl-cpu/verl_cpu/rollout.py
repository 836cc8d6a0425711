"""The `cpu` rollout backend: a verl `RolloutReplica` and its in-trainer `BaseRollout` adapter.

verl 0.9.1 runs rollouts only through servers (vLLM, SGLang, TensorRT-LLM). This backend plugs a CPU
server into the same two registries those use:

- `RolloutReplicaRegistry["cpu"]` -> `CpuRolloutReplica`: in HYBRID mode (the trainer's workers
  hold the actor) it starts one `CpuGenerationServer` actor next to the replica's worker and hands its
  handle to verl's load balancer, which routes the agent loops' `generate()` calls to it.
- `_ROLLOUT_REGISTRY[("cpu", "async")]` -> `CpuServerAdapter`: built inside each trainer worker
  (`ActorRolloutRefWorker.init_model`); verl's naive checkpoint engine calls its `update_weights` with the
  actor's full parameters after every step, and it forwards them to the server.

Select it with `actor_rollout_ref.rollout.name=cpu` (and `checkpoint_engine.backend=naive`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

import ray
import torch
from verl.workers.rollout.base import _ROLLOUT_REGISTRY, BaseRollout
from verl.workers.rollout.replica import RolloutMode, RolloutReplica, RolloutReplicaRegistry

# A module reference, not names: a Ray worker that unpickles the server class imports `server`, whose
# `import verl` imports the plugin, which imports this module while `server` is still half-initialised.
from . import server as server_module

logger = logging.getLogger(__name__)

ROLLOUT_NAME = "cpu"
# Weights travel to the server in buckets of about this size: verl's engine yields one full tensor at a time,
# and sending them all at once would hold a second copy of the model in the trainer and in Ray's object store.
WEIGHT_BUCKET_BYTES = 256 << 20


def server_actor_name(replica_rank: int) -> str:
    return f"verl_cpu_rollout_server_{replica_rank}"


class CpuRolloutReplica(RolloutReplica):
    """One CPU rollout replica: a generation server actor on the node of its trainer worker."""

    def server_class(self) -> type:
        """The generation server actor class (a scripted server in tests)."""
        return server_module.CpuGenerationServer

    async def launch_servers(self) -> None:
        if self.rollout_mode != RolloutMode.HYBRID:
            raise NotImplementedError(
                f"the {ROLLOUT_NAME} rollout runs only in hybrid mode (trainer and rollout share the worker); "
                f"got {self.rollout_mode}: keep actor_rollout_ref.hybrid_engine=True"
            )
        if self.world_size != 1:
            raise ValueError(
                f"the {ROLLOUT_NAME} rollout has no tensor/data/pipeline parallelism: set "
                "actor_rollout_ref.rollout.tensor_model_parallel_size=1 (and data/pipeline sizes 1)"
            )
        node_id = await self.workers[0].__ray_call__.remote(lambda worker: ray.get_runtime_context().get_node_id())
        server = (
            ray.remote(self.server_class())
            .options(
                name=server_actor_name(self.replica_rank),
                num_cpus=0,  # it computes only while the trainer worker waits for the rollout
                scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                    node_id=node_id, soft=False
                ),
                max_concurrency=self.max_concurrency,
            )
            .remote(
                config=self.config,
                model_config=self.model_config,
                replica_rank=self.replica_rank,
                max_batch_size=self.config.max_num_seqs,
            )
        )
        await server.launch.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{ROLLOUT_NAME}-{self.replica_rank}"


class CpuServerAdapter(BaseRollout):
    """Trainer-side end of the CPU rollout: forwards the actor's weights to this rank's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        # One trainer rank per replica (world size 1, see CpuRolloutReplica.launch_servers).
        self.replica_rank = int(os.environ["RANK"]) if replica_rank == -1 else replica_rank
        self._dtype = server_module.rollout_dtype(self.config.dtype)
        self._server: ray.actor.ActorHandle | None = None

    def _server_handle(self) -> ray.actor.ActorHandle:
        # The server starts after the trainer workers, so look it up on first use.
        if self._server is None:
            self._server = ray.get_actor(server_actor_name(self.replica_rank))
        return self._server

    async def update_weights(
        self, weights: Iterable[tuple[str, torch.Tensor]], wire_format: str = "named_tensors", **kwargs: Any
    ) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the {ROLLOUT_NAME} rollout takes full named tensors, not {wire_format!r}")
        if kwargs.get("peft_config") is not None:
            raise NotImplementedError(f"the {ROLLOUT_NAME} rollout takes merged weights: set model.lora.merge=True")
        server = self._server_handle()
        await server.begin_weight_update.remote()
        try:
            bucket: dict[str, torch.Tensor] = {}
            bucket_bytes = 0
            for name, tensor in weights:
                bucket[name] = tensor.detach().to("cpu", self._dtype).contiguous()
                bucket_bytes += bucket[name].numel() * bucket[name].element_size()
                if bucket_bytes >= WEIGHT_BUCKET_BYTES:
                    await server.load_weights.remote(bucket)
                    bucket, bucket_bytes = {}, 0
            if bucket:
                await server.load_weights.remote(bucket)
        except BaseException as exc:
            await server.abort_weight_update.remote(f"{type(exc).__name__}: {exc}")
            raise
        await server.finish_weight_update.remote(kwargs.get("global_steps"))

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None


def register(name: str = ROLLOUT_NAME, replica_class: type[RolloutReplica] = CpuRolloutReplica) -> None:
    """Add a CPU backend to verl's replica registry and its server-adapter table under `name`."""
    RolloutReplicaRegistry.register(name, lambda: replica_class)
    _ROLLOUT_REGISTRY[(name, "async")] = f"{CpuServerAdapter.__module__}.{CpuServerAdapter.__qualname__}"
