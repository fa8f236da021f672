"""What the routes share: the API's dependencies (the query service, the producer, the HTTP
settings), its error, the caller a token is, and the per-request helpers (the caller's
conversation key, the ``202 Accepted`` body of an append)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Header
from fastapi.responses import JSONResponse

from events.errors import ConvlogError
from events.keys import ConversationKey
from events.producer import Appended, ConversationProducer
from query_api.auth import Caller
from query_api.http.fast_json import FastJSONResponse
from query_api.live import QueryService
from query_api.token_file import ApiTokens

PREFIX = "/v1/users/{user_id}/conversations"
AuthHeader = Annotated[str | None, Header()]


class ApiError(ConvlogError):
    """An HTTP answer decided by a route: ``status``, ``code``, ``message`` and ``extra`` fields
    of the error body. Retriable when the status is 503 (the read models have not caught up)."""

    code = "api_error"

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra
        self.retriable = status == 503


@dataclass(frozen=True)
class HttpSettings:
    """What only the HTTP API needs: who may call it, and how much of a request it takes."""

    tokens: ApiTokens | Mapping[str, str]  # the tokens; a {bearer token: tenant id} mapping is app tokens
    max_body_bytes: int = 2 * 1024 * 1024
    body_timeout_s: float = 30.0  # from the request's start until its body has wholly arrived: else 408
    openai_user_id: str = "default"  # the user of an OpenAI Conversations API request without Convlog-User-Id
    request_log: bool = False  # an `http.request` log line per request (CONVLOG_HTTP_ACCESS_LOG)
    auth: ApiTokens = field(init=False, repr=False)  # ``tokens`` as ApiTokens

    def __post_init__(self) -> None:
        tokens = self.tokens
        object.__setattr__(self, "auth", tokens if isinstance(tokens, ApiTokens) else ApiTokens(tokens))


@dataclass
class ApiDeps:
    """The query service the routes read through, the producer they append with, the HTTP
    settings and the probes' answers."""

    queries: QueryService
    producer: ConversationProducer
    http: HttpSettings
    readiness: Callable[[], Awaitable[dict[str, Any]]]
    alive: Callable[[], str | None] = lambda: None  # /healthz: why only a restart helps now (None: healthy)


def error_response(
    status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, **extra}}, status_code=status, headers=headers)


def appended_json(appended: Appended) -> dict[str, Any]:
    return {
        "event_id": appended.event_id,
        "message_id": appended.message_id,
        "partition": appended.partition,
        "offset": appended.offset,
    }


def accepted(appended: Appended) -> JSONResponse:
    return FastJSONResponse(appended_json(appended), status_code=202)


@dataclass(frozen=True)
class Requests:
    """The per-request helpers every route group uses, bound to the API's dependencies."""

    deps: ApiDeps

    def caller(self, authorization: str | None) -> Caller:
        caller = self.deps.http.auth.caller(authorization)  # the middleware let only these in
        if caller is None:  # (a token removed from the token file a moment ago)
            raise ApiError(401, "unauthorized", "a valid bearer token is required")
        return caller

    def tenant(self, authorization: str | None) -> str:
        return self.caller(authorization).tenant_id

    def key_of(self, authorization: str | None, user_id: str, conversation_id: str) -> ConversationKey:
        return ConversationKey(self.tenant(authorization), user_id, conversation_id)
