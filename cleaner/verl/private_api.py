"""The private verl 0.9.1 methods cleaner wraps or overrides, and the check that the installed verl still has them.

verl has no extension point for what cleaner adds (trainer metrics, a validate flag per trajectory, SAAR
inside the tool loop), so cleaner wraps or overrides these methods. A verl upgrade that renames one, or
changes its parameters, would otherwise fail obscurely at training time (or silently log nothing):
`verl_api_problems()` names each difference, `require_verl_api()` raises with all of them, and the trainer
hooks call it before wrapping anything. Where a wrapper also reads instance attributes of verl's object, those are
listed with the method and checked in verl's source: each must be assigned (`self.<name> = ...`) in its class's
`__init__`.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass

import verl

PINNED_VERL = "0.9.1"


@dataclass(frozen=True)
class PrivateMethod:
    module: str
    qualname: str  # "Class.method" or a module-level function
    parameters: tuple[str, ...]  # the leading parameter names cleaner relies on, in order
    used_by: str  # what in cleaner depends on it
    attributes: tuple[str, ...] = ()  # instance attributes of the method's class that the wrapper reads
    # Where the wrapper hands the method a stand-in for its `batch` argument: the only `batch.<name>` and
    # `batch.<name>["<key>"]` accesses its source may make, as "name" or "name[key]".
    batch_reads: tuple[str, ...] = ()


PRIVATE_METHODS: tuple[PrivateMethod, ...] = (
    # trainer metric hooks (cleaner.verl.trainer_metrics)
    PrivateMethod("verl.trainer.ppo.ray_trainer", "compute_data_metrics", ("batch", "use_critic"), "trainer_metrics"),
    PrivateMethod("verl.trainer.ppo.ray_trainer", "extract_reward", ("batch",), "trainer_metrics"),
    PrivateMethod("verl.trainer.ppo.ray_trainer", "RayPPOTrainer._validate", ("self", "merged"), "trainer_metrics"),
    PrivateMethod(
        "verl.trainer.ppo.v1.trainer_base",
        "PPOTrainer._compute_metrics",
        ("self", "batch", "metrics", "timing_raw", "global_steps", "epoch"),
        "trainer_metrics",
    ),
    PrivateMethod("verl.trainer.ppo.v1.trainer_base", "PPOTrainer._validate", ("self",), "trainer_metrics"),
    PrivateMethod(
        "verl.trainer.ppo.v1.replay_buffer",
        "ReplayBuffer.sample",
        ("self", "global_steps", "partition_id", "batch_size"),
        "trainer_metrics (v1 validation rows)",
    ),
    # the validate flag handed to the agent loop (cleaner.verl.agent_loop_manager)
    PrivateMethod(
        "verl.experimental.agent_loop.agent_loop",
        "AgentLoopWorker._run_agent_loop",
        ("self", "sampling_params", "trajectory"),
        "agent_loop_manager",
    ),
    PrivateMethod(
        "verl.trainer.ppo.v1.agent_loop_tq",
        "AgentLoopWorkerTQ.__ray_actor_class__._run_agent_loop",
        ("self", "sampling_params", "trajectory"),
        "agent_loop_manager",
    ),
    # the saar_* columns on every trajectory (cleaner.verl.agent_loop_manager)
    PrivateMethod(
        "verl.experimental.agent_loop.agent_loop",
        "AgentLoopWorker._agent_loop_postprocess",
        ("self", "output", "validate"),
        "agent_loop_manager",
    ),
    PrivateMethod(
        "verl.trainer.ppo.v1.agent_loop_tq",
        "AgentLoopWorkerTQ.__ray_actor_class__._agent_loop_postprocess",
        ("self", "output", "validate"),
        "agent_loop_manager",
    ),
    # SAAR inside verl's tool loop (cleaner.verl.agent_loop)
    PrivateMethod(
        "verl.experimental.agent_loop.tool_agent_loop",
        "ToolAgentLoop._handle_pending_state",
        ("self", "agent_data", "sampling_params"),
        "agent_loop",
    ),
    PrivateMethod(
        "verl.experimental.agent_loop.tool_agent_loop",
        "ToolAgentLoop._handle_generating_state",
        ("self", "agent_data", "sampling_params", "ignore_termination"),
        "agent_loop",
    ),
    PrivateMethod(
        "verl.experimental.agent_loop.tool_agent_loop",
        "ToolAgentLoop._handle_processing_tools_state",
        ("self", "agent_data"),
        "agent_loop",
    ),
    PrivateMethod(
        "verl.experimental.agent_loop.tool_agent_loop",
        "ToolAgentLoop._call_tool",
        ("self", "tool_call", "tools_kwargs", "agent_data"),
        "agent_loop",
    ),
    PrivateMethod(
        "verl.experimental.agent_loop.tool_agent_loop",
        "ToolAgentLoop.ct_merge_context_msg",
        ("self", "previous_messages", "updated_messages", "runtime_token_ids", "response_mask", "response_logprobs"),
        "agent_loop",
    ),
    PrivateMethod(
        "verl.experimental.agent_loop.tool_agent_loop",
        "ToolAgentLoop._build_assistant_message",
        ("self", "content", "agent_data"),
        "agent_loop",
    ),
    # the tool-DPO estimators' inputs (cleaner.verl.tool_dpo.hooks)
    PrivateMethod(
        "verl.trainer.ppo.v1.trainer_base",
        "PPOTrainer._compute_advantage",
        ("self", "batch", "metrics"),
        "tool_dpo.hooks, purification",
    ),
    # the trainer-side purification modes and the purify/* audit (cleaner.verl.purification)
    PrivateMethod("verl.trainer.ppo.ray_trainer", "compute_advantage", ("data", "adv_estimator"), "purification"),
    # RoC removes the cut rollouts where each trainer balances its batch (cleaner.verl.purification)
    PrivateMethod(
        "verl.trainer.ppo.ray_trainer",
        "RayPPOTrainer._balance_batch",
        ("self", "batch", "metrics", "logging_prefix", "keep_minibatch"),
        "purification",
        batch_reads=("batch[attention_mask]", "non_tensor_batch", "non_tensor_batch[uid]", "reorder"),
    ),
    PrivateMethod(
        "verl.trainer.ppo.v1.trainer_base",
        "PPOTrainer._balance_batch",
        ("self", "batch", "metrics", "logging_prefix", "keep_minibatch"),
        "purification",
    ),
    PrivateMethod(
        "verl.trainer.ppo.ray_trainer", "RayPPOTrainer._get_dp_size", ("self", "worker_group", "role"), "purification"
    ),
    PrivateMethod("verl.trainer.ppo.v1.utils", "compute_advantage", ("data", "adv_estimator"), "tool_dpo.hooks"),
    # DAPO's group filter classifies groups on their trained rows only (cleaner.verl.group_statistics)
    PrivateMethod(
        "verl.trainer.ppo.v1.replay_buffer",
        "ReplayBuffer._dapo_filtered_keys",
        ("self", "partition_id"),
        "group_statistics",
        attributes=("_dapo_classification_cache", "finished_keys", "partitions", "filter_groups_metric"),
    ),
    # the reward manager (cleaner.verl.reward_manager)
    PrivateMethod(
        "verl.experimental.reward_loop.reward_manager.dapo",
        "DAPORewardManager.run_single",
        ("self", "data"),
        "reward_manager",
    ),
)


def _resolve(method: PrivateMethod):
    target = importlib.import_module(method.module)
    for part in method.qualname.split("."):
        target = getattr(target, part)
    return target


def verl_api_problems() -> list[str]:
    """One line per private method that is missing or whose parameters changed in the installed verl."""
    problems = []
    for method in PRIVATE_METHODS:
        where = f"{method.module}.{method.qualname} (used by cleaner.verl.{method.used_by})"
        try:
            target = _resolve(method)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{where} is missing: {exc}")
            continue
        # inspect.signature follows functools.wraps, so an installed cleaner wrapper shows verl's original.
        names = tuple(inspect.signature(target).parameters)[: len(method.parameters)]
        if names != method.parameters:
            problems.append(f"{where} takes {names}, cleaner expects {method.parameters}")
        missing = unassigned_attributes(method)
        if missing:
            owner = method.qualname.rsplit(".", 1)[0]
            problems.append(f"{where} reads {missing}, which {method.module}.{owner}.__init__ no longer assigns")
        beyond = unexpected_batch_reads(method, target)
        if beyond:
            problems.append(f"{where} reads {beyond} of its batch; cleaner's stand-in holds only {method.batch_reads}")
    return problems


def unexpected_batch_reads(method: PrivateMethod, target) -> list[str]:
    """The `batch.<name>` / `batch.<name>["<key>"]` accesses in the method's source outside its `batch_reads`."""
    if not method.batch_reads:
        return []
    source = inspect.getsource(inspect.unwrap(target))
    reads = {f"{name}[{key}]" if key else name for name, key in re.findall(r"\bbatch\.(\w+)(?:\[\"(\w+)\"\])?", source)}
    return sorted(reads - set(method.batch_reads))


def unassigned_attributes(method: PrivateMethod) -> list[str]:
    """The method's `attributes` that its class's `__init__` source does not assign (`self.<name> = ...`)."""
    if not method.attributes:
        return []
    owner = importlib.import_module(method.module)
    for part in method.qualname.split(".")[:-1]:
        owner = getattr(owner, part)
    source = inspect.getsource(owner.__init__)
    return [
        name for name in method.attributes if not re.search(rf"\bself\.{re.escape(name)}\s*(:[^=\n]*)?=(?!=)", source)
    ]


class VerlApiMismatch(RuntimeError):
    """The installed verl lacks a private method cleaner wraps, or its parameters changed."""


def require_verl_api() -> None:
    problems = verl_api_problems()
    if problems:
        raise VerlApiMismatch(
            f"cleaner is built against verl {PINNED_VERL}; the installed verl {verl.__version__} differs where "
            "cleaner hooks in:\n  " + "\n  ".join(problems)
        )
