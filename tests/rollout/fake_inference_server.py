"""A tiny local HTTP server that plays one inference API from canned answers and records requests."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[str, dict[str, Any]], tuple[int, Any]]


class FakeInferenceServer:
    """`responder(path, body) -> (status, json_or_text)`; with `hold_answers`, no answer leaves before the server
    is closed (a server that never answers in time, for the timeout tests)."""

    def __init__(self, responder: Responder, hold_answers: bool = False):
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._released = threading.Event()
        if not hold_answers:
            self._released.set()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append((self.path, body))
                owner._released.wait()
                status, answer = responder(self.path, body)
                data = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        # shutdown() returns once the serving loop next checks it: every 10 ms, not the default 0.5 s per test.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    def __enter__(self) -> FakeInferenceServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
