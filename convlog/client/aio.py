"""``AsyncConvlogClient``: the HTTP API from asyncio code (the twin of ``sync.py``)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from convlog.client import calls
from convlog.client.calls import Call
from convlog.client.config import DEFAULT_TIMEOUT, endpoint, headers
from convlog.client.retry import RetryPolicy
from convlog.client.types import (
    AppendResult,
    Context,
    ConversationPage,
    LoggedEvent,
    Readiness,
    SummaryEntry,
    TranscriptPage,
    UserErasure,
)

T = TypeVar("T")


class AsyncConvlogClient:
    """convlog's HTTP API as methods. ``base_url`` and ``token`` default to ``CONVLOG_URL`` and
    ``CONVLOG_TOKEN``; ``timeout`` (seconds, or an ``httpx.Timeout``; default 10 s, 35 s for the
    answer: :data:`~convlog.client.config.DEFAULT_TIMEOUT`) bounds each try, ``retry`` the tries
    (see :mod:`convlog.client.retry`); ``transport`` replaces httpx's (tests, proxies).
    Failures raise :class:`convlog.client.errors.ClientError` subclasses. Use it as an async context
    manager, or ``aclose()`` it: it keeps a connection pool."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        token: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url, token = endpoint(base_url, token)
        self.base_url = url
        self.retry = retry or RetryPolicy()
        self._rng = random.Random()  # noqa: S311 -- jitter, not secrets
        self._http = httpx.AsyncClient(base_url=url, headers=headers(token), timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    async def _run(self, call: Call[T]) -> T:
        started = time.monotonic()
        retry = 0
        while True:
            try:
                response = await self._http.request(
                    call.method, call.path, params=call.params, content=call.body, headers=call.headers
                )
            except httpx.TransportError as e:
                error, sent = calls.transport_error(e, call)
                cause: BaseException | None = e
            else:
                if response.status_code in call.answers:
                    return call.read(response)
                error, sent, cause = calls.response_error(response, call), True, None
            wait = self.retry.next_wait_s(
                retry, error, repeat=call.repeat, sent=sent, elapsed_s=time.monotonic() - started, rng=self._rng
            )
            if wait is None:
                raise error from cause
            await asyncio.sleep(wait)
            retry += 1

    async def append(
        self,
        user_id: str,
        conversation_id: str,
        message: Any,
        *,
        format: str = "chat_completions",  # noqa: A002
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Append a message (a Chat Completions message dict, or a payload in ``format``:
        ``anthropic``, ``responses``, ``gemini``). Sent with ``idempotency_key`` — made here when
        None — on every try, so a retried append is stored once."""
        return await self._run(
            calls.append(user_id, conversation_id, message, format=format, idempotency_key=idempotency_key)
        )

    async def context(
        self,
        user_id: str,
        conversation_id: str,
        *,
        model: str,
        budget_tokens: int,
        reserve_tokens: int = 0,
        tools_tokens: int = 0,
        reasoning: str = "omit",
        format: str = "chat_completions",  # noqa: A002
        cache: bool = False,
        min_offset: int | None = None,
        as_of: int | None = None,
        before_message: str | None = None,
        editing: Mapping[str, str | int] | None = None,
    ) -> Context:
        """The history to send to ``model`` in ``format``, within the budget; ``min_offset`` (an
        append's ``offset``) waits until it is readable; ``as_of`` / ``before_message`` rebuild
        the context served then; ``editing``: context-editing parameters
        (``{"clear_tool_results_trigger": 100000, ...}``, docs/http-api.md)."""
        return await self._run(
            calls.context(
                user_id,
                conversation_id,
                model=model,
                budget_tokens=budget_tokens,
                reserve_tokens=reserve_tokens,
                tools_tokens=tools_tokens,
                reasoning=reasoning,
                format=format,
                cache=cache,
                min_offset=min_offset,
                as_of=as_of,
                before_message=before_message,
                editing=editing,
            )
        )

    async def messages(
        self, user_id: str, conversation_id: str, *, limit: int = 100, before: int | None = None
    ) -> TranscriptPage:
        """One page of the audit transcript: the ``limit`` messages before seq ``before``."""
        return await self._run(calls.messages(user_id, conversation_id, limit=limit, before=before))

    async def message_pages(
        self, user_id: str, conversation_id: str, *, limit: int = 100
    ) -> AsyncIterator[TranscriptPage]:
        """Every page of the transcript, the newest page first (each page oldest first)."""
        before: int | None = None
        while True:
            page = await self.messages(user_id, conversation_id, limit=limit, before=before)
            yield page
            if page.next_before is None:
                return
            before = page.next_before

    async def summaries(self, user_id: str, conversation_id: str) -> list[SummaryEntry]:
        return await self._run(calls.summaries(user_id, conversation_id))

    async def events(self, user_id: str, conversation_id: str) -> list[LoggedEvent]:
        return await self._run(calls.events(user_id, conversation_id))

    async def conversations(self, user_id: str, *, limit: int = 50, before: str | None = None) -> ConversationPage:
        return await self._run(calls.conversations(user_id, limit=limit, before=before))

    async def conversation_pages(self, user_id: str, *, limit: int = 50) -> AsyncIterator[ConversationPage]:
        """Every page of the user's conversations, newest activity first."""
        before: str | None = None
        while True:
            page = await self.conversations(user_id, limit=limit, before=before)
            yield page
            if page.next_before is None:
                return
            before = page.next_before

    async def redact(
        self,
        user_id: str,
        conversation_id: str,
        message_id: str,
        *,
        reason: str | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Redact one message (``MessageRedacted``): its content leaves the read models and every
        context served from now on; the audit keeps that it existed."""
        return await self._run(
            calls.redact(user_id, conversation_id, message_id, reason=reason, idempotency_key=idempotency_key)
        )

    async def clear(self, user_id: str, conversation_id: str) -> AppendResult:
        """New chat: the window and summary restart (the audit keeps everything)."""
        return await self._run(calls.clear(user_id, conversation_id))

    async def erase(self, user_id: str, conversation_id: str) -> AppendResult:
        """Right to be forgotten: the content leaves every read model."""
        return await self._run(calls.erase(user_id, conversation_id))

    async def erase_user(self, user_id: str) -> UserErasure:
        """Erase every conversation of the user (GDPR art. 17): the user's keys are destroyed
        before the answer, so no copy of their sealed content can be read again. Erasing again
        answers ``already``; a user the service knows nothing of is :class:`NotFoundError`."""
        return await self._run(calls.erase_user(user_id))

    async def healthz(self) -> bool:
        return await self._run(calls.healthz())

    async def readyz(self) -> Readiness:
        return await self._run(calls.readyz())
