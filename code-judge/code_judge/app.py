"""The HTTP API: upstream code-judge's endpoints and JSON, plus `/metrics` and an optional request deadline.

Verdicts travel as JSON bytes from the worker to the client untouched; the API only frames them. A client may
send `X-Request-Timeout: <seconds>` to bound how long the request waits (queue + run); items without a verdict by
then answer `queue_timeout`. Without it a request waits up to MAX_QUEUE_WAIT_TIME (1 h): nothing expires early.
All endpoints behave like upstream's long-batch ones (no item is ever dropped from the queue); the batch
variants are kept for compatibility. A full queue or an unreachable Redis answers 503 with `Retry-After`.

A valid submission skips FastAPI's per-request machinery (`JudgeFastPath`): the same models validate it, the
same code answers it, for about half of FastAPI's CPU per request. Everything else goes through FastAPI.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

import orjson
from fastapi import FastAPI, Header, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import Field, TypeAdapter, ValidationError

from code_judge.metrics import ApiMetrics
from code_judge.schemas import BatchSubmission, Submission
from code_judge.service import JudgeService, Overloaded, RedisUnavailable
from code_judge.settings import JudgeSettings

_JSON = "application/json"
_RETRY_AFTER_S = "1"

RequestTimeout = Annotated[float | None, Header(alias="X-Request-Timeout", gt=0)]
_TIMEOUT_HEADER = TypeAdapter(Annotated[float, Field(gt=0)])
_SINGLE = ("/run", "/judge")
_BATCH_PATHS = ("/run/batch", "/judge/batch", "/run/long-batch", "/judge/long-batch")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def create_app(settings: JudgeSettings) -> JudgeFastPath:
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
    judge = _Judge(service, metrics)
    _add_status_routes(app, service, metrics)
    _add_judge_routes(app, judge)
    return JudgeFastPath(app, judge)


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

    async def single(self, endpoint: str, submission: Submission, timeout_s: float | None) -> bytes:
        (verdict,) = await self.verdicts(endpoint, [submission], endpoint == "/run", timeout_s)
        return verdict

    async def batch(self, endpoint: str, batch: BatchSubmission, timeout_s: float | None) -> bytes:
        verdicts = await self.verdicts(endpoint, batch.submissions, endpoint.startswith("/run"), timeout_s)
        sub_id = str(uuid.uuid4()) if batch.sub_id is None else batch.sub_id
        return b'{"sub_id":' + orjson.dumps(sub_id) + b',"results":[' + b",".join(verdicts) + b"]}"


def _add_judge_routes(app: FastAPI, judge: _Judge) -> None:
    @app.post("/run")
    async def run(submission: Submission, timeout_s: RequestTimeout = None) -> Response:
        return Response(await judge.single("/run", submission, timeout_s), media_type=_JSON)

    @app.post("/judge")
    async def judge_one(submission: Submission, timeout_s: RequestTimeout = None) -> Response:
        return Response(await judge.single("/judge", submission, timeout_s), media_type=_JSON)

    # Upstream's batch and long-batch variants behave alike here: nothing is ever dropped from the queue.
    for path in _BATCH_PATHS:
        app.post(path)(_batch_endpoint(judge, path))


def _batch_endpoint(judge: _Judge, path: str) -> Callable[..., Awaitable[Response]]:
    async def batch(batch: BatchSubmission, timeout_s: RequestTimeout = None) -> Response:
        return Response(await judge.batch(path, batch, timeout_s), media_type=_JSON)

    return batch


class JudgeFastPath:
    """The ASGI application: answers a valid POST to a judge endpoint itself, and hands everything else to FastAPI.

    FastAPI's routing, dependency solving and body handling cost about as much CPU per request as the rest of the
    API together. A submission is answered here when its body is plain JSON (no content type, or
    `application/json`) that the endpoint's pydantic model accepts, and its `X-Request-Timeout` (if any) is valid:
    by the same `_Judge` code, with the same metrics and the same 503s. Any other request, including every one
    that FastAPI would answer 422, goes on to FastAPI with its body, which answers exactly as before.
    """

    def __init__(self, app: FastAPI, judge: _Judge):
        self.app = app
        self._judge = judge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path")
        if scope["type"] != "http" or scope["method"] != "POST" or (path not in _BATCH_PATHS and path not in _SINGLE):
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:
            return  # the client went away before sending its request
        parsed = _parse_submission(path, scope["headers"], body)
        if parsed is None:
            await self.app(scope, _replay(body, receive), send)
            return
        submission, timeout_s = parsed
        try:
            if isinstance(submission, BatchSubmission):
                answer = await self._judge.batch(path, submission, timeout_s)
            else:
                answer = await self._judge.single(path, submission, timeout_s)
        except HTTPException as exc:
            headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (exc.headers or {}).items()]
            await _respond(send, exc.status_code, orjson.dumps({"detail": exc.detail}), headers)
            return
        await _respond(send, 200, answer, [])


def _parse_submission(
    path: str, headers: list[tuple[bytes, bytes]], body: bytes
) -> tuple[Submission | BatchSubmission, float | None] | None:
    """The request's submission and deadline, or None when FastAPI should answer it (it may be invalid)."""
    content_type = timeout = None
    for name, value in headers:
        if name == b"content-type" and content_type is None:
            content_type = value
        elif name == b"x-request-timeout" and timeout is None:
            timeout = value
    if content_type is not None and content_type.split(b";", 1)[0].strip().lower() != b"application/json":
        return None
    model = BatchSubmission if path in _BATCH_PATHS else Submission
    try:
        timeout_s = None if timeout is None else _TIMEOUT_HEADER.validate_python(timeout.decode("latin-1"))
        return model.model_validate_json(body), timeout_s
    except ValidationError:
        return None


async def _read_body(receive: Receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """`receive` for an application that has not seen the body yet: the body first, then the connection's own."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    length = str(len(body)).encode()
    head = [(b"content-length", length), (b"content-type", _JSON.encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})
