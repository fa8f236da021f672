"""``convlog.client``: convlog's HTTP API from Python, synchronous and asyncio, on httpx.

    from convlog.client import ConvlogClient

    with ConvlogClient("http://127.0.0.1:8080", token="token_a") as client:
        sent = client.append("u1", "c1", {"role": "user", "content": "Hi"})
        ctx = client.context("u1", "c1", model="gpt-4o", budget_tokens=8000, min_offset=sent.offset)
        ctx.messages  # the array to send

It imports the ConvlogError tree and nothing else of convlog (no driver, no server code:
``lint-imports`` keeps it so), so an app can use it without the service's stack.
"""

from __future__ import annotations

from convlog.client.aio import AsyncConvlogClient
from convlog.client.calls import CACHEABLE_PREFIX_HEADER
from convlog.client.errors import (
    BudgetExceededError,
    ClientError,
    ClientTimeoutError,
    ConflictError,
    NotFoundError,
    RejectedEventError,
    RejectedRequestError,
    ServerError,
    ServiceUnavailableError,
    UnauthorizedError,
    UnexpectedResponseError,
    UnreachableError,
)
from convlog.client.retry import NO_RETRY, RetryPolicy
from convlog.client.sync import ConvlogClient
from convlog.client.types import (
    Appended,
    AppendResult,
    Context,
    ContextEdit,
    ContextSummary,
    Conversation,
    ConversationPage,
    Dropped,
    LoggedEvent,
    Position,
    Readiness,
    SummaryEntry,
    TranscriptMessage,
    TranscriptPage,
    UserErasure,
)

__all__ = [
    "CACHEABLE_PREFIX_HEADER",
    "NO_RETRY",
    "AppendResult",
    "Appended",
    "AsyncConvlogClient",
    "BudgetExceededError",
    "ClientError",
    "ClientTimeoutError",
    "ConflictError",
    "Context",
    "ContextEdit",
    "ContextSummary",
    "Conversation",
    "ConversationPage",
    "ConvlogClient",
    "Dropped",
    "LoggedEvent",
    "NotFoundError",
    "Position",
    "Readiness",
    "RejectedEventError",
    "RejectedRequestError",
    "RetryPolicy",
    "ServerError",
    "ServiceUnavailableError",
    "SummaryEntry",
    "TranscriptMessage",
    "TranscriptPage",
    "UnauthorizedError",
    "UnexpectedResponseError",
    "UnreachableError",
    "UserErasure",
]
