"""The HTTP API (FastAPI): appends, contexts, audit reads. The tenant comes only from the token.

Errors are JSON ``{"error": {"code", "message"}}`` (plus ``field`` for invalid input); another
tenant's conversation and an unknown one are both 404; bad input is never a 5xx.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fastapi import Body, FastAPI, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from events.errors import ConvlogError, EventTooLargeError, InvalidEventError, InvalidRequestError
from events.keys import ConversationKey, partition_for_key
from events.log import EventLog, LogRecord
from events.model import Event
from events.producer import Appended, ConversationProducer
from events.strict_json import NotJsonError, parse_json
from projectors.tokens import cached_counter as _counter
from projectors.tokens import model_spec
from projectors.window import WindowPolicy
from query_api.as_of import BeforeMessage, UnknownMessageError
from query_api.context import NeedOlderMessagesError, assemble
from query_api.disconnects import ClientDisconnectedError, unless_disconnected
from query_api.events_json import events_json
from query_api.idempotency import IdempotencyKeyReusedError, IdempotentAppends
from query_api.log_reads import conversation_records, log_holds
from query_api.metrics import Metrics
from query_api.model import Context, ContextBudgetExceededError, ContextRequest, ModelSpec
from query_api.ports import MAX_CURSOR_CHARS, ContextInputs, ReadModels
from query_api.served import context_as_of, context_body

PREFIX = "/v1/users/{user_id}/conversations"
NEWEST_FIRST = 128  # rows read first; most budgets end inside them
MAX_NEWEST = 4096  # beyond that, read the whole range
AuthHeader = Annotated[str | None, Header()]
# Answered without a token (probes and scrapers; the schema and its docs too); all else needs one.
PUBLIC_ROUTES = ("/healthz", "/readyz", "/metrics")


class ApiError(ConvlogError):
    """An HTTP answer decided by a route: ``status``, ``code``, ``message`` and ``extra`` fields
    of the error body. Retriable when the status is 503 (the read models have not caught up)."""

    code = "api_error"

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra
        self.retriable = status == 503


@dataclass
class ApiDeps:
    tokens: Mapping[str, str]  # bearer token -> tenant id
    producer: ConversationProducer
    log: EventLog
    reads: Callable[[], Awaitable[ReadModels]]  # the live version's reads (it changes on a switch)
    readiness: Callable[[], Awaitable[dict[str, Any]]]
    metrics: Metrics
    default_encoding: str = "o200k_base"
    image_turns: int = 2
    max_body_bytes: int = 2 * 1024 * 1024
    wait_for_offset_s: float = 5.0
    policy: WindowPolicy = field(default_factory=WindowPolicy)
    max_event_bytes: int = 1024 * 1024
    log_behind: Callable[[int], None] | None = None  # raises for a partition whose records the log lost


class _BodyTooLargeError(StarletteHTTPException, ConvlogError):
    """Raised while the body streams in; an HTTPException (first, so Starlette's handler
    lookup finds that one) so request parsing passes it on."""

    code = "payload_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the body may be at most {limit} bytes")


def tenant_of(tokens: Mapping[str, str], authorization: str | None) -> str | None:
    """The tenant a ``Bearer`` token belongs to; None for a missing or unknown token."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() == "bearer" and token:
        for known, tenant_id in tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return tenant_id
    return None


def _unauthorized() -> JSONResponse:
    return _error(401, "unauthorized", "a valid bearer token is required")


class _LimitsAndMetrics:
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
        headers = dict(scope["headers"])
        path = scope["path"].removeprefix(scope.get("root_path", ""))  # as the router matches it
        if path not in self.public:
            authorization = Headers(scope=scope).get("authorization")  # the first one, as routes read it
            if tenant_of(self.deps.tokens, authorization) is None:
                started = time.perf_counter()
                await _unauthorized()(scope, receive, send)
                self.deps.metrics.request("unauthenticated", scope["method"], 401, time.perf_counter() - started)
                return
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.deps.max_body_bytes):
            response = _error(413, "payload_too_large", f"the body may be at most {self.deps.max_body_bytes} bytes")
            await response(scope, receive, send)
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
            await _error(413, "payload_too_large", f"the body may be at most {limit} bytes")(scope, receive, send)
        route = getattr(scope.get("route"), "path", "unmatched")
        self.deps.metrics.request(route, scope["method"], status, time.perf_counter() - started)


def _error(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, **extra}}, status_code=status)


class _BodyNotJsonError(StarletteHTTPException, ConvlogError):
    """Raised while the body is parsed; an HTTPException (first, for Starlette's handler
    lookup) so FastAPI passes it on (it turns any other exception there into a bare 400)."""

    code = "invalid_json"

    def __init__(self, reason: str) -> None:
        super().__init__(422, reason)


class _StrictJsonRequest(Request):
    """A request whose JSON body is read strictly (events/strict_json.py): no NaN or Infinity,
    and invalid UTF-8, deep nesting or huge integers are a 422 like any malformed JSON."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = parse_json(body)
            except NotJsonError as e:
                raise _BodyNotJsonError(str(e)) from e
        return self._json


class _StrictJsonRoute(APIRoute):
    """FastAPI's documented hook for a custom Request class: every route reads JSON strictly."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            try:
                return await handler(_StrictJsonRequest(request.scope, request.receive))
            except _BodyNotJsonError as e:
                return _error(422, "invalid_json", f"the body is not JSON: {e.detail}", field="body")

        return strict


def create_app(deps: ApiDeps) -> FastAPI:  # noqa: PLR0915 - one place that lists the routes
    app = FastAPI(title="convlog", version="0.1.0", description=__doc__)
    app.router.route_class = _StrictJsonRoute

    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> JSONResponse:
        return _error(e.status, e.code, e.message, **e.extra)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        field = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header"))
        return _error(422, "invalid_request", str(first.get("msg", "invalid request")), field=field or None)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 413: "payload_too_large"}.get(e.status_code, "http_error")
        return _error(e.status_code, code, str(e.detail))

    @app.exception_handler(ConvlogError)
    async def convlog_error(_: Request, e: ConvlogError) -> JSONResponse:
        if isinstance(e, EventTooLargeError):
            return _error(413, e.code, str(e), field=e.field)
        if isinstance(e, InvalidEventError):
            return _error(422, e.code, str(e), field=e.field)
        if isinstance(e, ClientDisconnectedError):  # nobody reads it: 499, nginx's "client closed request"
            return _error(499, e.code, str(e))
        if isinstance(e, ContextBudgetExceededError):
            return _error(422, e.code, str(e), needed=e.needed, available=e.available)
        if e.retriable:
            return JSONResponse(
                {"error": {"code": e.code, "message": str(e)}},
                status_code=503,
                headers={"Retry-After": str(getattr(e, "retry_after_s", 1))},
            )
        return _error(500, e.code, str(e))

    docs = (app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url)
    public = frozenset([*PUBLIC_ROUTES, *(path for path in docs if path)])
    app.add_middleware(_LimitsAndMetrics, deps=deps, public=public)

    def tenant(authorization: str | None) -> str:
        tenant_id = tenant_of(deps.tokens, authorization)  # _LimitsAndMetrics let only these in
        if tenant_id is None:
            raise ApiError(401, "unauthorized", "a valid bearer token is required")
        return tenant_id

    def key_of(authorization: str | None, user_id: str, conversation_id: str) -> ConversationKey:
        return ConversationKey(tenant(authorization), user_id, conversation_id)

    async def held_by_log(key: ConversationKey) -> None:
        """404 unless the log holds the conversation (the read models may lag behind it)."""
        if not await log_holds(deps.log, await deps.reads(), key):
            raise ApiError(404, "not_found", "no such conversation")

    async def logged_events(key: ConversationKey) -> list[tuple[LogRecord, Event]]:
        """The conversation's events, read from the log through the event index; 404 for none."""
        pairs = await conversation_records(deps.log, await deps.reads(), key)
        if not pairs:
            raise ApiError(404, "not_found", "no such conversation")
        return pairs

    idempotent = IdempotentAppends(deps.producer, deps.log, deps.reads)

    def accepted(appended: Appended) -> JSONResponse:
        return JSONResponse(
            {"event_id": appended.event_id, "message_id": appended.message_id,
             "partition": appended.partition, "offset": appended.offset},
            status_code=202,
        )  # fmt: skip

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        report = await deps.readiness()
        return JSONResponse(report, status_code=200 if report.get("ready") else 503)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(deps.metrics.render(), media_type=deps.metrics.content_type)

    @app.post(PREFIX + "/{conversation_id}/messages", status_code=202)
    async def post_message(
        user_id: str,
        conversation_id: str,
        message: Annotated[dict[str, Any], Body()],
        authorization: AuthHeader = None,
        idempotency_key: Annotated[str | None, Header()] = None,
    ) -> JSONResponse:
        key = key_of(authorization, user_id, conversation_id)
        if not idempotency_key:
            return accepted(await deps.producer.append_message(key, message))
        try:
            return accepted(await idempotent.append_message(key, message, event_id=idempotency_key))
        except IdempotencyKeyReusedError as e:
            raise ApiError(409, e.code, str(e), event_id=e.first.event_id, partition=e.first.partition,
                           offset=e.first.offset) from e  # fmt: skip

    @app.post(PREFIX + "/{conversation_id}/clear", status_code=202)
    async def clear(user_id: str, conversation_id: str, authorization: AuthHeader = None) -> JSONResponse:
        key = key_of(authorization, user_id, conversation_id)
        await held_by_log(key)
        return accepted(await deps.producer.clear(key))

    @app.delete(PREFIX + "/{conversation_id}", status_code=202)
    async def erase(user_id: str, conversation_id: str, authorization: AuthHeader = None) -> JSONResponse:
        key = key_of(authorization, user_id, conversation_id)
        await held_by_log(key)
        return accepted(await deps.producer.erase(key, reason="erased through the API"))

    @app.get(PREFIX + "/{conversation_id}/context")
    async def context(
        http_request: Request,
        user_id: str,
        conversation_id: str,
        model: Annotated[str, Query(min_length=1, max_length=200)],
        budget_tokens: Annotated[int, Query(gt=0, le=10_000_000)],
        reserve_tokens: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
        tools_tokens: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
        reasoning: Literal["omit", "tool_turns", "all"] = "omit",
        min_offset: Annotated[int | None, Query(ge=0)] = None,
        as_of: Annotated[int | None, Query(ge=0)] = None,
        before_message: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
        authorization: AuthHeader = None,
    ) -> JSONResponse:
        key = key_of(authorization, user_id, conversation_id)
        try:
            spec = model_spec(model, default_encoding=deps.default_encoding)
        except InvalidRequestError as e:
            raise ApiError(422, "invalid_request", str(e), field="model") from e
        reads = await deps.reads()
        partition = partition_for_key(key.encode(), deps.log.partition_count)
        request = ContextRequest(model, budget_tokens, reserve_tokens, tools_tokens, reasoning, deps.image_turns)
        if as_of is not None and before_message is not None:
            raise ApiError(422, "invalid_request", "give as_of or before_message, not both", field="before_message")
        if as_of is not None or before_message is not None:  # rebuilt from the log, exactly as served then
            pairs = await unless_disconnected(http_request, logged_events(key))
            point = as_of if as_of is not None else BeforeMessage(before_message or "")
            try:
                served = await unless_disconnected(http_request, context_as_of(
                    deps.log, key, point, request=request, spec=spec, policy=deps.policy,
                    max_event_bytes=deps.max_event_bytes, start_offset=pairs[0][0].offset, pairs=pairs))  # fmt: skip
            except UnknownMessageError as e:
                raise ApiError(404, e.code, str(e), field="before_message") from e
            if served is None:
                at = f"offset {as_of}" if as_of is not None else f"message {before_message!r}"
                raise ApiError(404, "not_found", f"the conversation had no event before {at}")
            ctx, inputs = served
        else:
            if min_offset is not None:
                if deps.log_behind is not None:  # never confirm an offset the projection did not take from this log
                    deps.log_behind(partition)
                await _wait_for(reads, partition, min_offset, deps.wait_for_offset_s)
            ctx, inputs = await _assemble(reads, key, spec, request)
        deps.metrics.context_served(ctx.token_count)
        # Plain JSON types already: skip FastAPI's encoder and response validation on the hot path.
        return JSONResponse(context_body(ctx, inputs, spec))

    @app.get(PREFIX + "/{conversation_id}/messages")
    async def transcript(
        user_id: str,
        conversation_id: str,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        before: Annotated[int | None, Query(ge=0)] = None,
        authorization: AuthHeader = None,
    ) -> dict[str, Any]:
        key = key_of(authorization, user_id, conversation_id)
        page = await (await deps.reads()).transcript(key, limit=limit, before=before)
        if page is None:
            raise ApiError(404, "not_found", "no such conversation")
        entries, next_before = page
        return {"messages": entries, "next_before": next_before}

    @app.get(PREFIX + "/{conversation_id}/summaries")
    async def summaries(user_id: str, conversation_id: str, authorization: AuthHeader = None) -> dict[str, Any]:
        key = key_of(authorization, user_id, conversation_id)
        entries = await (await deps.reads()).summaries(key)
        if entries is None:
            raise ApiError(404, "not_found", "no such conversation")
        return {"summaries": entries}

    @app.get(PREFIX + "/{conversation_id}/events")
    async def raw_events(
        http_request: Request, user_id: str, conversation_id: str, authorization: AuthHeader = None
    ) -> dict[str, Any]:
        key = key_of(authorization, user_id, conversation_id)
        return {"events": events_json(await unless_disconnected(http_request, logged_events(key)))}

    @app.get(PREFIX)
    async def conversations(
        user_id: str,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        before: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
        authorization: AuthHeader = None,
    ) -> dict[str, Any]:
        tenant_id = tenant(authorization)
        ConversationKey(tenant_id, user_id, "x")  # validates user_id like every other route
        try:
            items, next_before = await (await deps.reads()).list_conversations(
                tenant_id, user_id, limit=limit, before=before
            )
        except InvalidRequestError as e:
            raise ApiError(422, "invalid_request", str(e), field="before") from e
        return {
            "conversations": [
                {"conversation_id": c.conversation_id, "title": c.title, "started_at": c.started_at.isoformat(),
                 "last_activity_at": c.last_activity_at.isoformat() if c.last_activity_at else None,
                 "message_count": c.message_count, "turn_count": c.turn_count, "erased": c.erased,
                 "cleared": c.cleared, "degraded": c.parked}
                for c in items
            ],
            "next_before": next_before,
        }  # fmt: skip

    return app


async def _assemble(
    reads: ReadModels, key: ConversationKey, spec: ModelSpec, request: ContextRequest
) -> tuple[Context, ContextInputs]:
    """Turns no summary covers yet stay in the context's range, which can be long: read its
    newest rows first, more only when the budget reaches back further (as many as the budget
    needs by the first rows' costs, then everything) — the answer is the one the whole range
    gives."""
    count = _counter(spec.encoding)
    available = request.budget_tokens - request.reserve_tokens - request.tools_tokens
    newest: int | None = NEWEST_FIRST
    while True:
        inputs = await reads.context_inputs(key, encoding=spec.encoding, newest=newest)
        if inputs is None:
            raise ApiError(404, "not_found", "no such conversation")
        try:
            ctx = assemble(
                system=inputs.system, summary=inputs.summary, messages=inputs.messages, request=request, spec=spec,
                count=count, complete=inputs.complete, usable_turns=inputs.usable_turns,
            )  # fmt: skip
        except NeedOlderMessagesError:
            # Read enough rows next time for the budget, judging by what these cost.
            read = inputs.messages
            spent = sum(m.tokens + spec.tokens_per_message + 1 for m in read) or 1
            wanted = int(len(read) * available / spent * 1.5) + 1
            newest = None if newest is None or wanted > MAX_NEWEST else max(wanted, 2 * len(read))
            continue
        return ctx, inputs


async def _wait_for(reads: ReadModels, partition: int, offset: int, timeout_s: float) -> None:
    """Read-your-writes: wait (bounded) until the projection applied ``offset``."""
    deadline = time.monotonic() + timeout_s
    while await reads.projection_position(partition) <= offset:
        if time.monotonic() > deadline:
            raise ApiError(503, "not_caught_up", f"the read models have not reached offset {offset} yet",
                           partition=partition)  # fmt: skip
        await asyncio.sleep(0.02)
