"""Run the CLEANER agent loop used in training over a problem set, against a running inference server.

Nothing here re-implements the loop: each trajectory instantiates the registered agent-loop class exactly
as verl's `AgentLoopWorker` does (`cleaner.verl.standalone`), then awaits `run()`. The server behind
`generate()` is one of the HTTP clients in `cleaner.rollout.clients`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cleaner.names import AGENT_NAME
from cleaner.resources import AGENT_LOOP_CONFIG, TOOL_CONFIG, resource_path
from cleaner.tools.tool_config import write_tool_config
from cleaner.trajectory.record import CallTiming, build_record, trajectory_key
from cleaner.trajectory.store import RecordFile

from .problems import Problem

logger = logging.getLogger(__name__)

MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"


@dataclass(frozen=True)
class RolloutSettings:
    output_path: Path
    n_samples: int = 1
    saar_modes: tuple[bool, ...] = (True,)  # run all problems once per mode, SAAR off first if both
    agent_name: str = AGENT_NAME
    tool_config_path: Path = field(default_factory=lambda: resource_path(TOOL_CONFIG))
    agent_loop_config_path: Path = field(default_factory=lambda: resource_path(AGENT_LOOP_CONFIG))
    judge_url: str | None = None  # overrides judge_url of the tools in the tool config
    tool_format: str = "hermes"  # verl ToolParser name
    hf_model_type: str = "qwen2"  # picks verl's continuous-token builder
    prompt_length: int = 1024
    response_length: int = 1024
    max_assistant_turns: int = 4
    max_tool_response_length: int = 512
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int = 0
    concurrency: int = 2
    trajectory_timeout_s: float = 600.0
    # SAAR's rollback_is_measure: score every splice in its purified context (prompt log-probs from the server)
    # and record the log IS ratio in its rollback event.
    score_rollbacks: bool = False
    overrides: tuple[str, ...] = ()  # extra hydra overrides of verl's ppo_trainer config
    reward_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.n_samples < 1 or self.concurrency < 1:
            raise ValueError("n_samples and concurrency must be at least 1")
        if not self.saar_modes:
            raise ValueError("at least one SAAR mode (on/off) is needed")
        for path in (self.tool_config_path, self.agent_loop_config_path):
            if not Path(path).is_file():
                raise FileNotFoundError(f"config file not found: {path}")


def trajectory_seed(base_seed: int, problem_index: int, sample: int) -> int:
    """Same for SAAR on and off, so both modes sample the same first turns."""
    return base_seed + problem_index * 1009 + sample


def tool_config_with_judge(source: Path, judge_url: str | None, workdir: Path) -> Path:
    """The tool yaml, with every tool's `judge_url` pointed at `judge_url` (if given)."""
    if judge_url is None:
        return source
    return write_tool_config(source, workdir / Path(source).name, judge_url)


def trainer_overrides(settings: RolloutSettings, tool_config: Path, saar: bool) -> list[str]:
    """The overrides of verl's ppo_trainer config with the multi-turn, tool and SAAR keys this rollout needs."""
    return [
        f"data.max_prompt_length={settings.prompt_length}",
        f"data.max_response_length={settings.response_length}",
        f"actor_rollout_ref.rollout.prompt_length={settings.prompt_length}",
        f"actor_rollout_ref.rollout.response_length={settings.response_length}",
        f"{MULTI_TURN}.enable=true",
        f"{MULTI_TURN}.tool_config_path={tool_config}",
        f"{MULTI_TURN}.format={settings.tool_format}",
        f"{MULTI_TURN}.max_assistant_turns={settings.max_assistant_turns}",
        f"{MULTI_TURN}.max_tool_response_length={settings.max_tool_response_length}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={settings.agent_loop_config_path}",
        f"+{MULTI_TURN}.enable_tool_rollback={'true' if saar else 'false'}",
        *([f"+{MULTI_TURN}.rollback_is_measure=true"] if saar and settings.score_rollbacks else []),
        *settings.overrides,
    ]


class MeteredServer:
    """Per-trajectory view of the shared client that counts calls, sampled tokens and time in generate()."""

    def __init__(self, client):
        self._client = client
        self.calls = 0
        self.tokens = 0
        self.seconds = 0.0

    async def generate(self, request_id: str, **kwargs: Any):
        start = time.perf_counter()
        output = await self._client.generate(request_id, **kwargs)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        self.tokens += len(output.token_ids)
        return output

    def timing(self) -> CallTiming:
        return CallTiming(generate_calls=self.calls, generated_tokens=self.tokens, generate_s=self.seconds)


@dataclass(frozen=True)
class RolloutResult:
    written: int
    skipped: int  # already in the output file (resume)
    failed: list[str]  # keys of trajectories that raised (they are retried on the next run)
    wall_s_per_mode: dict[bool, float]  # wall time of each mode's pass over the problems


async def _score(compute_score: Callable, problem: Problem, response_text: str, extra_info: dict, kwargs: dict) -> dict:
    result = compute_score(problem.data_source, response_text, problem.ground_truth, extra_info, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"compute_score returned a dict without 'score': {result}")
        return dict(result)
    return {"score": float(result)}


class RolloutRunner:
    def __init__(
        self, settings: RolloutSettings, client, tokenizer, compute_score: Callable, show_progress: bool = True
    ):
        self.settings = settings
        self.client = client
        self.tokenizer = tokenizer
        self.compute_score = compute_score
        self.show_progress = show_progress

    async def run(self, problems: list[Problem]) -> RolloutResult:
        from cleaner.verl.standalone import AgentLoopFactory, load_tools, register_agent_loops
        from cleaner.verl.trainer_config import compose_trainer_config

        registry = register_agent_loops(self.settings.agent_loop_config_path)
        for problem in problems:
            name = problem.agent_name or self.settings.agent_name
            if name not in registry:
                raise ValueError(
                    f"problem {problem.problem_id}: agent loop {name!r} is not registered ({sorted(registry)})"
                )

        written, skipped, failed, wall = 0, 0, [], {}
        with (
            tempfile.TemporaryDirectory(prefix="cleaner-rollout-") as workdir,
            RecordFile(self.settings.output_path) as out,
        ):
            tool_config = tool_config_with_judge(self.settings.tool_config_path, self.settings.judge_url, Path(workdir))
            tools = load_tools(tool_config)
            # One pass per mode (SAAR off, then on), never interleaved, so each pass's wall time is its own.
            for saar in sorted(set(self.settings.saar_modes)):
                config = compose_trainer_config(trainer_overrides(self.settings, tool_config, saar))
                jobs = [
                    (index, problem, sample)
                    for index, problem in enumerate(problems)
                    for sample in range(self.settings.n_samples)
                    if trajectory_key(problem.problem_id, sample, saar) not in out.done
                ]
                skipped += len(problems) * self.settings.n_samples - len(jobs)

                new_loop = AgentLoopFactory(
                    registry, config, self.tokenizer, self.settings.hf_model_type, tools
                ).new_loop

                # A configuration error (unknown parser, SAAR setting, tool) fails here once, not per trajectory.
                for name in {problem.agent_name or self.settings.agent_name for problem in problems}:
                    new_loop(MeteredServer(self.client), name)
                start = time.perf_counter()
                results = await self._run_jobs(jobs, saar, new_loop, out)
                wall[saar] = time.perf_counter() - start
                written += sum(1 for ok in results if ok is True)
                failed += [key for key in results if key is not True]
        return RolloutResult(written=written, skipped=skipped, failed=failed, wall_s_per_mode=wall)

    async def _run_jobs(self, jobs, saar: bool, new_loop, out: RecordFile) -> list:
        from tqdm import tqdm

        semaphore = asyncio.Semaphore(self.settings.concurrency)
        progress = tqdm(
            total=len(jobs), desc=f"rollout (SAAR {'on' if saar else 'off'})", disable=not self.show_progress
        )

        async def one(index: int, problem: Problem, sample: int):
            key = trajectory_key(problem.problem_id, sample, saar)
            async with semaphore:
                try:
                    record = await asyncio.wait_for(
                        self._trajectory(index, problem, sample, saar, new_loop), self.settings.trajectory_timeout_s
                    )
                except Exception as exc:
                    reason = "timed out" if isinstance(exc, asyncio.TimeoutError) else f"{type(exc).__name__}: {exc}"
                    logger.error("trajectory %s failed (%s); it will be retried on the next run", key, reason)
                    return key
                finally:
                    progress.update(1)
                out.append(record)
                return True

        try:
            return await asyncio.gather(*(one(*job) for job in jobs))
        finally:
            progress.close()

    async def _trajectory(self, index: int, problem: Problem, sample: int, saar: bool, new_loop) -> dict[str, Any]:
        seed = trajectory_seed(self.settings.seed, index, sample)
        server = MeteredServer(self.client)
        loop = new_loop(server, problem.agent_name or self.settings.agent_name)
        sampling_params = {
            "temperature": self.settings.temperature,
            "top_p": self.settings.top_p,
            "top_k": -1,
            "repetition_penalty": 1.0,
            "logprobs": True,
            "seed": seed,
        }
        extra_info = {**problem.extra_info, "problem_id": problem.problem_id, "sample": sample}
        start = time.perf_counter()
        output = await loop.run(
            sampling_params,
            raw_prompt=problem.prompt,
            tools_kwargs=problem.tools_kwargs,
            extra_info=extra_info,
            index=index,
            data_source=problem.data_source,
            reward_model={"style": "rule", "ground_truth": problem.ground_truth},
            uid=str(uuid.uuid4()),
            # A rollout is not verl validation: SAAR applies (unless rollback is off).
            validate=False,
        )
        latency = time.perf_counter() - start
        # What verl's reward loop passes: the response decoded without special tokens, and extra_info
        # extended with num_turns and the loop's extra_fields.
        response_text = self.tokenizer.decode(list(output.response_ids), skip_special_tokens=True)
        reward_info = {**extra_info, "num_turns": output.num_turns, **(output.extra_fields or {})}
        reward = await _score(self.compute_score, problem, response_text, reward_info, self.settings.reward_kwargs)
        return build_record(
            problem=problem,
            sample=sample,
            saar=saar,
            seed=seed,
            output=output,
            tokenizer=self.tokenizer,
            reward=reward,
            timing=server.timing(),
            latency_s=latency,
        )
