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
from collections.abc import AsyncIterator
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

    @app.exception_handler(RequestValidationError)
    async def schema_error(_request: Request, exc: RequestValidationError) -> Response:
        # FastAPI's own 422 body, but ASCII-escaped: the offending input may hold lone surrogates, which
        # cannot be encoded as UTF-8 and would otherwise turn the 422 into a 500.
        body = json.dumps({"detail": jsonable_encoder(exc.errors())}, ensure_ascii=True)
        return Response(body, status_code=422, media_type=_JSON)

    async def judge(
        endpoint: str, submissions: list[Submission], with_output: bool, timeout_s: float | None
    ) -> list[bytes]:
        started = time.perf_counter()
        metrics.requests.labels(endpoint).inc()
        metrics.submissions.labels(endpoint).inc(len(submissions))
        try:
            verdicts = await service.submit(submissions, with_output, timeout_s)
        except (Overloaded, RedisUnavailable) as exc:
            raise HTTPException(503, detail=str(exc), headers={"Retry-After": _RETRY_AFTER_S}) from exc
        metrics.latency.labels(endpoint).observe(time.perf_counter() - started)
        return verdicts

    def batch_body(sub_id: str | int | None, verdicts: list[bytes]) -> Response:
        sub_id = str(uuid.uuid4()) if sub_id is None else sub_id
        body = b'{"sub_id":' + orjson.dumps(sub_id) + b',"results":[' + b",".join(verdicts) + b"]}"
        return Response(body, media_type=_JSON)

    @app.get("/ping")
    async def ping() -> str:
        return "pong"

    @app.get("/status")
    async def status() -> dict[str, object]:
        try:
            return await service.status()
        except RedisUnavailable as exc:
            raise HTTPException(503, detail=str(exc), headers={"Retry-After": _RETRY_AFTER_S}) from exc

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        try:
            await service.status()  # refreshes the queue-length and live-worker gauges
        except RedisUnavailable:
            pass  # the gauges keep their last values; the request counters are still worth serving
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/run")
    async def run(submission: Submission, timeout_s: RequestTimeout = None) -> Response:
        return Response((await judge("/run", [submission], True, timeout_s))[0], media_type=_JSON)

    @app.post("/judge")
    async def judge_one(submission: Submission, timeout_s: RequestTimeout = None) -> Response:
        return Response((await judge("/judge", [submission], False, timeout_s))[0], media_type=_JSON)

    def batch_route(path: str, with_output: bool) -> None:
        async def batch(batch: BatchSubmission, timeout_s: RequestTimeout = None) -> Response:
            return batch_body(batch.sub_id, await judge(path, batch.submissions, with_output, timeout_s))

        app.post(path)(batch)

    batch_route("/run/batch", True)
    batch_route("/judge/batch", False)
    batch_route("/run/long-batch", True)
    batch_route("/judge/long-batch", False)
    return app
