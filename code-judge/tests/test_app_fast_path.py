"""The API's fast path: which requests it answers itself, and that everything else reaches FastAPI unchanged."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi import FastAPI, HTTPException

from code_judge.app import JudgeFastPath, _parse_submission
from code_judge.schemas import BatchSubmission, Submission

JSON = [(b"content-type", b"application/json")]
BODY = json.dumps({"type": "python", "solution": "print(1)", "sub_id": 7}).encode()


def test_a_valid_submission_is_parsed_with_its_deadline():
    submission, timeout_s = _parse_submission("/judge", [*JSON, (b"x-request-timeout", b"2.5")], BODY)
    assert isinstance(submission, Submission) and submission.sub_id == 7 and timeout_s == 2.5
    batch = json.dumps({"type": "batch", "submissions": [{"type": "python", "solution": "1"}]}).encode()
    assert isinstance(_parse_submission("/run/long-batch", [], batch)[0], BatchSubmission)
    charset = [(b"content-type", b"Application/JSON; charset=utf-8")]
    assert _parse_submission("/run", charset, BODY) is not None


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        (JSON, json.dumps({"type": "python", "solution": "print('\ud800')"}).encode()),  # a lone surrogate
        (JSON, json.dumps({"type": "ruby", "solution": "1"}).encode()),
        (JSON, b""),
        (JSON, b"{not json"),
        ([(b"content-type", b"text/plain")], BODY),  # FastAPI does not read it as JSON
        ([*JSON, (b"x-request-timeout", b"-1")], BODY),
        ([*JSON, (b"x-request-timeout", b"soon")], BODY),
    ],
)
def test_anything_fastapi_might_refuse_is_left_to_it(headers, body):
    assert _parse_submission("/run", headers, body) is None


class FakeJudge:
    def __init__(self, error: HTTPException | None = None):
        self.error = error
        self.calls: list[tuple[str, float | None]] = []

    async def single(self, endpoint: str, submission: Submission, timeout_s: float | None) -> bytes:
        self.calls.append((endpoint, timeout_s))
        if self.error is not None:
            raise self.error
        return b'{"sub_id":' + json.dumps(submission.sub_id).encode() + b"}"


def call(app: JudgeFastPath, path: str, headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> list[dict]:
    """One request through the ASGI app, its body in `chunks`; the messages the app sent."""
    incoming = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[dict] = []

    async def receive() -> dict:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": headers, "query_string": b""}
    asyncio.run(app(scope, receive, send))
    return sent


def fallback_app() -> FastAPI:
    app = FastAPI()

    @app.post("/judge")
    async def judge(submission: Submission) -> dict:
        raise AssertionError("a valid submission must not reach FastAPI")

    return app


def test_a_valid_submission_is_answered_without_fastapi():
    judge = FakeJudge()
    sent = call(JudgeFastPath(fallback_app(), judge), "/judge", JSON, [BODY[:10], BODY[10:]])
    assert sent[0]["status"] == 200 and (b"content-type", b"application/json") in sent[0]["headers"]
    assert sent[1]["body"] == b'{"sub_id":7}' and judge.calls == [("/judge", None)]


def test_overload_answers_503_with_retry_after_like_fastapi():
    judge = FakeJudge(HTTPException(503, detail="the queue is full", headers={"Retry-After": "1"}))
    start, body = call(JudgeFastPath(fallback_app(), judge), "/judge", JSON, [BODY])
    assert start["status"] == 503 and (b"retry-after", b"1") in start["headers"]
    assert json.loads(body["body"]) == {"detail": "the queue is full"}


def test_an_invalid_body_reaches_fastapi_whole_and_gets_its_422():
    judge = FakeJudge()
    bad = json.dumps({"type": "python", "solution": 5}).encode()
    start, body = call(JudgeFastPath(fallback_app(), judge), "/judge", JSON, [bad[:5], bad[5:]])
    assert start["status"] == 422 and judge.calls == []
    assert json.loads(body["body"])["detail"][0]["loc"] == ["body", "solution"]
