"""The one HTTP client for the code-judge service, shared by every trajectory of a worker process.

Concurrent `run()` calls are gathered into `/run/long-batch` requests (long-batch items never expire in the
judge's queue, so a burst cannot turn into spurious `queue_timeout`s). Infrastructure failures are retried with
exponential backoff; after the last retry the caller gets `JudgeUnavailable`, whose outcome is always an infra
error: an outage must never look like a mistake of the model.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from cleaner.saar.outcome import JUDGE_INFRA_REASONS, ErrorCategory, ToolOutcome

logger = logging.getLogger(__name__)

RUN_BATCH_PATH = "/run/long-batch"
# Our judge bounds a request's queue + run time by this header and answers `queue_timeout` for items not done by
# then (upstream ignores it). Asking for less than our own HTTP deadline lets finished items come back.
REQUEST_TIMEOUT_HEADER = "X-Request-Timeout"
_JUDGE_DEADLINE_SHARE = 0.9

# Judge `reason` values that mean the service, not the program, failed (cleaner.saar.outcome names their
# categories). A starved program (wall cap hit with CPU budget left on an overloaded judge) is re-run like a
# queue timeout: its verdict says nothing about the code.
_RETRIED_REASONS = {
    reason: JUDGE_INFRA_REASONS[reason] for reason in ("queue_timeout", "internal_error", "worker_starved")
}
_FATAL_REASONS = {"invalid_input": JUDGE_INFRA_REASONS["invalid_input"]}


@dataclass(frozen=True)
class JudgeClientConfig:
    url: str = "http://127.0.0.1:8088"
    request_timeout_s: float = 60.0  # deadline for one HTTP call (90% of it is sent to the judge)
    max_retries: int = 3  # infra failures only: connection errors, 5xx, queue_timeout, internal_error
    backoff_s: float = 0.5  # exponential: retry n (1-based) waits backoff_s * 2**(n-1), i.e. 0.5, 1, 2 s
    max_batch_size: int = 32  # micro-batching of concurrent run() calls into /run/long-batch
    batch_wait_ms: float = 5.0
    max_connections: int = 32

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"JudgeClientConfig.url must start with http:// or https://, got {self.url!r}")
        for name in ("request_timeout_s", "max_batch_size", "max_connections"):
            if getattr(self, name) <= 0:
                raise ValueError(f"JudgeClientConfig.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("max_retries", "backoff_s", "batch_wait_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"JudgeClientConfig.{name} must be >= 0, got {getattr(self, name)!r}")


# The reference implementation's tool yaml names the judge by host and port (its defaults: localhost, 8088).
REFERENCE_ADDRESS_KEYS = ("host_addr", "host_port")
# Its micro-batching keys, which have no exact equivalent here.
_REFERENCE_BATCHING_KEYS = {
    "request_processor_batch_size": "max_batch_size (items per /run/long-batch request)",
    "request_processor_concurrency": "max_connections (concurrent HTTP requests)",
    "request_processor_batch_timeout_seconds": "batch_wait_ms (how long a call waits for others to join its batch)",
}


def with_judge_url(raw: dict[str, Any]) -> dict[str, Any]:
    """A tool `config:` block with the reference's `host_addr`/`host_port` turned into the `judge_url` they name."""
    batching = sorted(set(raw) & set(_REFERENCE_BATCHING_KEYS))
    if batching:
        raise ValueError(
            "code_interpreter: the reference's request_processor_* keys are not used here; the closest keys are "
            + "; ".join(f"{key} -> {_REFERENCE_BATCHING_KEYS[key]}" for key in batching)
        )
    if not any(key in raw for key in REFERENCE_ADDRESS_KEYS):
        return raw
    if "judge_url" in raw:
        raise ValueError("code_interpreter: give the judge as judge_url or as host_addr/host_port, not both")
    host, port = raw.get("host_addr", "localhost"), raw.get("host_port", 8088)
    if not isinstance(host, str) or not host.strip() or "/" in host:
        raise ValueError(f"code_interpreter: host_addr must be a host name or address, got {host!r}")
    if isinstance(port, bool) or not (isinstance(port, int) or (isinstance(port, str) and port.isdigit())):
        raise ValueError(f"code_interpreter: host_port must be a port number, got {port!r}")
    if not 0 < int(port) < 65536:
        raise ValueError(f"code_interpreter: host_port must be within 1..65535, got {port!r}")
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    rest = {key: value for key, value in raw.items() if key not in REFERENCE_ADDRESS_KEYS}
    return {**rest, "judge_url": f"http://{host}:{int(port)}"}


@dataclass(frozen=True)
class JudgeSubmission:
    code: str
    stdin: str = ""
    expected_output: str | None = None

    def to_json(self) -> dict[str, Any]:
        item: dict[str, Any] = {"type": "python", "solution": self.code, "input": self.stdin}
        if self.expected_output is not None:
            item["expected_output"] = self.expected_output
        return item


@dataclass(frozen=True)
class JudgeVerdict:
    """One item of the judge's answer. The fields after `stderr` are absent from upstream code-judge."""

    success: bool
    run_success: bool
    reason: str
    cost: float
    stdout: str
    stderr: str
    exception_type: str | None = None
    exception_line: int | None = None
    exception_message: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    truncated: bool = False
    limit: str | None = None

    @classmethod
    def from_json(cls, item: Any) -> JudgeVerdict:
        if not isinstance(item, dict):
            raise ValueError(f"judge result item is not an object: {item!r:.200}")
        missing = [key for key in ("success", "run_success", "cost") if key not in item]
        if missing:
            raise ValueError(f"judge result item lacks {missing}: {item!r:.200}")
        return cls(
            success=bool(item["success"]),
            run_success=bool(item["run_success"]),
            reason=item.get("reason") or "",
            cost=float(item["cost"]),
            stdout=item.get("stdout") or "",
            stderr=item.get("stderr") or "",
            exception_type=item.get("exception_type"),
            exception_line=item.get("exception_line"),
            exception_message=item.get("exception_message"),
            exit_code=item.get("exit_code"),
            signal=item.get("signal"),
            truncated=bool(item.get("truncated", False)),
            limit=item.get("limit"),
        )


class JudgeUnavailable(Exception):
    """The judge could not run the submission, even after retries. Never the model's fault."""

    def __init__(self, outcome: ToolOutcome):
        super().__init__(f"code-judge unavailable ({outcome.category.value}): {outcome.detail}")
        self.outcome = outcome


@dataclass
class JudgeClientStats:
    """Counters for benchmarks and tests: how well micro-batching and retries work."""

    http_requests: int = 0
    submissions: int = 0
    retries: int = 0


class _InfraFailure(Exception):
    def __init__(self, category: ErrorCategory, detail: str, retryable: bool):
        super().__init__(detail)
        self.category = category
        self.detail = detail
        self.retryable = retryable


class JudgeClient:
    def __init__(self, config: JudgeClientConfig):
        self.config = config
        self.stats = JudgeClientStats()
        self._http: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[tuple[JudgeSubmission, asyncio.Future[JudgeVerdict]]] = []
        self._flush_timer: asyncio.TimerHandle | None = None
        self._flush_tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def run(self, submission: JudgeSubmission) -> JudgeVerdict:
        """Run one submission; concurrent calls within `batch_wait_ms` share one HTTP request."""
        self._bind_loop()
        future: asyncio.Future[JudgeVerdict] = self._loop.create_future()
        self._pending.append((submission, future))
        if len(self._pending) >= self.config.max_batch_size:
            self._flush()
        elif self._flush_timer is None:
            self._flush_timer = self._loop.call_later(self.config.batch_wait_ms / 1000.0, self._flush)
        return await future

    async def run_batch(self, submissions: Sequence[JudgeSubmission]) -> list[JudgeVerdict]:
        """Run all submissions now, in chunks of `max_batch_size`; raises JudgeUnavailable if any item failed."""
        self._bind_loop()
        size = self.config.max_batch_size
        chunks = [list(submissions[i : i + size]) for i in range(0, len(submissions), size)]
        answers = await asyncio.gather(*(self._run_chunk(chunk) for chunk in chunks))
        verdicts: list[JudgeVerdict] = []
        for chunk_answers in answers:
            for answer in chunk_answers:
                if isinstance(answer, JudgeUnavailable):
                    raise answer
                verdicts.append(answer)
        return verdicts

    async def aclose(self) -> None:
        self._closed = True
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        pending, self._pending = self._pending, []
        for _, future in pending:
            if not future.done():
                future.set_exception(RuntimeError("JudgeClient was closed before the submission was sent"))
        if self._flush_tasks:
            await asyncio.gather(*self._flush_tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _bind_loop(self) -> None:
        if self._closed:
            raise RuntimeError("JudgeClient is closed")
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            limits = httpx.Limits(
                max_connections=self.config.max_connections, max_keepalive_connections=self.config.max_connections
            )
            self._http = httpx.AsyncClient(
                base_url=self.config.url, limits=limits, timeout=httpx.Timeout(self.config.request_timeout_s)
            )
        elif loop is not self._loop:
            raise RuntimeError("JudgeClient is bound to another event loop; use shared_judge_client() per loop")

    def _flush(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        pending, self._pending = self._pending, []
        size = self.config.max_batch_size
        for start in range(0, len(pending), size):
            task = self._loop.create_task(self._deliver(pending[start : start + size]))
            self._flush_tasks.add(task)
            task.add_done_callback(self._flush_tasks.discard)

    async def _deliver(self, batch: list[tuple[JudgeSubmission, asyncio.Future[JudgeVerdict]]]) -> None:
        try:
            answers = await self._run_chunk([submission for submission, _ in batch])
        except BaseException as exc:  # a bug or cancellation must reach the callers, not vanish in this task
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for (_, future), answer in zip(batch, answers):
            if future.done():  # the caller was cancelled
                continue
            if isinstance(answer, JudgeUnavailable):
                future.set_exception(answer)
            else:
                future.set_result(answer)

    async def _run_chunk(self, submissions: list[JudgeSubmission]) -> list[JudgeVerdict | JudgeUnavailable]:
        """One /run/long-batch call per attempt; only items (or whole requests) that failed on infra are re-sent."""
        answers: list[JudgeVerdict | JudgeUnavailable | None] = [None] * len(submissions)
        todo = list(range(len(submissions)))
        for attempt in range(self.config.max_retries + 1):
            if attempt > 0:
                self.stats.retries += 1
                await asyncio.sleep(self.config.backoff_s * 2 ** (attempt - 1))
            last = attempt == self.config.max_retries
            try:
                items = await self._post([submissions[i] for i in todo])
            except _InfraFailure as failure:
                logger.warning("code-judge request failed (attempt %d): %s", attempt + 1, failure.detail)
                if last or not failure.retryable:
                    for i in todo:
                        answers[i] = JudgeUnavailable(ToolOutcome.infra_error(failure.category, failure.detail))
                    todo = []
                    break
                continue
            retry: list[int] = []
            for i, verdict in zip(todo, items):
                category = _RETRIED_REASONS.get(verdict.reason)
                fatal = _FATAL_REASONS.get(verdict.reason)
                if fatal is not None or (category is not None and last):
                    detail = f"judge answered reason={verdict.reason!r} after {attempt + 1} attempt(s)"
                    answers[i] = JudgeUnavailable(ToolOutcome.infra_error(fatal or category, detail))
                elif category is not None:
                    retry.append(i)
                else:
                    answers[i] = verdict
            todo = retry
            if not todo:
                break
        return answers  # type: ignore[return-value]  # every slot is filled by the loop above

    async def _post(self, submissions: list[JudgeSubmission]) -> list[JudgeVerdict]:
        body = {"type": "batch", "submissions": [submission.to_json() for submission in submissions]}
        self.stats.http_requests += 1
        self.stats.submissions += len(submissions)
        try:
            judge_deadline = f"{self.config.request_timeout_s * _JUDGE_DEADLINE_SHARE:.3f}"
            response = await asyncio.wait_for(
                self._http.post(RUN_BATCH_PATH, json=body, headers={REQUEST_TIMEOUT_HEADER: judge_deadline}),
                timeout=self.config.request_timeout_s,
            )
        except (httpx.TransportError, asyncio.TimeoutError) as exc:
            raise _InfraFailure(
                ErrorCategory.JUDGE_UNREACHABLE, f"{type(exc).__name__} on {self.config.url}: {exc}", True
            ) from exc
        if response.status_code >= 500:
            raise _InfraFailure(
                ErrorCategory.JUDGE_UNREACHABLE, f"HTTP {response.status_code}: {response.text[:200]}", True
            )
        if response.status_code != 200:
            # A 4xx means the request itself is wrong (e.g. a schema change): retrying cannot help.
            raise _InfraFailure(
                ErrorCategory.JUDGE_INTERNAL_ERROR, f"HTTP {response.status_code}: {response.text[:200]}", False
            )
        try:
            results = response.json()["results"]
            if len(results) != len(submissions):
                raise ValueError(f"{len(results)} results for {len(submissions)} submissions")
            return [JudgeVerdict.from_json(item) for item in results]
        except (ValueError, KeyError, TypeError) as exc:
            raise _InfraFailure(ErrorCategory.JUDGE_INTERNAL_ERROR, f"malformed judge answer: {exc}", False) from exc


_shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[JudgeClientConfig, JudgeClient]] = (
    weakref.WeakKeyDictionary()
)


def shared_judge_client(config: JudgeClientConfig) -> JudgeClient:
    """The process-wide client for `config` on the running event loop (an httpx client cannot cross loops)."""
    loop = asyncio.get_running_loop()
    clients = _shared.setdefault(loop, {})
    client = clients.get(config)
    if client is None or client.closed:
        client = JudgeClient(config)
        clients[config] = client
    return client
