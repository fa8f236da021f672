"""The middleware in front of every route: authentication, body limits and request metrics."""

from __future__ import annotations

import time

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from events.errors import ConvlogError
from query_api.http.deps import ApiDeps, error_response, tenant_of


class _BodyTooLargeError(StarletteHTTPException, ConvlogError):
    """Raised while the body streams in; an HTTPException (first, so Starlette's handler
    lookup finds that one) so request parsing passes it on."""

    code = "payload_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the body may be at most {limit} bytes")


class LimitsAndMetrics:
    """Authenticates, refuses oversized bodies before they are read, and counts requests — in
    that order: a client without a valid token gets 401 before any byte of its body is read or
    parsed, whatever the route (FastAPI would validate a body before a route's dependencies).
    A plain ASGI middleware: Starlette's BaseHTTPMiddleware costs a task and a stream copy."""

    def __init__(self, app: ASGIApp, *, deps: ApiDeps, public: frozenset[str]) -> None:
        self.app, self.deps, self.public = app, deps, public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if await self._refused(scope, receive, send):
            return
        status = 500
        received = 0
        limit = self.deps.max_body_bytes

        async def receive_counted() -> Message:  # a chunked body has no content-length to check
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLargeError(limit)
            return message

        async def send_and_watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        started = time.perf_counter()
        try:
            await self.app(scope, receive_counted, send_and_watch)
        except _BodyTooLargeError:
            status = 413
            await self._too_large()(scope, receive, send)
        route = getattr(scope.get("route"), "path", "unmatched")
        self.deps.metrics.request(route, scope["method"], status, time.perf_counter() - started)

    async def _refused(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Answers 401 without a valid token (on a non-public path) and 413 for a declared
        length over the limit, before the app sees the request; True when it answered."""
        path = scope["path"].removeprefix(scope.get("root_path", ""))  # as the router matches it
        if path not in self.public:
            authorization = Headers(scope=scope).get("authorization")  # the first one, as routes read it
            if tenant_of(self.deps.tokens, authorization) is None:
                started = time.perf_counter()
                await error_response(401, "unauthorized", "a valid bearer token is required")(scope, receive, send)
                self.deps.metrics.request("unauthenticated", scope["method"], 401, time.perf_counter() - started)
                return True
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.deps.max_body_bytes):
            await self._too_large()(scope, receive, send)
            return True
        return False

    def _too_large(self) -> JSONResponse:
        limit = self.deps.max_body_bytes
        return error_response(413, "payload_too_large", f"the body may be at most {limit} bytes")
