"""``create_app``: the FastAPI application — error handlers, the middleware, the route groups."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from events.errors import ConvlogError, EventTooLargeError, InvalidEventError, UndecodableRecordError
from query_api.as_of import OffsetBeyondLogEndError, UnknownMessageError
from query_api.context_types import ContextBudgetExceededError
from query_api.http.deps import ApiDeps, ApiError, error_response
from query_api.http.disconnects import ClientDisconnectedError
from query_api.http.middleware import LimitsAndMetrics
from query_api.http.openai_errors import OpenAIErrors
from query_api.http.openapi import install_openapi
from query_api.http.roles import refuse_undeclared
from query_api.http.routes_appends import append_routes
from query_api.http.routes_audit import audit_routes
from query_api.http.routes_context import context_routes
from query_api.http.routes_conversations import conversation_routes
from query_api.http.routes_erasure import erasure_routes
from query_api.http.routes_health import PUBLIC_ROUTES, health_routes
from query_api.http.routes_openai_conversations import openai_conversation_routes
from query_api.http.strict_json import StrictJsonRoute
from query_api.http.utf8_request import Utf8Request
from query_api.live import ConversationNotFoundError, ConversationParkedError, NotCaughtUpError, UnknownVersionError

# The OpenAPI description.
DESCRIPTION = """The HTTP API (FastAPI): appends, contexts, audit reads. The tenant comes only from the token.

Errors are JSON ``{"error": {"code", "message"}}`` (plus ``field`` for invalid input); another
tenant's conversation and an unknown one are both 404; bad input is never a 5xx.
"""

# A parameter whose refusal has a code of its own wherever it is read: ``format`` is validated by
# FastAPI on a read (a Literal) and by the parser registry on an append, one code for both.
FIELD_CODES = {"format": "unknown_format"}


def create_app(deps: ApiDeps) -> FastAPI:
    app = FastAPI(title="convlog", version="0.1.0", description=DESCRIPTION)
    app.router.route_class = StrictJsonRoute
    _add_error_handlers(app)
    # Answered without a token: probes and scrapers, the schema and its docs; all else needs one.
    docs = (app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url)
    public = frozenset([*PUBLIC_ROUTES, *(path for path in docs if path)])
    app.add_middleware(Utf8Request)  # inside the next one (added later, so outer): after authentication
    app.add_middleware(LimitsAndMetrics, deps=deps, public=public)
    app.add_middleware(OpenAIErrors)  # outermost: it shapes the 401s and 413s of the one above too
    install_openapi(app, public=public)
    # Requests try the routes in the order they were added (the schema lists them so too): the
    # context, asked for every turn, first — each route tried before it cost ~4 us a request.
    routes_in_order = (
        context_routes,
        health_routes,
        append_routes,
        erasure_routes,
        audit_routes,
        conversation_routes,
        openai_conversation_routes,
    )
    for routes in routes_in_order:
        router = routes(deps)
        refuse_undeclared(router.routes)  # each route's role is declared, or there is no app
        app.include_router(router)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> JSONResponse:
        return error_response(e.status, e.code, e.message, **e.extra)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        field = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header"))
        code = FIELD_CODES.get(field, "invalid_request")
        return error_response(422, code, str(first.get("msg", "invalid request")), field=field or None)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        if isinstance(e, ConvlogError):  # a body refused while it streamed in (middleware.py)
            return error_response(e.status_code, e.code, str(e.detail), headers=e.headers)
        code = {404: "not_found", 413: "payload_too_large"}.get(e.status_code, "http_error")
        return error_response(e.status_code, code, str(e.detail))

    @app.exception_handler(ConvlogError)
    async def convlog_error(_: Request, e: ConvlogError) -> JSONResponse:
        return convlog_answer(e)


def convlog_answer(e: ConvlogError) -> JSONResponse:
    """The one place a domain error becomes an HTTP answer: its status and body."""
    read = _read_answer(e)
    if read is not None:
        return read
    if isinstance(e, EventTooLargeError):
        return error_response(413, e.code, str(e), field=e.field)
    if isinstance(e, InvalidEventError):
        return error_response(422, e.code, str(e), field=e.field)
    if isinstance(e, UndecodableRecordError):  # the conversation's own poison: its audit reads say so
        return error_response(409, e.code, str(e), partition=e.partition, offset=e.offset)
    if isinstance(e, ClientDisconnectedError):  # nobody reads it: 499, nginx's "client closed request"
        return error_response(499, e.code, str(e))
    if isinstance(e, ContextBudgetExceededError):
        return error_response(422, e.code, str(e), needed=e.needed, available=e.available)
    if e.retriable:
        return JSONResponse(
            {"error": {"code": e.code, "message": str(e)}},
            status_code=503,
            headers={"Retry-After": str(getattr(e, "retry_after_s", 1))},
        )
    return error_response(500, e.code, str(e))


def _read_answer(e: ConvlogError) -> JSONResponse | None:
    """What the query service (query_api/live/) refuses; None for another error."""
    if isinstance(e, ConversationNotFoundError):  # 404s are ``not_found``, whatever is missing
        return error_response(404, "not_found", str(e))
    if isinstance(e, NotCaughtUpError):  # retry later (no Retry-After: a client waits as it likes)
        if e.projected is None:
            return error_response(503, e.code, str(e), partition=e.partition)
        return error_response(503, e.code, str(e), partition=e.partition, projected=e.projected)
    if isinstance(e, UnknownVersionError):
        return error_response(422, e.code, str(e), field="read_models_version")
    if isinstance(e, ConversationParkedError):
        return error_response(
            409,
            e.code,
            str(e),
            dead_letter_id=e.dead_letter_id,
            partition=e.partition,
            offset=e.offset,
            error_code=e.error_code,
        )
    if isinstance(e, UnknownMessageError):  # only a before_message names a message to rebuild before
        return error_response(404, e.code, str(e), field="before_message")
    if isinstance(e, OffsetBeyondLogEndError):
        return error_response(422, e.code, str(e), field=e.field, partition=e.partition)
    return None
