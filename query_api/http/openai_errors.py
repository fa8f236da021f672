"""Errors in OpenAI's shape on the routes of its Conversations API (``/v1/conversations``), so the
``openai`` SDK raises its own typed exceptions (``NotFoundError``, ``BadRequestError``,
``AuthenticationError``, ...).

convlog's ``{"error": {"code", "message", "field", ...}}`` becomes ``{"error": {"message",
"type", "param", "code", ...}}`` (``param`` is convlog's ``field``; other convlog fields stay);
a 422 (input convlog refuses) is answered 400, as OpenAI answers a bad parameter. It rewrites
every error these paths answer — the middleware's 401 and 413 too — so it is the outermost
middleware; other paths pass through untouched.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

OPENAI_PREFIX = "/v1/conversations"
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def openai_error(status: int, body: bytes) -> tuple[int, bytes]:
    """The status and body OpenAI's API would answer for convlog's error ``body``."""
    status = 400 if status == 422 else status
    try:
        doc: Any = json.loads(body)
    except ValueError:
        doc = {}
    error = doc.get("error") if isinstance(doc, dict) else None
    error = error if isinstance(error, dict) else {"message": body.decode("utf-8", "replace")}
    rest = {k: v for k, v in error.items() if k not in {"code", "message", "field"}}
    shaped = {
        "message": str(error.get("message", "")),
        "type": _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
        "param": error.get("field"),
        "code": error.get("code"),
        **rest,
    }
    return status, json.dumps({"error": shaped}, separators=(",", ":")).encode()


class OpenAIErrors:
    """A plain ASGI middleware: error answers under :data:`OPENAI_PREFIX` in OpenAI's shape."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not (path == OPENAI_PREFIX or path.startswith(OPENAI_PREFIX + "/")):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def rewrite(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400:
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            status, body = openai_error(start["status"], b"".join(chunks))
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, rewrite)
