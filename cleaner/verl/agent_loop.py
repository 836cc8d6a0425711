"""`cleaner_tool_agent`: verl's `ToolAgentLoop` with SAAR rollback (trajectory purification).

Wiring only: the decisions live in `cleaner.saar` (policy, similarity, boundary, splice, leak). This
class keeps verl's token stream, `messages` and counters consistent while the policy rolls back.

Behaviour when SAAR is active for a trajectory (see docs/saar.md for the full table):
- A tool round that fails with a rollback-eligible model error keeps its error as an ordinary tool
  message and the turn is resampled (at most `max_tool_retries` times per position).
- When a retry's round succeeds, the stream, masks, log-probs and messages are cut back to just
  before the failed turn and the replacement is spliced in (shallow: old reasoning + new call;
  deep: the whole new turn); the successful tool response is then appended as usual.
- Infrastructure errors are never rolled back; they are counted and mark the trajectory.
- A trajectory never ends on a tool call without its response because of SAAR.
With SAAR inactive (disabled, gated off, or validation) the stock verl path runs; only the
statistics are collected.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import AgentData, AgentState, ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.tools.function_tool import FunctionTool, normalize_function_tool_return
from verl.tools.schemas import ToolResponse

from cleaner.names import AGENT_NAME
from cleaner.saar.boundary import MARKERS_BY_FORMAT, BoundaryFinder, CallMarkers, markers_for_format
from cleaner.saar.config import VALIDATE_FLAG_KEY, SaarConfig, SaarConfigError
from cleaner.saar.leak import mentions_error
from cleaner.saar.outcome import TOOL_OUTCOME_KEY, ErrorCategory, ToolOutcome
from cleaner.saar.policy import Action, RollbackPolicy, draw_gate
from cleaner.saar.similarity import turn_code
from cleaner.saar.splice import GeneratedTurn, StreamLengths, splice
from cleaner.saar.stats import SplicedSpan, TrajectoryStats

logger = logging.getLogger(__name__)

# Shown to the model when a tool object itself raises: the model did nothing wrong.
TOOL_CRASH_TEXT = "Error: the tool is temporarily unavailable."


@dataclass(frozen=True)
class Checkpoint:
    """The loop state before an assistant turn, as list lengths and counters (O(1) to take)."""

    ids: int
    mask: int
    logprobs: int
    messages: int
    user_turns: int
    assistant_turns: int
    tool_rewards: int


@dataclass(frozen=True)
class TurnRecord:
    before: Checkpoint
    ids: list[int]
    logprobs: list[float] | None


def _checkpoint(agent_data: AgentData) -> Checkpoint:
    return Checkpoint(
        ids=len(agent_data.prompt_ids),
        mask=len(agent_data.response_mask),
        logprobs=len(agent_data.response_logprobs),
        messages=len(agent_data.messages),
        user_turns=agent_data.user_turns,
        assistant_turns=agent_data.assistant_turns,
        tool_rewards=len(agent_data.tool_rewards),
    )


class BadCallAwareParser(ToolParser):
    """Wraps a verl tool parser so that calls it drops (unparsable JSON) still reach `_call_tool`.

    verl's hermes parser logs and skips a `<tool_call>` span whose JSON does not parse, which would end
    the trajectory silently. Each such span becomes a `FunctionCall` with an empty name and the raw span
    as arguments, which `_call_tool` answers as a BAD_CALL model error.
    """

    def __init__(self, inner: ToolParser, markers: CallMarkers):
        super().__init__(inner.tokenizer)
        self.inner = inner
        self.markers = markers
        start_ids = inner.tokenizer.encode(markers.start, add_special_tokens=False)
        self._start_id = start_ids[0] if len(start_ids) == 1 else None

    @property
    def stop_token_ids(self) -> list[int]:
        return self.inner.stop_token_ids

    async def extract_tool_calls(self, responses_ids, tools=None):
        content, calls = await self.inner.extract_tool_calls(responses_ids, tools)
        # Cheap pre-check on token ids: a turn with no more start markers than parsed calls dropped nothing.
        if self._start_id is not None and responses_ids.count(self._start_id) <= len(calls):
            return content, calls
        return content, calls + self._dropped_calls(self.tokenizer.decode(responses_ids), len(calls))

    def _dropped_calls(self, text: str, parsed: int) -> list[FunctionCall]:
        spans, cursor = [], 0
        while True:
            start = text.find(self.markers.start, cursor)
            end = text.find(self.markers.end, start + len(self.markers.start)) if start >= 0 else -1
            if end < 0:
                break
            spans.append(text[start + len(self.markers.start) : end].strip())
            cursor = end + len(self.markers.end)
        bad = [FunctionCall(name="", arguments=span) for span in spans if not _is_call_json(span)]
        return bad[: max(len(spans) - parsed, 0)]


def _is_call_json(span: str) -> bool:
    try:
        call = json.loads(span)
    except json.JSONDecodeError:
        return False
    return isinstance(call, dict) and "name" in call and "arguments" in call


@register(AGENT_NAME)
class CleanerToolAgentLoop(ToolAgentLoop):
    # Per-process count of trajectories started per sample key: the legacy worker runs the n samples of
    # a prompt as identical rows, so the k-th occurrence is what makes each sample's gate draw distinct.
    _occurrences: ClassVar[Counter] = Counter()
    _finders: ClassVar[dict[tuple[int, CallMarkers], BoundaryFinder]] = {}
    _configs: ClassVar[dict[int, tuple[Any, SaarConfig]]] = {}

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.saar_config = self._saar_config(self.rollout_config.multi_turn)
        # A parser may know its own call boundary (`find_call_start(ids)`, e.g. cleaner_lenient); otherwise
        # the markers of a known format locate it.
        parser_boundary = getattr(self.tool_parser, "find_call_start", None)
        markers = MARKERS_BY_FORMAT.get(self.tool_parser_name)
        if markers is not None and markers.end is not None:
            self.tool_parser = BadCallAwareParser(self.tool_parser, markers)
        self.find_call_start: Callable[[Sequence[int]], int | None] | None = None
        if self.saar_config.enable_tool_rollback:
            if parser_boundary is not None:
                self.find_call_start = parser_boundary
            else:
                self.find_call_start = self._boundary_finder(markers_for_format(self.tool_parser_name)).find
        self.stats = TrajectoryStats()
        self.policy = RollbackPolicy(self.saar_config, active=False, stats=self.stats)
        self._last_turn: TurnRecord | None = None

    @classmethod
    def _saar_config(cls, multi_turn: Any) -> SaarConfig:
        # One loop is built per trajectory from the worker's same config node; reading OmegaConf costs
        # ~0.2 ms, so parse once per node (the node is kept in the cache, so its id cannot be reused).
        cached = cls._configs.get(id(multi_turn))
        if cached is None or cached[0] is not multi_turn:
            cached = cls._configs[id(multi_turn)] = (multi_turn, SaarConfig.from_multi_turn(multi_turn))
        return cached[1]

    def _boundary_finder(self, markers: CallMarkers) -> BoundaryFinder:
        # One finder per worker and tokenizer: its decoded-piece cache then stays warm across trajectories.
        key = (id(self.tokenizer), markers)
        finder = self._finders.get(key)
        if finder is None or finder.tokenizer is not self.tokenizer:
            finder = self._finders[key] = BoundaryFinder(self.tokenizer, markers)
        return finder

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        if VALIDATE_FLAG_KEY in sampling_params:
            # A copy: verl's v1 worker shares one dict between the n sessions of a prompt.
            sampling_params = dict(sampling_params)
            kwargs.setdefault("validate", bool(sampling_params.pop(VALIDATE_FLAG_KEY)))
        self.policy = RollbackPolicy(self.saar_config, self._rollback_active(sampling_params, kwargs), self.stats)
        output = await super().run(sampling_params, **kwargs)
        if self.policy.open is not None:
            self.policy.close_open("the trajectory ended")
        self._finish_stats(output)
        return output

    # ---- gate -------------------------------------------------------------------------------------

    def _rollback_active(self, sampling_params: dict[str, Any], kwargs: dict[str, Any]) -> bool:
        config = self.saar_config
        if not config.enable_tool_rollback or config.rollback_probability <= 0.0:
            return False
        if not config.rollback_in_validation and self._is_validation(sampling_params, kwargs):
            return False
        if config.rollback_probability < 1.0:
            return draw_gate(config.rollback_seed, self._sample_key(kwargs), config.rollback_probability)
        return True

    def _is_validation(self, sampling_params: dict[str, Any], kwargs: dict[str, Any]) -> bool:
        """The validate flag from the cleaner worker (or a caller's `validate=`); without one, infer it."""
        if "validate" in kwargs:
            return bool(kwargs["validate"])
        rollout = self.rollout_config
        names = ("temperature", "top_p", "top_k")
        train = tuple(rollout.get(name) for name in names)
        val_kwargs = rollout.get("val_kwargs") or {}
        val = tuple(val_kwargs.get(name) for name in names)
        if train == val:
            raise SaarConfigError(
                "cannot tell validation from training rollouts: actor_rollout_ref.rollout.val_kwargs has the same "
                f"temperature/top_p/top_k as training {train}. Set multi_turn.rollback_in_validation=true "
                "(SAAR in both) or make the validation sampling parameters differ."
            )
        return tuple(sampling_params.get(name) for name in names) == val

    def _sample_key(self, kwargs: dict[str, Any]) -> str:
        sample = kwargs.get("index", kwargs.get("uid"))
        if sample is None:
            raise ValueError("rollback_probability in (0, 1) needs an `index` or `uid` field on each sample")
        key = f"sample={sample}"
        if "global_steps" in kwargs:
            key += f"/step={kwargs['global_steps']}"
        if "session_id" in kwargs:
            return key + f"/session={kwargs['session_id']}"
        occurrence = self._occurrences[key]
        self._occurrences[key] += 1
        return key + f"/occurrence={occurrence}"

    # ---- generation -------------------------------------------------------------------------------

    async def _handle_generating_state(
        self, agent_data: AgentData, sampling_params: dict[str, Any], ignore_termination: bool = False
    ) -> AgentState:
        if not self.policy.active:
            return await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
        before = _checkpoint(agent_data)
        state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
        ids = list(agent_data.response_ids)
        logprobs = agent_data.response_logprobs[len(agent_data.response_logprobs) - len(ids) :] or None
        self._last_turn = TurnRecord(before, ids, logprobs)
        if not self.policy.resampling:
            return state
        self.policy.on_resample(len(ids))
        if state is not AgentState.TERMINATED:
            return state
        # verl stops before parsing when a limit is hit: then no assistant message was appended.
        if len(agent_data.messages) == before.messages:
            reason = "limit"
        elif not ids:
            reason = "empty"
        else:
            reason = "no_call"
        action = self.policy.on_unusable_resample(reason)
        if reason != "no_call":
            # Drop the unusable generation: the trajectory is back at the error feedback, a tool response.
            self._truncate(agent_data, before)
        return AgentState.GENERATING if action is Action.RETRY else AgentState.TERMINATED

    # ---- tools ------------------------------------------------------------------------------------

    async def _handle_processing_tools_state(self, agent_data: AgentData) -> AgentState:
        if not self.policy.active:
            return await super()._handle_processing_tools_state(agent_data)
        calls = agent_data.tool_calls[: self.max_parallel_calls]
        results = await asyncio.gather(*(self._call_tool(call, agent_data.tools_kwargs, agent_data) for call in calls))
        outcomes = [ToolOutcome.from_dict(metrics[TOOL_OUTCOME_KEY]) for _, _, metrics in results]
        turn = self._last_turn
        code = turn_code([call.arguments for call in calls])
        action = self.policy.on_round(
            outcomes,
            position=turn.before.assistant_turns,
            code=code,
            feedback="\n".join(response.text or "" for response, _, _ in results),
            checkpoint=turn.before,
            failed_turn=turn,
        )
        if action is Action.PURIFY:
            await self._purify(agent_data, turn, code)
        return await self._append_tool_responses(agent_data, calls, results)

    async def _append_tool_responses(
        self, agent_data: AgentData, calls: list[FunctionCall], results: list
    ) -> AgentState:
        messages = []
        for call, (response, reward, _) in zip(calls, results):
            if response.image or response.video:
                raise ValueError(
                    f"{AGENT_NAME} with rollback supports text tool responses only; tool {call.name!r} returned media"
                )
            message = {"role": "tool", "content": response.text or ""}
            if call.tool_call_id is not None:
                message["tool_call_id"] = call.tool_call_id
            messages.append(message)
            if reward is not None:
                agent_data.tool_rewards.append(reward)
        previous = list(agent_data.messages)
        agent_data.messages.extend(messages)
        merged, mask, logprobs = await self.ct_merge_context_msg(
            previous,
            agent_data.messages,
            agent_data.prompt_ids,
            agent_data.response_mask,
            agent_data.response_logprobs or None,
            tools=getattr(agent_data, "_active_tool_schemas", self.tool_schemas),
        )
        agent_data.prompt_ids = merged.token_ids
        agent_data.response_mask = mask
        if agent_data.response_logprobs:
            agent_data.response_logprobs = logprobs
        agent_data.user_turns += 1
        # Unlike the stock loop, a response that overflows is still committed (the final output is cut at
        # response_length), so the trajectory never ends on a call without its response.
        if len(mask) >= self.response_length:
            return AgentState.TERMINATED
        return AgentState.GENERATING

    async def _call_tool(
        self, tool_call: FunctionCall, tools_kwargs: dict[str, Any], agent_data: AgentData
    ) -> tuple[ToolResponse, float, dict]:
        """Run one call and attach its `ToolOutcome` to the metrics (decided here, never from response text)."""
        response, reward, metrics, outcome = await self._execute_call(tool_call, tools_kwargs, agent_data)
        if not self.policy.active:
            self.policy.count_round([outcome], first_attempt=True)
        return self._truncate_response(response), reward, {**metrics, TOOL_OUTCOME_KEY: outcome.to_dict()}

    async def _execute_call(
        self, tool_call: FunctionCall, tools_kwargs: dict[str, Any], agent_data: AgentData
    ) -> tuple[ToolResponse, float, dict, ToolOutcome]:
        active_tools = getattr(agent_data, "_active_tools", self.tools)
        name = tool_call.name
        if not name:
            return _bad_call(
                f"Error: the tool call could not be parsed: {tool_call.arguments[:200]!r} is not JSON with 'name' and 'arguments'."
            )
        tool = active_tools.get(name)
        if tool is None:
            return _bad_call(f"Error: unknown tool {name!r}. Available tools: {sorted(active_tools)}.")
        try:
            arguments = json.loads(tool_call.arguments)
        except (json.JSONDecodeError, TypeError) as exc:
            return _bad_call(f"Error: the arguments of {name!r} are not valid JSON ({exc}).")
        if not isinstance(arguments, dict):
            return _bad_call(f"Error: the arguments of {name!r} must be a JSON object, got {type(arguments).__name__}.")

        instance_id = None
        try:
            if isinstance(tool, FunctionTool):
                response, reward, metrics = normalize_function_tool_return(await tool.call(arguments))
            else:
                create_kwargs = tools_kwargs.get(name, {}).get("create_kwargs", {})
                instance_id, _ = await tool.create(create_kwargs=create_kwargs)
                response, reward, metrics = await tool.execute(instance_id, arguments, agent_data=agent_data)
        except Exception as exc:
            # A tool that raises is broken, not the model: an infrastructure error, never rolled back.
            logger.exception("tool %r raised", name)
            outcome = ToolOutcome.infra_error(
                ErrorCategory.JUDGE_INTERNAL_ERROR, detail=f"tool {name!r} raised {exc!r}"
            )
            return ToolResponse(text=TOOL_CRASH_TEXT), 0.0, {}, outcome
        finally:
            if instance_id is not None:
                await tool.release(instance_id)
        metrics = dict(metrics or {})
        raw_outcome = metrics.get(TOOL_OUTCOME_KEY)
        # A tool that reports no outcome is taken as succeeded ("ok, unclassified"): it is never rolled back.
        outcome = ToolOutcome.ok() if raw_outcome is None else ToolOutcome.from_dict(raw_outcome)
        return response, reward, metrics, outcome

    def _truncate_response(self, response: ToolResponse) -> ToolResponse:
        text, limit = response.text, self.max_tool_response_length
        if not text or len(text) <= limit:
            return response
        side = self.tool_response_truncate_side
        if side == "left":
            text = "(truncated)..." + text[-limit:]
        elif side == "right":
            text = text[:limit] + "...(truncated)"
        else:
            half = limit // 2
            text = text[:half] + "...(truncated)..." + text[-half:]
        return response.model_copy(update={"text": text})

    # ---- purification -----------------------------------------------------------------------------

    async def _purify(self, agent_data: AgentData, replacement: TurnRecord, replacement_code: str) -> None:
        """Splice the successful retry over the failed turn; drop the failed branch from tokens and messages."""
        if agent_data.routed_experts is not None:
            raise ValueError(f"{AGENT_NAME}: rollback cannot splice routed-expert replay data; disable one of them")
        open_position = self.policy.open
        base: Checkpoint = open_position.checkpoint
        failed: TurnRecord = open_position.failed_turn
        failed_boundary, new_boundary = self.find_call_start(failed.ids), self.find_call_start(replacement.ids)
        mode, similarity = self.policy.choose_mode(
            replacement_code, splittable=failed_boundary is not None and new_boundary is not None
        )
        result = splice(
            agent_data.prompt_ids,
            agent_data.response_mask,
            agent_data.response_logprobs or None,
            StreamLengths(base.ids, base.mask, base.logprobs),
            GeneratedTurn(failed.ids, failed.logprobs, failed_boundary),
            GeneratedTurn(replacement.ids, replacement.logprobs, new_boundary),
            mode,
        )
        active_tools = getattr(agent_data, "_active_tools", self.tools)
        content, _ = await self.tool_parser.extract_tool_calls(
            result.turn_ids, [tool.tool_schema for tool in active_tools.values()]
        )
        agent_data.prompt_ids = result.ids
        agent_data.response_mask = result.mask
        if result.logprobs is not None:
            agent_data.response_logprobs = result.logprobs
        agent_data.response_ids = result.turn_ids
        # agent_data.tool_calls still holds the executed (successful) calls, which the new turn carries.
        agent_data.messages = agent_data.messages[: base.messages] + [
            self._build_assistant_message(content, agent_data)
        ]
        agent_data.tool_rewards = agent_data.tool_rewards[: base.tool_rewards]
        agent_data.user_turns = base.user_turns
        agent_data.assistant_turns = base.assistant_turns + 1
        attempt = open_position.event.retries
        self.stats.spliced_spans.append(SplicedSpan(result.spliced_start, result.spliced_end, attempt))
        leaked = False
        if mode == "deep":
            reasoning = self.tokenizer.decode(
                replacement.ids[:new_boundary] if new_boundary is not None else replacement.ids
            )
            leaked = mentions_error(reasoning, open_position.error_texts, open_position.exception_types)
        self.policy.on_purified(mode, similarity, replacement_code, leaked)

    def _truncate(self, agent_data: AgentData, checkpoint: Checkpoint) -> None:
        """Cut the stream and messages back to `checkpoint` (assistant_turns keeps counting: it bounds the loop)."""
        agent_data.prompt_ids = agent_data.prompt_ids[: checkpoint.ids]
        agent_data.response_mask = agent_data.response_mask[: checkpoint.mask]
        agent_data.response_logprobs = agent_data.response_logprobs[: checkpoint.logprobs]
        agent_data.messages = agent_data.messages[: checkpoint.messages]
        agent_data.tool_rewards = agent_data.tool_rewards[: checkpoint.tool_rewards]
        agent_data.user_turns = checkpoint.user_turns

    # ---- statistics -------------------------------------------------------------------------------

    def _finish_stats(self, output: AgentLoopOutput) -> None:
        stats = self.stats
        length = len(output.response_ids)
        stats.response_tokens = length
        spans = [
            SplicedSpan(span.start, min(span.end, length), span.attempt)
            for span in stats.spliced_spans
            if span.start < length
        ]
        stats.spliced_spans = spans
        stats.spliced_tokens = sum(sum(output.response_mask[span.start : span.end]) for span in spans)
        output.extra_fields.update(stats.to_extra_fields())


def _bad_call(text: str) -> tuple[ToolResponse, float, dict, ToolOutcome]:
    return ToolResponse(text=text), 0.0, {}, ToolOutcome.model_error(ErrorCategory.BAD_CALL, detail=text)
