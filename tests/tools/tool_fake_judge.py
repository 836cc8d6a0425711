"""A scriptable stand-in for the code-judge HTTP API, for failure modes a healthy real judge cannot produce."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Responder = Callable[[dict[str, Any]], tuple[int, Any]]


def echo_result(item: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """A successful judge result whose stdout is the submitted code (so tests can match items to answers)."""
    result = {
        "sub_id": "x",
        "success": True,
        "run_success": True,
        "cost": 0.001,
        "reason": "",
        "stdout": item["solution"],
        "stderr": "",
    }
    result.update(overrides)
    return result


def echo_all(body: dict[str, Any]) -> tuple[int, Any]:
    return 200, {"sub_id": "b", "results": [echo_result(item) for item in body["submissions"]]}


@dataclass
class FakeJudge:
    url: str
    responders: list[Responder] = field(default_factory=list)  # consumed one per request; echo_all when empty
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        with self.lock:
            self.requests.append(body)
            self.paths.append(path)
            self.headers.append(headers)
            responder = self.responders.pop(0) if self.responders else echo_all
        return responder(body)


@pytest.fixture
def fake_judge():
    state: dict[str, FakeJudge] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, payload = state["judge"].answer(self.path, dict(self.headers), body)
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up first (deadline tests): nobody is left to answer

        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state["judge"] = FakeJudge(url=f"http://127.0.0.1:{server.server_address[1]}")
    # shutdown() returns once the serving loop next checks it (every 10 ms).
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield state["judge"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
