"""convlog as the message history of a Pydantic AI agent.

    from convlog.integrations.pydantic_ai import ConvlogHistory

    history = ConvlogHistory("c-42", user_id="u1", model="anthropic:claude-sonnet-4-5", budget_tokens=8000)
    result = agent.run_sync("Weather in Paris?", message_history=history.load())
    history.save(result.new_messages())

``load()`` is the windowed, summarised context within the budget, as ``ModelMessage``\\ s (what
``ModelMessagesTypeAdapter`` reads and writes): tool calls never split from their returns, the
summary a ``SystemPromptPart``, Anthropic thinking with its signature back only for the model
that wrote it. ``save(messages)`` appends what Pydantic AI produced, idempotently: the same
messages saved twice are stored once, and messages that came from ``load()`` are never stored
again (so ``save(result.all_messages())`` is fine too). How parts map onto convlog's formats:
:mod:`convlog.integrations.pydantic_ai_messages` (saving) and
:mod:`convlog.integrations.pydantic_ai_served` (loading).

It talks to convlog through :mod:`convlog.client` only (``CONVLOG_URL`` / ``CONVLOG_TOKEN``
unless a client is given); ``aload`` / ``asave`` are the asyncio twins.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any, overload

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model

from convlog.client import AsyncConvlogClient, ConvlogClient, NotFoundError
from convlog.client.types import AppendResult, Context
from convlog.integrations.pydantic_ai_messages import (
    Append,
    Format,
    append_for,
    idempotency_key,
    is_loaded,
)
from convlog.integrations.pydantic_ai_served import from_anthropic, from_chat_completions, from_responses

__all__ = ["ConvlogHistory", "format_for"]

_ANTHROPIC_SYSTEMS = frozenset({"anthropic", "bedrock", "google-vertex-anthropic"})
# Pydantic AI's model strings that name the Responses API ("openai:" is Responses since 2.x).
_RESPONSES_KINDS = frozenset({"openai", "openai-responses", "azure-responses"})


def format_for(model: str | Model) -> tuple[Format, str]:
    """The format to load in and the model name convlog budgets for, from a Pydantic AI model
    or model string (``"anthropic:claude-sonnet-4-5"``, ``"claude-sonnet-4-5"``, ``"openai:gpt-4o"``).
    Claude gets the Anthropic fragment (its signed thinking comes back), an OpenAI Responses model
    (``"openai:…"``, ``OpenAIResponsesModel``) the Responses one (its reasoning items come back),
    every other model the Chat Completions one (text, tool calls and returns; reasoning blobs of
    other providers never)."""
    if isinstance(model, Model):
        name = model.model_name
        kind = "openai-responses" if type(model).__name__ == "OpenAIResponsesModel" else model.system
    else:
        kind, _, name = model.rpartition(":")
    if kind in _ANTHROPIC_SYSTEMS or name.startswith("claude"):
        return "anthropic", name
    if kind in _RESPONSES_KINDS:
        return "responses", name
    return "chat_completions", name


class ConvlogHistory(Sequence[ModelMessage]):
    """The history of one convlog conversation, for ``message_history=``.

    It is also a drop-in for the plain list of messages an app keeps by default: pass it as
    ``message_history=history`` (a sequence: the context loaded on the first read after a write,
    then kept until the next write, :meth:`load` or :meth:`refresh`) and
    ``history.extend(result.new_messages())`` (that is :meth:`save`). That view reads through a
    sync client; with an :class:`AsyncConvlogClient` pass ``message_history=await history.aload()``.

    ``model`` (a Pydantic AI model or model string) decides the format and the token counting of
    ``load()``; ``budget_tokens`` bounds it (``reserve_tokens`` kept free for the answer,
    ``tools_tokens`` for the tool definitions). ``client``: a :class:`ConvlogClient` or an
    :class:`AsyncConvlogClient` (else made from the environment on first use, and closed by
    :meth:`close` / :meth:`aclose`). ``last_context`` is the last :class:`Context` loaded (its
    ``summary``, ``dropped``, ``token_count``).

    A load reads this history's own saves (it waits until the projection reached the last
    one). A new instance for the next request of a web app reads the projection as it is,
    a few milliseconds behind the log: carry :attr:`offset` over and pass it as ``min_offset``
    to read the previous request's saves for sure."""

    def __init__(
        self,
        conversation_id: str,
        *,
        user_id: str,
        client: ConvlogClient | AsyncConvlogClient | None = None,
        model: str | Model = "gpt-4o",
        budget_tokens: int = 8000,
        reserve_tokens: int = 0,
        tools_tokens: int = 0,
        min_offset: int | None = None,
    ) -> None:
        self.conversation_id = conversation_id
        self.user_id = user_id
        self.model = model
        self.budget_tokens = budget_tokens
        self.reserve_tokens = reserve_tokens
        self.tools_tokens = tools_tokens
        self.last_context: Context | None = None
        self._sync = client if isinstance(client, ConvlogClient) else None
        self._async = client if isinstance(client, AsyncConvlogClient) else None
        self._owned = client is None
        self._offset = min_offset  # the last append's: a load waits until it is readable
        self._snapshot: list[ModelMessage] | None = None  # what the sequence methods read

    @property
    def offset(self) -> int | None:
        """The log offset of the last message this history saved (or its ``min_offset``)."""
        return self._offset

    # --- the list an app keeps by default -------------------------------------------------

    def _view(self) -> list[ModelMessage]:
        if self._snapshot is None:
            self.load()
        assert self._snapshot is not None
        return self._snapshot

    def __len__(self) -> int:
        return len(self._view())

    @overload
    def __getitem__(self, index: int) -> ModelMessage: ...
    @overload
    def __getitem__(self, index: slice) -> list[ModelMessage]: ...
    def __getitem__(self, index: int | slice) -> ModelMessage | list[ModelMessage]:
        return self._view()[index]

    def __iter__(self) -> Iterator[ModelMessage]:
        return iter(self._view())

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        self.save(messages)

    def append(self, message: ModelMessage) -> None:
        self.save([message])

    def refresh(self) -> None:
        """Read the context again on the next sequence access (another writer appended)."""
        self._snapshot = None

    # --- sync -----------------------------------------------------------------------------

    def load(self, *, model: str | Model | None = None) -> list[ModelMessage]:
        """The context to pass as ``message_history`` (for ``model``, else the history's own)."""
        fmt, name = format_for(model or self.model)
        try:
            ctx = self._sync_client().context(self.user_id, self.conversation_id, **self._context_args(fmt, name))
        except NotFoundError:  # nothing appended yet: a new conversation
            return self._messages(None)
        return self._messages(ctx)

    def save(self, messages: Sequence[ModelMessage]) -> None:
        """Store ``messages`` (``result.new_messages()``), each once, in order. A part convlog
        cannot store yet (audio, documents, server-side tool parts) raises ``InvalidEventError``
        before anything is sent; the client's errors (:mod:`convlog.client.errors`) otherwise."""
        client = self._sync_client()
        for message, append in self._appends(messages):
            self._stored(
                client.append(
                    self.user_id,
                    self.conversation_id,
                    append.payload,
                    format=append.format,
                    idempotency_key=idempotency_key(message),
                )
            )

    def clear(self) -> None:
        """A new chat: ``load()`` starts empty again (convlog's audit keeps everything)."""
        self._stored(self._sync_client().clear(self.user_id, self.conversation_id))

    def close(self) -> None:
        if self._owned and self._sync is not None:
            self._sync.close()
            self._sync = None

    # --- asyncio --------------------------------------------------------------------------

    async def aload(self, *, model: str | Model | None = None) -> list[ModelMessage]:
        if self._sync is not None:
            return await asyncio.to_thread(self.load, model=model)
        fmt, name = format_for(model or self.model)
        try:
            ctx = await self._async_client().context(
                self.user_id, self.conversation_id, **self._context_args(fmt, name)
            )
        except NotFoundError:  # nothing appended yet: a new conversation
            return self._messages(None)
        return self._messages(ctx)

    async def asave(self, messages: Sequence[ModelMessage]) -> None:
        if self._sync is not None:
            await asyncio.to_thread(self.save, messages)
            return
        client = self._async_client()
        for message, append in self._appends(messages):
            key = idempotency_key(message)
            self._stored(
                await client.append(
                    self.user_id, self.conversation_id, append.payload, format=append.format, idempotency_key=key
                )
            )

    async def aclear(self) -> None:
        if self._sync is not None:
            await asyncio.to_thread(self.clear)
            return
        self._stored(await self._async_client().clear(self.user_id, self.conversation_id))

    async def aclose(self) -> None:
        self.close()
        if self._owned and self._async is not None:
            await self._async.aclose()
            self._async = None

    # --- shared ---------------------------------------------------------------------------

    def _sync_client(self) -> ConvlogClient:
        if self._sync is None:
            if self._async is not None:
                raise TypeError("this history was given an AsyncConvlogClient: use aload / asave")
            self._sync = ConvlogClient()
        return self._sync

    def _async_client(self) -> AsyncConvlogClient:
        if self._async is None:
            self._async = AsyncConvlogClient()
        return self._async

    def _context_args(self, fmt: Format, model: str) -> dict[str, Any]:
        return {
            "model": model,
            "budget_tokens": self.budget_tokens,
            "reserve_tokens": self.reserve_tokens,
            "tools_tokens": self.tools_tokens,
            "format": fmt,
            "min_offset": self._offset,
        }

    def _messages(self, ctx: Context | None) -> list[ModelMessage]:
        self.last_context = ctx
        if ctx is None:
            loaded: list[ModelMessage] = []
        elif ctx.format == "anthropic":
            loaded = from_anthropic(ctx.system, ctx.messages or [])
        elif ctx.format == "responses":
            loaded = from_responses(ctx.instructions, ctx.input or [])
        else:
            loaded = from_chat_completions(ctx.messages or [])
        self._snapshot = loaded
        return list(loaded)

    @staticmethod
    def _appends(messages: Sequence[ModelMessage]) -> list[tuple[ModelMessage, Append]]:
        # Converted before the first append, so a part convlog cannot store stores nothing.
        out = []
        for message in messages:
            if is_loaded(message):
                continue
            append = append_for(message)
            if append is not None:
                out.append((message, append))
        return out

    def _stored(self, result: AppendResult) -> None:
        self._snapshot = None
        self._offset = result.offset if self._offset is None else max(self._offset, result.offset)
