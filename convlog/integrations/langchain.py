"""convlog as a LangChain chat history: ``ConvlogChatMessageHistory``, a
``langchain_core.chat_history.BaseChatMessageHistory`` backed by the convlog HTTP API.

    from convlog.integrations.langchain import ConvlogChatMessageHistory

    chain = RunnableWithMessageHistory(
        prompt | model, lambda session_id: ConvlogChatMessageHistory(session_id),
        input_messages_key="question", history_messages_key="history")

- ``messages`` is the *context*: the window, the summary (a ``SystemMessage``), within
  ``budget_tokens`` for ``model`` — not the whole transcript (the audit keeps that). A tool call is
  never served without its results, nor a result without its call.
- ``add_messages`` is one atomic append of the whole list (a Chat Completions batch): a turn's
  ``AIMessage`` with ``tool_calls`` and its ``ToolMessage``\\ s are stored together or not at all.
  Retries reuse the Idempotency-Key; messages that all carry an ``id`` get a key derived from
  them, so adding the same messages again (after an error whose outcome was unknown) stores
  them once.
- ``clear`` starts a new chat: the window and summary restart, the audit keeps everything, and
  a ``SystemMessage`` stored in the history (the conversation's system prompt) stays.
- ``aget_messages`` / ``aadd_messages`` / ``aclear`` use the async client.

Reasoning: an ``AIMessage``'s ``additional_kwargs["reasoning_content"]`` (DeepSeek's, as
langchain-deepseek keeps it) and its ``{"type": "reasoning"}`` content blocks are stored as
``reasoning_content`` and come back in ``additional_kwargs`` as the ``reasoning`` policy allows
(default ``tool_turns``: where a reasoning model needs it back). Chat Completions has no place
for a signed thinking block or a tool result's error flag: Anthropic ``thinking`` blocks are
stored as reasoning text without their signature; a ``ToolMessage``'s ``status="error"`` is
recorded in the event's metadata (``langchain.status``), and a read whose context holds tool
results takes the statuses from the newest page of the transcript (one more request), where an
``is_error`` result appended natively counts too.

Reads see this process's own writes: each append's offset is remembered per conversation (for
every instance, as ``RunnableWithMessageHistory`` makes a new history per call) and passed as
``min_offset``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
)

from convlog.client import AppendResult, AsyncConvlogClient, Context, ConvlogClient, NotFoundError, TranscriptPage

__all__ = ["ConvlogChatMessageHistory"]

SUMMARY_ID_PREFIX = "convlog-summary-"
_REASONING_TYPES = frozenset({"reasoning", "thinking"})


class _Offsets:
    """The newest offset this process appended per conversation: the ``min_offset`` of the
    next read, so a new history object for the same session reads its predecessor's writes.
    The least recently written are forgotten past ``keep`` conversations (a read of one of
    those may then lag its write by the projection's latency)."""

    def __init__(self, keep: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._keep = keep
        self._newest: OrderedDict[tuple[str, str, str], int] = OrderedDict()

    def seen(self, key: tuple[str, str, str], result: AppendResult) -> None:
        with self._lock:
            self._newest[key] = max(self._newest.pop(key, -1), result.offset)
            while len(self._newest) > self._keep:
                self._newest.popitem(last=False)

    def get(self, key: tuple[str, str, str]) -> int | None:
        with self._lock:
            return self._newest.get(key)


_OFFSETS = _Offsets()


class ConvlogChatMessageHistory(BaseChatMessageHistory):
    """The history of conversation ``session_id`` of ``user_id`` in convlog.

    Without ``client`` / ``async_client``, each call uses a client made from ``CONVLOG_URL``
    and ``CONVLOG_TOKEN`` and closed after it (pass one to reuse its connections). Given
    only a sync ``client``, the async methods run it in an executor (LangChain's default);
    given only an ``async_client``, the sync methods raise ``TypeError``.
    ``model``, ``budget_tokens``, ``reserve_tokens`` and ``reasoning`` shape the context
    ``messages`` returns (see ``GET …/context``)."""

    def __init__(
        self,
        session_id: str,
        *,
        client: ConvlogClient | None = None,
        async_client: AsyncConvlogClient | None = None,
        user_id: str = "default",
        model: str = "gpt-4o",
        budget_tokens: int = 8000,
        reserve_tokens: int = 0,
        reasoning: str = "tool_turns",
    ) -> None:
        super().__init__()
        self.session_id = session_id
        self.user_id = user_id
        self.model = model
        self.budget_tokens = budget_tokens
        self.reserve_tokens = reserve_tokens
        self.reasoning = reasoning
        self._client = client
        self._async_client = async_client

    # -- clients: the given ones, else one made from the environment for the call ----------
    # (RunnableWithMessageHistory makes a history per call and drops it: a client owned by the
    # history would leave its connections open; pass a client to reuse one pool.)

    @contextmanager
    def _sync(self) -> Iterator[ConvlogClient]:
        if self._client is not None:
            yield self._client
        elif self._async_client is not None:
            raise TypeError("this history was given only an async_client: use the async methods")
        else:
            with ConvlogClient() as client:
                yield client

    @asynccontextmanager
    async def _async(self) -> AsyncIterator[AsyncConvlogClient | None]:
        """The async client, or None when only a sync client was given (then the base class
        runs the sync method in an executor)."""
        if self._async_client is not None:
            yield self._async_client
        elif self._client is not None:
            yield None
        else:
            async with AsyncConvlogClient() as client:
                yield client

    def _key(self, client: ConvlogClient | AsyncConvlogClient) -> tuple[str, str, str]:
        return (client.base_url, self.user_id, self.session_id)

    # -- BaseChatMessageHistory ------------------------------------------------------------

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # the base's plain attribute, here a read

        with self._sync() as client:
            try:
                context = client.context(self.user_id, self.session_id, **self._context_options(client))
            except NotFoundError:
                return []  # no message yet
            messages = messages_from_context(context)
            if _tool_results(messages):
                mark_errors(messages, client.messages(self.user_id, self.session_id, limit=_page(messages)))
        return messages

    async def aget_messages(self) -> list[BaseMessage]:
        async with self._async() as client:
            if client is None:
                return await super().aget_messages()
            try:
                context = await client.context(self.user_id, self.session_id, **self._context_options(client))
            except NotFoundError:
                return []
            messages = messages_from_context(context)
            if _tool_results(messages):
                mark_errors(messages, await client.messages(self.user_id, self.session_id, limit=_page(messages)))
        return messages

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        if not messages:
            return
        payload, key = to_chat_completions(messages), self._idempotency_key(messages)
        with self._sync() as client:
            _OFFSETS.seen(self._key(client), client.append(self.user_id, self.session_id, payload, idempotency_key=key))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        if not messages:
            return
        payload, key = to_chat_completions(messages), self._idempotency_key(messages)
        async with self._async() as client:
            if client is None:
                await super().aadd_messages(messages)
                return
            _OFFSETS.seen(
                self._key(client), await client.append(self.user_id, self.session_id, payload, idempotency_key=key)
            )

    def clear(self) -> None:
        with self._sync() as client:
            try:
                result = client.clear(self.user_id, self.session_id)
            except NotFoundError:
                return  # nothing was ever stored: already clear
            _OFFSETS.seen(self._key(client), result)

    async def aclear(self) -> None:
        async with self._async() as client:
            if client is None:
                await super().aclear()
                return
            try:
                result = await client.clear(self.user_id, self.session_id)
            except NotFoundError:
                return
            _OFFSETS.seen(self._key(client), result)

    # -- helpers -----------------------------------------------------------------------------

    def _context_options(self, client: ConvlogClient | AsyncConvlogClient) -> dict[str, Any]:
        return {
            "model": self.model,
            "budget_tokens": self.budget_tokens,
            "reserve_tokens": self.reserve_tokens,
            "reasoning": self.reasoning,
            "min_offset": _OFFSETS.get(self._key(client)),
        }

    def _idempotency_key(self, messages: Sequence[BaseMessage]) -> str | None:
        """A key derived from the messages' ids when every one has an id (the same messages
        added again are stored once); else None: the client makes one per call and reuses it
        on its own retries."""
        ids = [m.id for m in messages]
        if not all(ids):
            return None
        digest = hashlib.sha256(json.dumps([self.session_id, ids]).encode()).hexdigest()[:32]
        return f"lc-{digest}"


def to_chat_completions(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as Chat Completions messages (langchain-core's own conversion), with
    reasoning moved from content blocks / ``additional_kwargs`` to ``reasoning_content`` and
    LangChain's id and a tool result's status kept in ``metadata``."""
    converted = convert_to_openai_messages(list(messages), text_format="string")
    out: list[dict[str, Any]] = []
    for message, doc in zip(messages, converted, strict=True):
        item = dict(doc)
        metadata: dict[str, str] = {}
        if message.id:
            metadata["langchain.id"] = message.id
        if isinstance(message, AIMessage):
            _move_reasoning(message, item)
        if isinstance(message, ToolMessage):
            metadata["langchain.status"] = message.status
            item.pop("name", None)  # Chat Completions names the tool on the call, not the result
        if metadata:
            item["metadata"] = metadata
        out.append(item)
    return out


def _move_reasoning(message: AIMessage, item: dict[str, Any]) -> None:
    reasoning: list[str] = []
    given = message.additional_kwargs.get("reasoning_content")
    if isinstance(given, str) and given:
        reasoning.append(given)
    content = item.get("content")
    if isinstance(content, list):
        kept = []
        for block in content:
            if isinstance(block, dict) and block.get("type") in _REASONING_TYPES:
                text = block.get("reasoning") or block.get("thinking")
                if isinstance(text, str) and text:
                    reasoning.append(text)
            else:
                kept.append(block)
        texts = [b.get("text", "") for b in kept if isinstance(b, dict) and b.get("type") == "text"]
        item["content"] = "".join(texts) if len(texts) == len(kept) else kept
    if reasoning:
        item["reasoning_content"] = "\n\n".join(reasoning)
    if item.get("tool_calls") and not item.get("content"):
        item["content"] = None  # Chat Completions' form of a call without text


def messages_from_context(context: Context) -> list[BaseMessage]:
    """The served Chat Completions messages as LangChain messages; the summary's system message
    carries the id ``convlog-summary-<summary_id>``."""
    messages = convert_to_messages(context.messages or [])
    summary = context.summary
    if summary is not None:
        for i, m in enumerate(messages):
            # served as a header, then the summary's text (the header is the service's wording)
            if isinstance(m, SystemMessage) and isinstance(m.content, str) and m.content.endswith(summary.text):
                messages[i] = SystemMessage(m.content, id=SUMMARY_ID_PREFIX + summary.summary_id)
                break
    return messages


def _tool_results(messages: list[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def _page(messages: list[BaseMessage]) -> int:
    """The newest transcript messages to read for the statuses: the window is the newest part
    of the conversation, so as many as the context holds, and some slack for what it dropped."""
    return min(1000, len(messages) + 100)


def _is_error(raw: Mapping[str, Any]) -> bool:
    return raw.get("is_error") is True or (raw.get("metadata") or {}).get("langchain.status") == "error"


def mark_errors(messages: list[BaseMessage], transcript: TranscriptPage) -> None:
    """``status="error"`` on the served tool results the transcript records as errors — an
    ``is_error`` result (appended natively, e.g. an Anthropic ``tool_result``) or one this
    history stored with ``langchain.status: error`` — which the Chat Completions context cannot
    say. Results older than the page read stay ``success``."""
    errors = {m.tool_call_id for m in transcript.messages if m.role == "tool" and _is_error(m.raw)}
    for m in _tool_results(messages):
        if m.tool_call_id in errors:
            m.status = "error"
