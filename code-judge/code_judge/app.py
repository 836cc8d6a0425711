"""The HTTP API: upstream code-judge's endpoints and JSON, plus `/metrics` and an optional request deadline.

Verdicts travel as JSON bytes from the worker to the client untouched; the API only frames them. A client may
send `X-Request-Timeout: <seconds>` to bound how long the request waits (queue + run); items without a verdict by
then answer `queue_timeout`. Without it a request waits up to MAX_QUEUE_WAIT_TIME (1 h): nothing expires early.
All endpoints behave like upstream's long-batch ones (no item is ever dropped from the queue); the batch
variants are kept for compatibility. A full queue or an unreachable Redis answers 503 with `Retry-After`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated

import orjson
from fastapi import FastAPI, Header, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from code_judge.metrics import ApiMetrics
from code_judge.schemas import BatchSubmission, Submission
from code_judge.service import JudgeService, Overloaded, RedisUnavailable
from code_judge.settings import JudgeSettings

_JSON = "application/json"
_RETRY_AFTER_S = "1"

RequestTimeout = Annotated[float | None, Header(alias="X-Request-Timeout", gt=0)]


def create_app(settings: JudgeSettings) -> FastAPI:
    metrics = ApiMetrics()
    service = JudgeService(settings, metrics)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(title="code-judge", lifespan=lifespan)
    app.add_exception_handler(RequestValidationError, _schema_error)
    _add_status_routes(app, service, metrics)
    _add_judge_routes(app, _Judge(service, metrics))
    return app


async def _schema_error(_request: Request, exc: Exception) -> Response:
    # FastAPI's own 422 body, but ASCII-escaped: the offending input may hold lone surrogates, which cannot be
    # encoded as UTF-8 and would otherwise turn the 422 into a 500.
    assert isinstance(exc, RequestValidationError)
    body = json.dumps({"detail": jsonable_encoder(exc.errors())}, ensure_ascii=True)
    return Response(body, status_code=422, media_type=_JSON)


def _unavailable(exc: Exception) -> HTTPException:
    return HTTPException(503, detail=str(exc), headers={"Retry-After": _RETRY_AFTER_S})


def _add_status_routes(app: FastAPI, service: JudgeService, metrics: ApiMetrics) -> None:
    @app.get("/ping")
    async def ping() -> str:
        return "pong"

    @app.get("/status")
    async def status() -> dict[str, object]:
        try:
            return await service.status()
        except RedisUnavailable as exc:
            raise _unavailable(exc) from exc

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        try:
            await service.status()  # refreshes the queue-length and live-worker gauges
        except RedisUnavailable:
            pass  # the gauges keep their last values; the request counters are still worth serving
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


class _Judge:
    """Submits a request's programs, counts it, and turns overload into 503 + Retry-After."""

    def __init__(self, service: JudgeService, metrics: ApiMetrics):
        self._service = service
        self._metrics = metrics

    async def verdicts(
        self, endpoint: str, submissions: list[Submission], with_output: bool, timeout_s: float | None
    ) -> list[bytes]:
        started = time.perf_counter()
        self._metrics.requests.labels(endpoint).inc()
        self._metrics.submissions.labels(endpoint).inc(len(submissions))
        try:
            verdicts = await self._service.submit(submissions, with_output, timeout_s)
        except (Overloaded, RedisUnavailable) as exc:
            raise _unavailable(exc) from exc
        self._metrics.latency.labels(endpoint).observe(time.perf_counter() - started)
        return verdicts

    async def single(self, endpoint: str, submission: Submission, timeout_s: float | None) -> Response:
        (verdict,) = await self.verdicts(endpoint, [submission], endpoint == "/run", timeout_s)
        return Response(verdict, media_type=_JSON)

    async def batch(self, endpoint: str, batch: BatchSubmission, timeout_s: float | None) -> Response:
        verdicts = await self.verdicts(endpoint, batch.submissions, endpoint.startswith("/run"), timeout_s)
        sub_id = str(uuid.uuid4()) if batch.sub_id is None else batch.sub_id
        body = b'{"sub_id":' + orjson.dumps(sub_id) + b',"results":[' + b",".join(verdicts) + b"]}"
        return Response(body, media_type=_JSON)


def _add_judge_routes(app: FastAPI, judge: _Judge) -> None:
    @app.post("/run")
    async def run(submission: Submission, timeout_s: RequestTimeout = None) -> Response:
        return await judge.single("/run", submission, timeout_s)

    @app.post("/judge")
    async def judge_one(submission: Submission, timeout_s: RequestTimeout = None) -> Response:
        return await judge.single("/judge", submission, timeout_s)

    # Upstream's batch and long-batch variants behave alike here: nothing is ever dropped from the queue.
    for path in ("/run/batch", "/judge/batch", "/run/long-batch", "/judge/long-batch"):
        app.post(path)(_batch_endpoint(judge, path))


def _batch_endpoint(judge: _Judge, path: str) -> Callable[..., Awaitable[Response]]:
    async def batch(batch: BatchSubmission, timeout_s: RequestTimeout = None) -> Response:
        return await judge.batch(path, batch, timeout_s)

    return batch
