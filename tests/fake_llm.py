"""An OpenAI-compatible Chat Completions server on loopback for the summarizer's tests.

It records every request body, answers deterministically and can fail or stall on demand. The
answer lists the question markers (``Q<n>``) found anywhere in the request, ascending — the
summary so far included — so a test can tell whether a summary carries every earlier turn.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MARKER = re.compile(r"\bQ(\d+)\b")


class FakeLLM:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.mode = "ok"  # "ok" | "fail" (503) | "stall" (sleeps stall_s, then answers)
        self.stall_s = 5.0
        self.on_answer: Callable[[dict[str, Any]], None] | None = None  # called after the answer is flushed
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def answered(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.requests)

    @staticmethod
    def answer_for(body: dict[str, Any]) -> str:
        text = " ".join(str(m.get("content") or "") for m in body.get("messages", []))
        markers = sorted({int(n) for n in MARKER.findall(text)})
        return "Facts: " + " ".join(f"Q{n}" for n in markers) if markers else "Facts: none"

    @contextmanager
    def running(self) -> Iterator[FakeLLM]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                mode = fake.mode
                if mode == "fail":
                    self._send(503, {"error": {"message": "overloaded", "type": "server_error"}})
                    return
                if mode == "stall":
                    time.sleep(fake.stall_s)
                if not self.path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                with fake._lock:
                    fake.requests.append(body)
                text = fake.answer_for(body)
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(fake.requests)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model", "fake"),
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                        ],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
                    },
                )
                if fake.on_answer is not None:
                    fake.on_answer(body)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (a stall longer than its timeout)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join(5)
