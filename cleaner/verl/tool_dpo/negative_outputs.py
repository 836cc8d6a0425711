"""Turn a trajectory's kept negatives (cleaner.saar.negatives) into extra `AgentLoopOutput`s.

The agent loop's `run()` returns `[negative, ..., trajectory]`: verl's v1 worker stores every element as
its own sample (`{uid}_{session}_{i}`, all with the prompt's `uid`) and gives each the reward of the last
one, the trajectory itself. A negative copies the trajectory's output (same prompt, same verl-internal
`extra_fields` such as the weight versions) except for its tokens, its turn count, and the `saar_*`
statistics, which stay on the trajectory alone so that rollback metrics count each trajectory once.
"""

from __future__ import annotations

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from cleaner.saar.negatives import (
    NEGATIVE_FIELD_KEYS,
    NegativeCollector,
    NegativePair,
    negative_fields,
    positive_fields,
)
from cleaner.saar.stats import PREFIX as SAAR_PREFIX


def with_negatives(
    output: AgentLoopOutput, collector: NegativeCollector, response_length: int
) -> list[AgentLoopOutput]:
    """The negatives of `output`'s trajectory followed by `output`, whose links and drop count are set here."""
    pairs, dropped = collector.finish(response_length, output.response_mask)
    output.extra_fields.update(positive_fields(pairs, dropped))
    inherited = {
        key: value
        for key, value in output.extra_fields.items()
        if not key.startswith(SAAR_PREFIX) and key not in NEGATIVE_FIELD_KEYS
    }
    return [*(_negative_output(output, pair, response_length, inherited) for pair in pairs), output]


def _negative_output(
    output: AgentLoopOutput, pair: NegativePair, response_length: int, inherited: dict
) -> AgentLoopOutput:
    negative = pair.negative
    prompt_ids = negative.ids[: negative.prompt_length]
    if prompt_ids != output.prompt_ids:
        raise ValueError("a negative sample's prompt differs from its trajectory's prompt")
    logprobs = None
    if output.response_logprobs is not None:
        if negative.logprobs is None:
            raise ValueError("the trajectory has rollout log-probs but its negative sample has none")
        logprobs = negative.logprobs[:response_length]
    # model_copy keeps the set of fields verl serialises identical to the trajectory's (AgentLoopOutput.as_dict
    # drops unset fields, and the outputs of one trajectory are stored together).
    return output.model_copy(
        update={
            "response_ids": negative.ids[negative.prompt_length :][:response_length],
            "response_mask": negative.mask[:response_length],
            "response_logprobs": logprobs,
            "num_turns": negative.num_turns,
            "metrics": output.metrics.model_copy(),
            "extra_fields": {**inherited, **negative_fields(pair)},
        }
    )
