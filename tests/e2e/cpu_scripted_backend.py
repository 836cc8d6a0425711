"""Test support: the `cleaner_cpu_scripted` rollout backend and a hook that saves the batch the actor trained on.

verl imports this module in every process of a training run (`VERL_USE_EXTERNAL_MODULES=
verl_cpu.plugin,cpu_scripted_backend`, with this directory on PYTHONPATH): it registers a backend through the
same route as verl_cpu's `cpu` backend (`verl_cpu.rollout.register`) whose server, instead of sampling from the
model, answers by a fixed policy read off the decoded prompt:

- no tool result yet: a code block that fails (the problem's `failing` code);
- the last tool result is that failure: the fixed code (SAAR's retry);
- the last tool result is a success: a final answer, alternately right and wrong per problem, so a GRPO
  group gets different rewards and the actor update has a non-zero advantage.

Generated tokens get the log-prob `SAMPLED_LOGPROB`. A scoring request (verl's `generate` contract:
`prompt_logprobs` in the sampling params, `max_tokens=1`; SAAR's `rollback_is_threshold` sends one per splice)
gets `extra_fields["prompt_logprobs"]`/`["prompt_ids"]` in verl's layout (row i: token i + 1; the last row a
dummy) with every prompt token at one log-prob, alternately per problem `SAMPLED_LOGPROB` (the splice's IS ratio
is 1: the gate replaces) and `OFF_POLICY_LOGPROB` (a ratio far below any threshold: the gate appends).

Everything else (the real trainer, the FSDP actor, the weight sync into this server, the agent loop with
SAAR, the python tool against a real code-judge, the reward) is the production path.

With `CLEANER_TEST_BATCH_DUMP=<path>`, `RayPPOTrainer._update_actor` is wrapped to pickle the batch it
trains on (token tensors and per-trajectory columns) before calling verl's original.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from typing import Any

from verl.workers.rollout.replica import TokenOutput

from verl_cpu import rollout as cpu_rollout
from verl_cpu import server as cpu_server

BACKEND_NAME = "cleaner_cpu_scripted"
BATCH_DUMP_ENV = "CLEANER_TEST_BATCH_DUMP"


@dataclass(frozen=True)
class ScriptedProblem:
    marker: str  # a phrase of the problem's prompt
    failing: str  # code of the first call (fails)
    error_name: str  # what the judge reports for it
    fixed: str  # code of the retry (succeeds, prints the answer)
    answer: str


PROBLEMS = (
    # Shallow: the fix changes one identifier, similarity >= 0.5, only the call is replaced.
    ScriptedProblem(
        marker="sum of all integers from 1 to 200",
        failing="total = sum(n for n in range(1, 201) if n % 3 == 0 or n % 5 == 0)\nprint(totl)",
        error_name="NameError",
        fixed="total = sum(n for n in range(1, 201) if n % 3 == 0 or n % 5 == 0)\nprint(total)",
        answer="9368",
    ),
    # Deep: the retry is different code, similarity < 0.5, the whole turn is replaced.
    ScriptedProblem(
        marker="prime numbers are there below 500",
        failing="print(len([p for p in range(2, 500) if all(p % d for d in range(2, p)]))",
        error_name="SyntaxError",
        fixed="import sympy\nprint(sympy.primepi(499))",
        answer="95",
    ),
)
TOOL_RESPONSE_TAG = "<tool_response>"
SAMPLED_LOGPROB = -0.5
OFF_POLICY_LOGPROB = -2.0
PROMPT_LOGPROBS = "prompt_logprobs"


def code_turn(code: str) -> str:
    return f"Let me compute it.\n```python\n{code}\n```"


def problem_of(prompt_text: str) -> ScriptedProblem:
    found = [problem for problem in PROBLEMS if problem.marker in prompt_text]
    if len(found) != 1:
        raise LookupError(f"scripted backend: expected one known problem in the prompt, found {len(found)}")
    return found[0]


def scripted_score(prompt_text: str, scores_given: dict[str, int]) -> float:
    """The log-prob of every prompt token of a scoring request (module docstring); counted per problem."""
    marker = problem_of(prompt_text).marker
    count = scores_given.get(marker, 0)
    scores_given[marker] = count + 1
    return SAMPLED_LOGPROB if count % 2 == 0 else OFF_POLICY_LOGPROB


def scripted_reply(prompt_text: str, final_answers_given: dict[str, int]) -> str:
    """The scripted policy (module docstring); `final_answers_given` counts final answers per problem."""
    problem = problem_of(prompt_text)
    if TOOL_RESPONSE_TAG not in prompt_text:
        return code_turn(problem.failing)
    last_result = prompt_text.rsplit(TOOL_RESPONSE_TAG, 1)[1]
    if problem.error_name in last_result:
        return code_turn(problem.fixed)
    count = final_answers_given.get(problem.marker, 0)
    final_answers_given[problem.marker] = count + 1
    answer = problem.answer if count % 2 == 0 else "-1"
    return f"The answer is \\boxed{{{answer}}}."


class ScriptedGenerationServer(cpu_server.CpuGenerationServer):
    """`CpuGenerationServer` whose generations come from `scripted_reply`; weight syncs are still received."""

    async def launch(self) -> None:
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig

        self.model_config = omega_conf_to_dataclass(self.model_config, dataclass_type=HFModelConfig)
        self.tokenizer = self.model_config.tokenizer
        self._final_answers: dict[str, int] = {}
        self._scores: dict[str, int] = {}
        self.received: dict[str, Any] = {}

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str, **_: Any):
        prompt_text = self.tokenizer.decode(prompt_ids)
        self.stats["requests"] += 1
        if sampling_params.get(PROMPT_LOGPROBS) is not None:
            return self._score(prompt_ids, prompt_text)
        text = scripted_reply(prompt_text, self._final_answers)
        token_ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        self.stats["generated_tokens"] += len(token_ids)
        return TokenOutput(
            token_ids=token_ids,
            log_probs=[SAMPLED_LOGPROB] * len(token_ids),
            stop_reason="completed",
            extra_fields={"global_steps": self.weights_step},
        )

    def _score(self, prompt_ids: list[int], prompt_text: str) -> TokenOutput:
        """A scoring request: one generated token and the prompt's log-probs in verl's layout."""
        logprob = scripted_score(prompt_text, self._scores)
        return TokenOutput(
            token_ids=[self.tokenizer.eos_token_id],
            log_probs=[SAMPLED_LOGPROB],
            stop_reason="completed",
            extra_fields={
                "global_steps": self.weights_step,
                "prompt_ids": [[token] for token in prompt_ids[1:]] + [[0]],
                PROMPT_LOGPROBS: [[logprob]] * (len(prompt_ids) - 1) + [[0.0]],
            },
        )

    def _copy_weights(self, weights: dict) -> None:
        self.received.update({name: tuple(tensor.shape) for name, tensor in weights.items()})

    async def get_stats(self) -> dict[str, Any]:
        return {**self.stats, "weights_step": self.weights_step, "received_tensors": len(self.received)}


class ScriptedRolloutReplica(cpu_rollout.CpuRolloutReplica):
    def server_class(self) -> type:
        return ScriptedGenerationServer


def _dump_batch_before_update(path: str) -> None:
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    original = RayPPOTrainer._update_actor
    if getattr(original, "__scripted_dump__", False):
        return

    def _update_actor(self, batch):
        record = {
            "tensors": {key: value.clone() for key, value in batch.batch.items()},
            "columns": {key: list(value) for key, value in batch.non_tensor_batch.items()},
        }
        with open(path, "wb") as handle:
            pickle.dump(record, handle)
        return original(self, batch)

    _update_actor.__scripted_dump__ = True
    RayPPOTrainer._update_actor = _update_actor


cpu_rollout.register(BACKEND_NAME, ScriptedRolloutReplica)
if os.environ.get(BATCH_DUMP_ENV):
    _dump_batch_before_update(os.environ[BATCH_DUMP_ENV])
