"""`cleaner_tool_agent`: verl's `ToolAgentLoop` with SAAR rollback (trajectory purification).

Wiring only: the decisions live in `cleaner.saar` (policy, similarity, boundary, splice, leak). This
class keeps verl's token stream, `messages`, counters and stateful-tool history consistent while the
policy rolls back. See docs/saar.md for the rules; in short, when SAAR is active for a trajectory:
- A tool round that fails with a rollback-eligible model error keeps its error as an ordinary tool
  message and the turn is resampled, at most `max_tool_retries` times per position, and only while a
  resample can still be executed (verl would stop a turn that reaches `max_assistant_turns` or
  `max_user_turns` before running its calls; the response-length check is skipped for resamples).
- When a retry's round succeeds, the stream, masks, log-probs and messages are cut back to just
  before the failed turn and the replacement is spliced in (shallow: old reasoning + new call;
  deep: the whole new turn); the purified turn must parse to the calls that ran, else it is made deep.
- With `rollback_is_threshold` (or `rollback_is_measure`) the splice is first scored in its purified context
  through the server's prompt log-probs; below the threshold nothing is cut (append: every token stays where it was
  sampled).
- A position that ends unrecovered keeps only its last attempt (`rollback_exhausted_keep: last`); under the gate
  that attempt is scored in its purified context first, and below the threshold every attempt stays.
- A scoring request the server aborts is sent again; one that keeps failing marks the trajectory as an
  infrastructure error, and the gate then keeps the failure (nothing unscored is spliced in).
- Infrastructure errors are never rolled back; they are counted and mark the trajectory.
With SAAR inactive (disabled, gated off, or validation) verl's own methods run unchanged; only the
statistics are collected.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import AgentData, AgentState, ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall
from verl.tools.schemas import ToolResponse
from verl.utils.profiler import simple_timer

from cleaner.names import AGENT_NAME
from cleaner.purify.config import saar_requested
from cleaner.saar import offpolicy
from cleaner.saar.boundary import MARKERS_BY_FORMAT, BoundaryFinder, CallMarkers, markers_for_format
from cleaner.saar.config import SaarConfig, SaarConfigError
from cleaner.saar.leak import mentions_error
from cleaner.saar.negatives import NegativeCollector, failed_attempt, success_span
from cleaner.saar.outcome import TOOL_OUTCOME_KEY, ErrorCategory, ToolOutcome
from cleaner.saar.policy import Action, RollbackPolicy, draw_gate
from cleaner.saar.similarity import turn_code
from cleaner.saar.splice import GeneratedTurn, SpliceResult, StreamLengths, splice
from cleaner.saar.stats import IsDecision, SplicedSpan, TrajectoryStats

# Modules, not names: importing one of these first imports verl, whose plugin loader imports this module
# while that one is still half-initialized; its names are looked up when a trajectory runs, by then complete.
from cleaner.verl import bad_call_parser, tool_execution
from cleaner.verl.failed_call_recorder import FailedCallRecorder
from cleaner.verl.tool_dpo import negative_outputs
from cleaner.verl.turn_recorder import TurnRecorder
from cleaner.verl.validation_flag import VALIDATING

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamPosition:
    """A position in the loop's stream before an assistant turn, as list lengths and counters (O(1) to take)."""

    ids: int
    mask: int
    logprobs: int
    messages: int
    user_turns: int
    assistant_turns: int
    tool_rewards: int
    history: int  # entries in the stateful-tool history


@dataclass(frozen=True)
class TurnRecord:
    before: StreamPosition
    ids: list[int]
    logprobs: list[float] | None


def _history(agent_data: AgentData) -> list[str]:
    return getattr(agent_data, tool_execution.TOOL_HISTORY_ATTR, [])


def _stream_position(agent_data: AgentData) -> StreamPosition:
    return StreamPosition(
        ids=len(agent_data.prompt_ids),
        mask=len(agent_data.response_mask),
        logprobs=len(agent_data.response_logprobs),
        messages=len(agent_data.messages),
        user_turns=agent_data.user_turns,
        assistant_turns=agent_data.assistant_turns,
        tool_rewards=len(agent_data.tool_rewards),
        history=len(_history(agent_data)),
    )


# Bounds of the per-process caches below: a worker serves one config node and one tokenizer, so a few
# entries suffice; the gate counter needs one entry per sample still being rolled out.
_CONFIG_CACHE_SIZE = 8
_FINDER_CACHE_SIZE = 8
_OCCURRENCE_KEYS = 65536

# A scoring prefill the server aborts (vLLM: paused for a weight sync or refused admission; SGLang: its prompt-log-prob
# extraction raises) is sent this many times in all before the trajectory is marked as an infrastructure error.
SCORING_ATTEMPTS = 3

_saar_configs: OrderedDict[int, tuple[Any, SaarConfig]] = OrderedDict()
_occurrences: OrderedDict[str, int] = OrderedDict()


def saar_config_of(multi_turn: Any) -> SaarConfig:
    """The parsed `SaarConfig` of a worker's `multi_turn` node, parsed once per node.

    One loop is built per trajectory from the worker's same config node; reading OmegaConf costs ~0.2 ms.
    OmegaConf nodes hash by content (slow), so the cache is keyed by identity; it holds the node, so its
    id cannot be reused while cached.
    """
    key = id(multi_turn)
    cached = _saar_configs.get(key)
    if cached is None or cached[0] is not multi_turn:
        config = SaarConfig.from_multi_turn(multi_turn)
        if saar_requested(multi_turn):  # multi_turn.purification=saar is enable_tool_rollback=true
            config = dataclasses.replace(config, enable_tool_rollback=True)
        cached = _saar_configs[key] = (multi_turn, config)
        if len(_saar_configs) > _CONFIG_CACHE_SIZE:
            _saar_configs.popitem(last=False)
    _saar_configs.move_to_end(key)
    return cached[1]


@functools.lru_cache(maxsize=_FINDER_CACHE_SIZE)
def boundary_finder(tokenizer: Any, markers: CallMarkers) -> BoundaryFinder:
    """One finder per tokenizer and markers: its decoded-piece cache then stays warm across trajectories."""
    return BoundaryFinder(tokenizer, markers)


def next_occurrence(key: str) -> int:
    """How many trajectories with this sample key this process started before (0 for the first).

    The legacy worker runs the n samples of a prompt as identical rows without a session id, so the k-th
    occurrence is what makes each sample's gate draw distinct. The n samples of a prompt start within one
    step, so only the most recently used `_OCCURRENCE_KEYS` keys are kept (the oldest is forgotten first):
    memory stays bounded over a long run, and a forgotten key could only repeat a draw for a sample key
    that has not been seen for that many trajectories.
    """
    occurrence = _occurrences.pop(key, 0)
    _occurrences[key] = occurrence + 1
    if len(_occurrences) > _OCCURRENCE_KEYS:
        _occurrences.popitem(last=False)
    return occurrence


class ScoringFailed(Exception):
    """Every scoring request of one splice was aborted or raised: transient, the trajectory's infrastructure error."""


def _aborted(output: Any) -> bool:
    """verl's servers answer an aborted request with no tokens (vLLM adds stop_reason "aborted")."""
    return output.stop_reason == "aborted" or not output.token_ids


def _same_calls(parsed: Sequence[FunctionCall], executed: Sequence[FunctionCall]) -> bool:
    return [(call.name, call.arguments) for call in parsed] == [(call.name, call.arguments) for call in executed]


@register(AGENT_NAME)
class CleanerToolAgentLoop(ToolAgentLoop):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.saar_config = saar_config_of(self.rollout_config.multi_turn)
        if self.saar_config.enable_tool_rollback and self.rollout_config.get("enable_rollout_routing_replay", False):
            raise SaarConfigError(
                "actor_rollout_ref.rollout.enable_rollout_routing_replay (R3) cannot be combined with "
                "multi_turn.enable_tool_rollback: routed-expert replay data cannot be spliced; disable one of them"
            )
        # A parser may know its own call boundary (`find_call_start(ids)`, e.g. cleaner_lenient); otherwise
        # the markers of a known format locate it.
        parser_boundary = getattr(self.tool_parser, "find_call_start", None)
        self._markers = MARKERS_BY_FORMAT.get(self.tool_parser_name)
        self.find_call_start: Callable[[Sequence[int]], int | None] | None = None
        if self.saar_config.enable_tool_rollback:
            if parser_boundary is not None:
                self.find_call_start = parser_boundary
            else:
                self.find_call_start = boundary_finder(self.tokenizer, markers_for_format(self.tool_parser_name)).find
        self.stats = TrajectoryStats()
        self.turn_recorder = TurnRecorder()  # per-turn record for the purification modes and audit
        self.failed_calls = FailedCallRecorder()  # every failed call generated, rolled back or kept, for the audit
        self.policy = RollbackPolicy(self.saar_config, active=False, stats=self.stats)
        self._last_turn: TurnRecord | None = None
        self._agent_data: AgentData | None = None
        self._sampling_params: dict[str, Any] = {}
        self.negatives: NegativeCollector | None = None

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput | list[AgentLoopOutput]:
        active = self._rollback_active(sampling_params, kwargs)
        self._sampling_params = sampling_params
        self.policy = RollbackPolicy(self.saar_config, active, self.stats)
        self.negatives = self._negative_collector(sampling_params, kwargs)
        if self._markers is not None and self._markers.end is not None:
            self.tool_parser = bad_call_parser.BadCallAwareParser(self.tool_parser, self._markers, surface=active)
        if not active:
            self.tools = tool_execution.observed_tools(self.tools)
        try:
            output = await super().run(sampling_params, **kwargs)
        except SaarConfigError:
            raise  # a setting the backend cannot serve fails every trajectory alike: stop, naming the key
        except Exception:
            if self._agent_data is None or not self._agent_data.prompt_ids:
                raise  # nothing was built yet: there is no trajectory to return
            # One trajectory's failure must not fail the batch: it is returned empty and marked as an infra error.
            logger.exception("%s: trajectory failed; returned as an infrastructure error", AGENT_NAME)
            output = self._failed_trajectory(self._agent_data)
        if self.policy.open is not None:
            self.policy.close_open("the trajectory ended")
        self._finish(output)
        if self.negatives is not None:
            return negative_outputs.with_negatives(output, self.negatives, self.response_length)
        return output

    def _negative_collector(self, sampling_params: dict[str, Any], kwargs: dict[str, Any]) -> NegativeCollector | None:
        """With `save_negative_samples`, every training trajectory gets one (docs/negative-samples.md); never validation."""
        if not self.saar_config.save_negative_samples or self._is_validation(sampling_params, kwargs):
            return None
        return NegativeCollector(self.saar_config.max_negative_samples_per_group)

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
        """The cleaner worker's validate flag (or a caller's `validate=`); without either, infer it."""
        validating = VALIDATING.get()
        if validating is not None:
            return validating
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
        return key + f"/occurrence={next_occurrence(key)}"

    # ---- generation -------------------------------------------------------------------------------

    async def _handle_pending_state(self, agent_data: AgentData, sampling_params: dict[str, Any]) -> AgentState:
        self._agent_data = agent_data
        return await super()._handle_pending_state(agent_data, sampling_params)

    async def _handle_generating_state(
        self, agent_data: AgentData, sampling_params: dict[str, Any], ignore_termination: bool = False
    ) -> AgentState:
        if not self.policy.active:
            state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
            self.turn_recorder.on_generation(len(agent_data.response_ids))
            self._count_dropped_calls()
            return state
        before = _stream_position(agent_data)
        resampling = self.policy.resampling
        # Turn limits were checked before a resample was asked for (see _retry_executable); the response-length
        # check is skipped for resamples, as in the reference, so every resample is parsed and its calls run.
        state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination or resampling)
        ids = list(agent_data.response_ids)
        self.turn_recorder.on_generation(len(ids))
        logprobs = agent_data.response_logprobs[len(agent_data.response_logprobs) - len(ids) :] or None
        self._last_turn = TurnRecord(before, ids, logprobs)
        if not resampling:
            return state
        self.policy.on_resample(len(ids))
        if state is not AgentState.TERMINATED:
            return state
        if not ids:
            # An empty resample (e.g. an aborted request) is dropped: back at the error feedback.
            self._truncate(agent_data, before)
            if self.policy.on_unusable_resample("empty") is Action.RETRY:
                return AgentState.GENERATING
            await self._end_position(agent_data)
            return AgentState.GENERATING  # the model continues from the kept attempt, as the stock loop would
        # The resample answered without a tool call: it stays as the final turn after the kept attempt.
        self.policy.on_unusable_resample("no_call")
        await self._end_position(agent_data)
        return AgentState.TERMINATED

    def _count_dropped_calls(self) -> None:
        """SAAR inactive: calls the stock parser dropped count as bad calls (the stock loop shows nothing)."""
        parser = self.tool_parser
        if isinstance(parser, bad_call_parser.BadCallAwareParser) and parser.dropped:
            outcomes = [
                ToolOutcome.model_error(ErrorCategory.BAD_CALL, detail="unparsable call") for _ in parser.dropped
            ]
            self.policy.count_round(outcomes, first_attempt=True)
            self.turn_recorder.on_call(self._agent_data.messages, outcomes)
            self.failed_calls.on_call(self._agent_data.messages, self._agent_data.response_ids, outcomes)
            parser.dropped = []

    # ---- tools ------------------------------------------------------------------------------------

    async def _handle_processing_tools_state(self, agent_data: AgentData) -> AgentState:
        if not self.policy.active:
            return await super()._handle_processing_tools_state(agent_data)
        calls = agent_data.tool_calls[: self.max_parallel_calls]
        with simple_timer("tool_calls", agent_data.metrics):
            results = await asyncio.gather(
                *(self._call_tool(call, agent_data.tools_kwargs, agent_data) for call in calls)
            )
        outcomes = [ToolOutcome.from_dict(metrics[TOOL_OUTCOME_KEY]) for _, _, metrics in results]
        turn = self._last_turn
        code = turn_code([call.arguments for call in calls])
        action = self.policy.on_round(
            outcomes,
            position=turn.before.assistant_turns,
            code=code,
            # only the failed calls' texts are error feedback (a parallel call's output is not an error)
            feedback="\n".join(
                response.text or "" for (response, _, _), outcome in zip(results, outcomes) if not outcome.is_ok
            ),
            stream_position=turn.before,
            failed_turn=turn,
            can_retry=self._retry_executable(agent_data),
        )
        if action is Action.PURIFY:
            await self._purify(agent_data, turn, calls, code)
        note = self.policy.note() if action is Action.GIVE_UP else None
        if note is not None:
            results = _with_note(results, outcomes, note)
        state = await self._append_tool_responses(agent_data, calls, results)
        if action is Action.GIVE_UP:
            await self._end_position(agent_data)
        elif self.policy.open is not None and state is AgentState.TERMINATED:
            self.policy.close_open("the response is full")
            await self._end_position(agent_data)
        return state

    def _retry_executable(self, agent_data: AgentData) -> bool:
        """Would the calls of a resample generated after this round run? verl stops a turn that reaches
        `max_assistant_turns`, or follows `max_user_turns` tool rounds, before parsing it."""
        if self.max_assistant_turns and agent_data.assistant_turns + 1 >= self.max_assistant_turns:
            return False
        return not (self.max_user_turns and agent_data.user_turns + 1 >= self.max_user_turns)

    async def _append_tool_responses(
        self, agent_data: AgentData, calls: list[FunctionCall], results: list
    ) -> AgentState:
        messages = []
        for call, (response, reward, _) in zip(calls, results):
            message = {"role": "tool", "content": response.text or ""}
            if call.tool_call_id is not None:
                message["tool_call_id"] = call.tool_call_id
            messages.append(message)
            if reward is not None:
                agent_data.tool_rewards.append(reward)
        previous = list(agent_data.messages)
        agent_data.messages.extend(messages)
        schemas = getattr(agent_data, "_active_tool_schemas", self.tool_schemas)
        merged, mask, logprobs = await self.ct_merge_context_msg(
            previous,
            agent_data.messages,
            agent_data.prompt_ids,
            agent_data.response_mask,
            agent_data.response_logprobs or None,
            tools=schemas,
        )
        agent_data.prompt_ids = merged.token_ids
        agent_data.response_mask = mask
        if agent_data.response_logprobs:
            agent_data.response_logprobs = logprobs
        agent_data.user_turns += 1
        # Unlike the stock loop, a response that overflows is still committed (the final output is cut at
        # response_length), so the trajectory never ends on a call without its response.
        if len(mask) >= self.response_length:
            self._drop_generation_prompt(agent_data, schemas)
            return AgentState.TERMINATED
        return AgentState.GENERATING

    def _drop_generation_prompt(self, agent_data: AgentData, schemas: list[dict]) -> None:
        """The stream ends here: remove the next turn's header (`<|im_start|>assistant\n` for Qwen), which no turn
        follows, so the output never ends on an empty assistant header (or on part of one, after the final cut)."""
        header = self.continuous_token_builder.render_delta_token_id(
            agent_data.messages, [], add_generation_prompt=True, tools=schemas
        )
        if not header or agent_data.prompt_ids[-len(header) :] != header:
            raise RuntimeError(f"{AGENT_NAME}: the stream does not end with the chat template's generation prompt")
        del agent_data.prompt_ids[-len(header) :]
        del agent_data.response_mask[-len(header) :]
        if agent_data.response_logprobs:
            del agent_data.response_logprobs[-len(header) :]

    async def _call_tool(
        self, tool_call: FunctionCall, tools_kwargs: dict[str, Any], agent_data: AgentData
    ) -> tuple[ToolResponse, float, dict]:
        """Run one call; its `ToolOutcome` is decided here (never from response text)."""
        active_tools = getattr(agent_data, "_active_tools", self.tools)
        if not self.policy.active:
            (response, reward, metrics), crashed = await tool_execution.observe_crashes(
                super()._call_tool(tool_call, tools_kwargs, agent_data)
            )
            outcome = tool_execution.stock_outcome(tool_call, active_tools, metrics, crashed)
            self.policy.count_round([outcome], first_attempt=True)
            self.turn_recorder.on_call(agent_data.messages, [outcome])
            self.failed_calls.on_call(agent_data.messages, agent_data.response_ids, [outcome])
            return response, reward, metrics
        result = await tool_execution.execute_call(tool_call, active_tools, tools_kwargs, agent_data)
        self.turn_recorder.on_call(agent_data.messages, [result.outcome])
        attempt = self.policy.open.event.retries if self.policy.open is not None else 0
        self.failed_calls.on_call(agent_data.messages, agent_data.response_ids, [result.outcome], attempt)
        response = result.response
        if response.text:
            text = tool_execution.truncate_text(
                response.text, self.max_tool_response_length, self.tool_response_truncate_side
            )
            response = response.model_copy(update={"text": text})
        return response, result.reward, {**result.metrics, TOOL_OUTCOME_KEY: result.outcome.to_dict()}

    # ---- purification -----------------------------------------------------------------------------

    async def _purify(
        self, agent_data: AgentData, replacement: TurnRecord, calls: list[FunctionCall], replacement_code: str
    ) -> None:
        """Splice the successful retry over the failed turn; drop the failed branch from tokens and messages."""
        open_position = self.policy.open
        base: StreamPosition = open_position.stream_position
        failed: TurnRecord = open_position.failed_turn
        failed_boundary, new_boundary = self.find_call_start(failed.ids), self.find_call_start(replacement.ids)
        mode, similarity = self.policy.choose_mode(
            replacement_code, splittable=failed_boundary is not None and new_boundary is not None
        )
        failed_turn = GeneratedTurn(failed.ids, failed.logprobs, failed_boundary)
        new_turn = GeneratedTurn(replacement.ids, replacement.logprobs, new_boundary)
        stream = (agent_data.prompt_ids, agent_data.response_mask, agent_data.response_logprobs or None)
        lengths = StreamLengths(base.ids, base.mask, base.logprobs)
        result = splice(*stream, lengths, failed_turn, new_turn, mode)
        content, parsed = await self._parse_turn(agent_data, result.turn_ids)
        parse_fallback = mode == "shallow" and not _same_calls(parsed, calls)
        if parse_fallback:
            # The kept reasoning changes what the parser sees (e.g. a stray start marker): the whole new turn goes in.
            mode = "deep"
            result = splice(*stream, lengths, failed_turn, new_turn, mode)
            content, parsed = await self._parse_turn(agent_data, result.turn_ids)
        if not _same_calls(parsed, calls):
            raise RuntimeError(f"{AGENT_NAME}: the purified turn does not parse to the calls that were executed")
        score, decision, scoring_error = await self._gate_splice(agent_data, result, replacement)
        if decision == "append":
            # The failure stays: failed turn, its error and the retry, as without SAAR (all on-policy).
            self.policy.on_appended(mode, similarity, replacement_code, score, scoring_error)
            return
        self.stats.shallow_parse_fallbacks += int(parse_fallback)
        if self.negatives is not None:  # the failed first attempt, taken from the stream before it is cut
            # verl's num_turns counts user + assistant turns + 1; the failed turn is one more assistant turn.
            turns = base.user_turns + base.assistant_turns + 2
            negative = failed_attempt(*stream, lengths, failed.ids, failed.logprobs, failed_boundary, num_turns=turns)
            self.negatives.offer(negative, success_span(result.spliced_start, result.spliced_end, mode, new_boundary))
        self.failed_calls.on_purified(agent_data.messages[base.messages], self.negatives)  # before messages are cut
        # The spliced tokens keep the log-probs they were sampled with (the behaviour policy, error context), so
        # a token-level rollout IS correction (rollback_is_correction) weighs them against the purified context.
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
        del _history(agent_data)[base.history : replacement.before.history]
        agent_data.user_turns = base.user_turns
        agent_data.assistant_turns = base.assistant_turns + 1
        attempt = open_position.event.retries
        self.stats.spliced_spans.append(SplicedSpan(result.spliced_start, result.spliced_end, attempt, mode))
        leaked = False
        if mode == "deep":
            reasoning = self.tokenizer.decode(
                replacement.ids[:new_boundary] if new_boundary is not None else replacement.ids
            )
            leaked = mentions_error(reasoning, open_position.error_texts, open_position.exception_types)
        self.policy.on_purified(mode, similarity, replacement_code, leaked, score, decision, scoring_error)

    async def _gate_splice(
        self, agent_data: AgentData, result: SpliceResult, replacement: TurnRecord
    ) -> tuple[offpolicy.IsScore | None, IsDecision | None, str | None]:
        """Score the splice (with the gate or the measurement on) and decide: (score, decision, scoring error).
        A scoring that keeps failing gives no score; the gate then appends (nothing unscored is spliced in)."""
        if not self.saar_config.scores_splices:
            return None, None, None
        spliced = result.spliced_end - result.spliced_start
        end = len(result.ids)
        sampled_end = replacement.before.ids + len(replacement.ids)
        sampled = replacement.logprobs[len(replacement.ids) - spliced :] if replacement.logprobs else None
        try:
            score = await self._score_tokens(
                agent_data,
                purified=(result.ids, range(end - spliced, end)),
                error_context=(agent_data.prompt_ids[:sampled_end], range(sampled_end - spliced, sampled_end)),
                sampled_logprobs=sampled,
            )
        except ScoringFailed as error:
            self.policy.on_scoring_failed(str(error))
            return None, "append" if self.saar_config.rollback_is_threshold is not None else None, str(error)
        return score, self.policy.is_decision(score), None

    async def _score_tokens(
        self,
        agent_data: AgentData,
        purified: tuple[list[int], Sequence[int]],
        error_context: tuple[list[int], Sequence[int]],
        sampled_logprobs: Sequence[float] | None,
    ) -> offpolicy.IsScore:
        """Per-token log ratios of tokens sampled in `error_context` (a stream and their indices in it) and trained
        in `purified`: the target side is a prompt-log-prob prefill of the purified stream. The behaviour side is
        the log-probs the tokens were sampled with where those are of the raw temperature-1 distribution the
        engines' prompt log-probs use; otherwise (T != 1, top-k/top-p, no sampled log-probs) a second prefill of
        the error context, so both sides are of one distribution."""
        target = offpolicy.logprobs_at(await self._prompt_logprobs(agent_data, purified[0]), purified[1])
        if sampled_logprobs is not None and offpolicy.sampled_logprobs_are_raw(self._sampling_params):
            behaviour = list(sampled_logprobs)
        else:
            stream, indices = error_context
            behaviour = offpolicy.logprobs_at(await self._prompt_logprobs(agent_data, stream), indices)
        return offpolicy.token_log_ratios(target, behaviour)

    async def _prompt_logprobs(self, agent_data: AgentData, ids: list[int]) -> list[float]:
        """Per-token log-probs of `ids` from the trajectory's own server (same request id, so the same replica).

        An aborted answer, or an exception from the server (SGLang's adapter raises on an aborted prompt-log-prob
        request), is transient: sent again, then `ScoringFailed`. A completed answer without prompt log-probs is a
        backend that cannot serve the setting: `SaarConfigError`, naming the key."""
        failure = ""
        for attempt in range(1, SCORING_ATTEMPTS + 1):
            try:
                with simple_timer("generate_sequences", agent_data.metrics):  # inference time, like the generations
                    output = await self.server_manager.generate(
                        request_id=agent_data.request_id,
                        prompt_ids=list(ids),
                        sampling_params=offpolicy.scoring_params(self._sampling_params),
                    )
            except Exception as error:
                failure = f"{type(error).__name__}: {error}"
            else:
                if not _aborted(output):
                    return self._token_logprobs(output, len(ids))
                failure = f"aborted (stop_reason={output.stop_reason!r}, {len(output.token_ids)} tokens)"
            logger.warning("%s: scoring request %d/%d failed: %s", AGENT_NAME, attempt, SCORING_ATTEMPTS, failure)
        raise ScoringFailed(f"{SCORING_ATTEMPTS} scoring requests failed, the last: {failure}")

    def _token_logprobs(self, output: Any, length: int) -> list[float]:
        try:
            return offpolicy.prompt_token_logprobs(output.extra_fields, length)
        except offpolicy.PromptLogprobsError as error:
            key = (
                "rollback_is_threshold" if self.saar_config.rollback_is_threshold is not None else "rollback_is_measure"
            )
            raise SaarConfigError(
                f"actor_rollout_ref.rollout.multi_turn.{key} needs an inference server that returns prompt log-probs "
                f"(sampling param prompt_logprobs: verl's vLLM and SGLang servers and the `cpu` rollout do): {error}. "
                f"Unset {key} or use such a backend."
            ) from error

    async def _parse_turn(self, agent_data: AgentData, turn_ids: list[int]) -> tuple[str, list[FunctionCall]]:
        active_tools = getattr(agent_data, "_active_tools", self.tools)
        content, calls = await self.tool_parser.extract_tool_calls(
            turn_ids, [tool.tool_schema for tool in active_tools.values()]
        )
        return content, calls[: self.max_parallel_calls]

    async def _end_position(self, agent_data: AgentData) -> None:
        """Apply `rollback_exhausted_keep` to the position just given up: with `last`, drop its earlier attempts.
        Scored first (the gate or the measurement): below the gate's threshold every attempt stays."""
        closed = self.policy.closed
        if self.saar_config.rollback_exhausted_keep == "all" or closed.last_round == closed.stream_position:
            return
        if self.saar_config.scores_splices and await self._gate_kept_attempt(agent_data) == "append":
            return
        self._delete_segment(agent_data, closed.stream_position, closed.last_round)
        # What stays of the position (its last attempt, and an answer after it) was sampled after errors that are
        # now gone: its model tokens are recorded as spliced, run by run of the mask.
        mask, start = agent_data.response_mask, closed.stream_position.mask
        for index in range(start, len(mask) + 1):
            if index == len(mask) or mask[index] == 0:
                if index > start:
                    self.stats.spliced_spans.append(SplicedSpan(start, index, closed.event.retries, "exhausted"))
                start = index + 1

    async def _gate_kept_attempt(self, agent_data: AgentData) -> IsDecision | None:
        """Score the model tokens of what `last` keeps (the last attempt and any answer after it), sampled after
        the earlier attempts and their errors, in the stream those are cut from; record the score and decision."""
        closed = self.policy.closed
        start, cut = closed.stream_position, closed.last_round
        prompt_length = len(agent_data.prompt_ids) - len(agent_data.response_mask)
        kept = [index for index in range(cut.mask, len(agent_data.response_mask)) if agent_data.response_mask[index]]
        removed = cut.ids - start.ids
        purified = agent_data.prompt_ids[: start.ids] + agent_data.prompt_ids[cut.ids :]
        sampled = [agent_data.response_logprobs[index] for index in kept] if agent_data.response_logprobs else None
        try:
            score = await self._score_tokens(
                agent_data,
                purified=(purified, [prompt_length + index - removed for index in kept]),
                error_context=(agent_data.prompt_ids, [prompt_length + index for index in kept]),
                sampled_logprobs=sampled,
            )
        except ScoringFailed as error:
            self.policy.on_scoring_failed(str(error))
            decision = "append" if self.saar_config.rollback_is_threshold is not None else None
            self.policy.on_exhausted_scored(None, decision, str(error))
            return decision
        decision = self.policy.is_decision(score)
        self.policy.on_exhausted_scored(score, decision)
        return decision

    def _delete_segment(self, agent_data: AgentData, start: StreamPosition, end: StreamPosition) -> None:
        """Remove everything between two stream positions (turns, tool responses, history) and their turn counts."""
        del agent_data.prompt_ids[start.ids : end.ids]
        del agent_data.response_mask[start.mask : end.mask]
        del agent_data.response_logprobs[start.logprobs : end.logprobs]
        del agent_data.messages[start.messages : end.messages]
        del agent_data.tool_rewards[start.tool_rewards : end.tool_rewards]
        del _history(agent_data)[start.history : end.history]
        agent_data.assistant_turns -= end.assistant_turns - start.assistant_turns
        agent_data.user_turns -= end.user_turns - start.user_turns

    def _truncate(self, agent_data: AgentData, position: StreamPosition) -> None:
        """Cut the stream, messages, history and turn counters back to `position`."""
        agent_data.prompt_ids = agent_data.prompt_ids[: position.ids]
        agent_data.response_mask = agent_data.response_mask[: position.mask]
        agent_data.response_logprobs = agent_data.response_logprobs[: position.logprobs]
        agent_data.messages = agent_data.messages[: position.messages]
        agent_data.tool_rewards = agent_data.tool_rewards[: position.tool_rewards]
        del _history(agent_data)[position.history :]
        agent_data.user_turns = position.user_turns
        agent_data.assistant_turns = position.assistant_turns

    # ---- the end of a trajectory ------------------------------------------------------------------

    def _failed_trajectory(self, agent_data: AgentData) -> AgentLoopOutput:
        """A trajectory that raised: its prompt and one end-of-turn token with mask 0 (nothing to train on), with
        the same fields as every other trajectory so verl can still concatenate the batch."""
        self.stats.count_failure(ErrorCategory.AGENT_LOOP_ERROR)
        self.stats.infra_errors += 1
        prompt_length = len(agent_data.prompt_ids) - len(agent_data.response_mask)
        return AgentLoopOutput(
            prompt_ids=agent_data.prompt_ids[:prompt_length],
            response_ids=[self.tokenizer.eos_token_id],
            response_mask=[0],
            response_logprobs=[0.0] if self.rollout_config.calculate_log_probs else None,
            num_turns=1,
            metrics=agent_data.metrics,
            extra_fields={**agent_data.extra_fields, "turn_scores": [], "tool_rewards": []},
        )

    def _finish(self, output: AgentLoopOutput) -> None:
        stats = self.stats
        length = len(output.response_ids)
        stats.response_tokens = length
        spans = [
            SplicedSpan(span.start, min(span.end, length), span.attempt, span.kind)
            for span in stats.spliced_spans
            if span.start < length
        ]
        stats.spliced_spans = spans
        stats.spliced_tokens = sum(sum(output.response_mask[span.start : span.end]) for span in spans)
        finder = self.find_call_start or getattr(self.tool_parser, "find_call_start", None)
        if finder is None and self._markers is not None:
            finder = boundary_finder(self.tokenizer, self._markers).find
        turns = self.turn_recorder.turns(
            self._agent_data.messages if self._agent_data is not None else [],
            output.response_ids,
            output.response_mask,  # before an infrastructure drop zeroes it
            lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True),
            finder,
        )
        output.extra_fields.update(self.turn_recorder.extra_fields(turns))
        if self.saar_config.drop_infra_error_trajectories and stats.infra_errors > 0:
            # verl's trainers use the response mask as the loss mask: all zero, the trajectory adds no gradient.
            output.response_mask = [0] * len(output.response_mask)
            stats.infra_dropped = 1
        output.extra_fields.update(stats.to_extra_fields())
        messages = self._agent_data.messages if self._agent_data is not None else []
        kept_negatives = self.negatives.finish(self.response_length, output.response_mask)[0] if self.negatives else []
        failed = self.failed_calls.failed_calls(messages, turns, finder, {pair.pair_id for pair in kept_negatives})
        output.extra_fields.update(self.failed_calls.extra_fields(failed))


def _with_note(results: list, outcomes: list[ToolOutcome], note: str) -> list:
    """`results` with `note` added to the last failed call's text (what the model reads next)."""
    last_failed = max(index for index, outcome in enumerate(outcomes) if not outcome.is_ok)
    response, reward, metrics = results[last_failed]
    noted = response.model_copy(update={"text": (response.text or "") + note})
    return [*results[:last_failed], (noted, reward, metrics), *results[last_failed + 1 :]]
