"""The middleware in front of every route: authentication, body limits, request metrics, and
(``CONVLOG_HTTP_ACCESS_LOG``) a log line per request naming the token by its id, never itself."""

from __future__ import annotations

import asyncio
import time

import structlog
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from events.errors import ConvlogError
from query_api.auth import Caller
from query_api.http.deps import ApiDeps, error_response
from query_api.http.roles import AUDIT_READ, CALLER, log_audit_read

log = structlog.get_logger(__name__)

# A request refused before its body was read closes its connection: the server then reads and
# discards the rest of the body (bounded, convlog/runtime/http_server.py) so that the client,
# still sending, gets the answer instead of a reset, and does not send its next request there.
CLOSE = {"Connection": "close"}


class _BodyRefusedError(StarletteHTTPException, ConvlogError):
    """Raised while the body streams in; an HTTPException (first, so Starlette's handler
    lookup finds that one) so request parsing passes it on; answered with ``code``."""

    code = "body_refused"

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message, headers=CLOSE)

    def response(self) -> JSONResponse:
        return error_response(self.status_code, self.code, self.detail, headers=self.headers)


class _BodyTooLargeError(_BodyRefusedError):
    code = "payload_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the body may be at most {limit} bytes")


class _BodyTimeoutError(_BodyRefusedError):
    code = "body_timeout"

    def __init__(self, timeout_s: float) -> None:
        super().__init__(408, f"the request's body did not arrive within {timeout_s:g} s")


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
        body_done = False
        limit, timeout_s = self.deps.http.max_body_bytes, self.deps.http.body_timeout_s
        started = time.perf_counter()

        async def receive_counted() -> Message:  # a chunked body has no content-length to check
            nonlocal received, body_done
            if body_done:  # later messages (a disconnect) may be waited for as long as the route likes
                return await receive()
            try:  # a body trickled in (or never sent) holds its connection: bounded from the request's start
                async with asyncio.timeout(timeout_s - (time.perf_counter() - started)):
                    message = await receive()
            except TimeoutError:
                raise _BodyTimeoutError(timeout_s) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLargeError(limit)
                body_done = not message.get("more_body", False)
            return message

        async def send_and_watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive_counted, send_and_watch)
        except _BodyRefusedError as e:  # (routes answer it themselves: app.py's handler)
            status = e.status_code
            await e.response()(scope, receive, send)
        route = getattr(scope.get("route"), "path", "unmatched")
        elapsed = time.perf_counter() - started
        self.deps.queries.metrics.request(route, scope["method"], status, elapsed)
        if self.deps.http.request_log:
            _log_request(scope, route, status, elapsed)
        if scope.get(AUDIT_READ):
            log_audit_read(scope, scope[CALLER], route, status)

    async def _refused(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Answers 401 without a valid token (on a non-public path) and 413 for a declared
        length over the limit, before the app sees the request; True when it answered."""
        path = scope["path"].removeprefix(scope.get("root_path", ""))  # as the router matches it
        if path not in self.public:
            authorization = Headers(scope=scope).get("authorization")  # the first one, as routes read it
            caller = self.deps.http.auth.caller(authorization)
            if caller is None:
                started = time.perf_counter()
                await error_response(401, "unauthorized", "a valid bearer token is required")(scope, receive, send)
                elapsed = time.perf_counter() - started
                self.deps.queries.metrics.request("unauthenticated", scope["method"], 401, elapsed)
                if self.deps.http.request_log:
                    _log_request(scope, "unauthenticated", 401, elapsed)
                return True
            scope[CALLER] = caller  # the route checks its role (roles.py)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.deps.http.max_body_bytes):
            await _BodyTooLargeError(self.deps.http.max_body_bytes).response()(scope, receive, send)
            return True
        return False


def _log_request(scope: Scope, route: str, status: int, elapsed: float) -> None:
    """``http.request``: the route's template (never the path: no ids, no query), the status,
    and who — the token's id (its name, or its hash's first digits), never the token."""
    caller: Caller | None = scope.get(CALLER)
    log.info(
        "http.request",
        method=scope["method"],
        route=route,
        status=status,
        duration_ms=round(elapsed * 1000, 3),
        token=caller.token_id if caller else None,
        tenant=caller.tenant_id if caller else None,
    )
