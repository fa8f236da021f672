"""What the routes share: the API's dependencies, its error, the tenant a token belongs to, and
the per-request helpers (the caller's conversation key, 404 unless the log holds it, the
``202 Accepted`` body of an append)."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Header
from fastapi.responses import JSONResponse

from events.errors import ConvlogError
from events.event_types import Event
from events.keys import ConversationKey
from events.log import EventLog, LogRecord
from events.producer import Appended, ConversationProducer
from projectors.positions_watch import PositionsWatch
from projectors.tokens import DEFAULT_COUNTED
from projectors.window import WindowPolicy
from query_api.as_of import PolicyAt
from query_api.cache_prefix import PrefixMemory
from query_api.http.fast_json import FastJSONResponse
from query_api.log_reads import conversation_records, log_holds
from query_api.metrics import Metrics
from query_api.ports import ReadModels

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


@dataclass
class ApiDeps:
    tokens: Mapping[str, str]  # bearer token -> tenant id
    producer: ConversationProducer
    log: EventLog
    reads: Callable[[], Awaitable[ReadModels]]  # the live version's reads (it changes on a switch)
    readiness: Callable[[], Awaitable[dict[str, Any]]]
    metrics: Metrics
    default_encoding: str = "o200k_base"
    counted_encodings: tuple[str, ...] = DEFAULT_COUNTED  # what the projector stores counts of; others: at read
    image_turns: int = 2
    max_body_bytes: int = 2 * 1024 * 1024
    body_timeout_s: float = 30.0  # from the request's start until its body has wholly arrived: else 408
    wait_for_offset_s: float = 5.0
    policy: WindowPolicy = field(default_factory=WindowPolicy)  # as-of rebuilds', unless policy_at is given
    policy_at: PolicyAt | None = None  # the window of the version that served a context as of an event
    # The window of a numbered read-models version (None: it never was live), for an audit that
    # names the version a context said it was served by (Convlog-Read-Models-Version).
    version_policy: Callable[[int], Awaitable[WindowPolicy | None]] | None = None
    max_event_bytes: int = 1024 * 1024
    log_behind: Callable[[int], None] | None = None  # raises for a partition whose records the log lost
    prefixes: PrefixMemory = field(default_factory=PrefixMemory)  # the last context served, for its cacheable prefix
    positions: PositionsWatch | None = None  # the projector's commits, when it runs in this process; else polling
    openai_user_id: str = "default"  # the user of an OpenAI Conversations API request without Convlog-User-Id
    alive: Callable[[], str | None] = lambda: None  # /healthz: why only a restart helps now (None: healthy)


def tenant_of(tokens: Mapping[str, str], authorization: str | None) -> str | None:
    """The tenant a ``Bearer`` token belongs to; None for a missing or unknown token."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() == "bearer" and token:
        for known, tenant_id in tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return tenant_id
    return None


def error_response(
    status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, **extra}}, status_code=status, headers=headers)


def accepted(appended: Appended) -> JSONResponse:
    return FastJSONResponse(
        {"event_id": appended.event_id, "message_id": appended.message_id,
         "partition": appended.partition, "offset": appended.offset},
        status_code=202,
    )  # fmt: skip


@dataclass(frozen=True)
class Requests:
    """The per-request helpers every route group uses, bound to the API's dependencies."""

    deps: ApiDeps

    def tenant(self, authorization: str | None) -> str:
        tenant_id = tenant_of(self.deps.tokens, authorization)  # the middleware let only these in
        if tenant_id is None:
            raise ApiError(401, "unauthorized", "a valid bearer token is required")
        return tenant_id

    def key_of(self, authorization: str | None, user_id: str, conversation_id: str) -> ConversationKey:
        return ConversationKey(self.tenant(authorization), user_id, conversation_id)

    async def held_by_log(self, key: ConversationKey) -> None:
        """404 unless the log holds the conversation (the read models may lag behind it)."""
        if not await log_holds(self.deps.log, await self.deps.reads(), key):
            raise ApiError(404, "not_found", "no such conversation")

    async def logged_events(self, key: ConversationKey) -> list[tuple[LogRecord, Event]]:
        """The conversation's events, read from the log through the event index; 404 for none."""
        pairs = await conversation_records(self.deps.log, await self.deps.reads(), key)
        if not pairs:
            raise ApiError(404, "not_found", "no such conversation")
        return pairs
