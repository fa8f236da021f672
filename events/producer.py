"""The producer API for chat apps: typed helpers that validate, encode and append events.

Nothing reaches the log unvalidated: a bad event raises :class:`InvalidEventError` naming the
field, before any I/O. ``event_id`` is the idempotency key — pass the same one when retrying
after a :class:`LogUnavailableError` and projections will keep exactly one copy.

A payload in a provider's format (:meth:`ConversationProducer.append_native`, and the
``append_anthropic_message`` / ``append_response`` / ``append_gemini`` helpers) may hold several
messages: every one is validated first, then all are appended as one atomic batch
(:meth:`~events.log.EventLog.append_many`) — in order, contiguous, or none. How their event and
message ids are made is in :mod:`events.batches`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from events.appended import EVENT_TYPE_HEADER, Appended, appended_at, type_headers
from events.batches import NativeBatch, parse_payload
from events.codec import EventCodec, default_codec
from events.errors import EventTooLargeError, InvalidEventError
from events.event_types import (
    ConversationCleared,
    ConversationErased,
    ConversationStarted,
    Event,
    EventBody,
    FinishReason,
    MessageAppended,
    MessageRedacted,
)
from events.formats import at_path, registry
from events.formats.registry import FormatRegistry
from events.keys import ConversationKey
from events.log import EventLog
from events.openai_format import (
    ContentInput,
    ToolCallInput,
    UsageInput,
    completion_message,
    content_from_openai,
    message_from_openai,
    requested_message_id,
    tool_calls_from_openai,
    usage_from_openai,
)
from events.servable import check_servable
from events.validation import validate_event

# Appended, appended_at and EVENT_TYPE_HEADER (events/appended.py) are imported from here too.
__all__ = ["DEFAULT_MAX_EVENT_BYTES", "EVENT_TYPE_HEADER", "Appended", "ConversationProducer", "appended_at"]

DEFAULT_MAX_EVENT_BYTES = 1024 * 1024
# Namespace of the event ids append_completion derives from a completion's id (uuid5).
_COMPLETION_NAMESPACE = uuid.UUID("8f0c2f4e-0d7b-4c6e-9a1d-3b5e7c9f1a24")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _new_id() -> str:
    return str(uuid.uuid4())


class ConversationProducer:
    """Appends conversation events to an :class:`~events.log.EventLog`."""

    def __init__(
        self,
        log: EventLog,
        *,
        codec: EventCodec | None = None,
        producer: str = "convlog",
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        clock: Callable[[], datetime] = _utcnow,
        new_id: Callable[[], str] = _new_id,
        formats: FormatRegistry | None = None,
    ) -> None:
        """``formats``: the provider formats :meth:`append_native` takes (None: convlog's,
        :data:`events.formats.registry.FORMATS`); a test adds one with ``FORMATS.with_format``."""
        self._formats = formats
        self._log = log
        self._codec = codec or default_codec()
        self._producer = producer
        self._max_event_bytes = max_event_bytes
        self._clock = clock
        self._new_id = new_id

    def build(
        self,
        key: ConversationKey,
        body: EventBody,
        *,
        event_id: str | None = None,
        occurred_at: datetime | None = None,
    ) -> tuple[Event, bytes]:
        """Validate and encode an event without appending it (what :meth:`append` sends)."""
        # Event's fields in order (positional: the hot path's one construction per append).
        event = Event(event_id or self._new_id(), key, occurred_at or self._clock(), self._producer, body)
        validate_event(event)
        if isinstance(body, MessageAppended):
            check_servable(body)
        data = self._codec.encode(event)
        if len(data) > self._max_event_bytes:
            raise EventTooLargeError(size=len(data), limit=self._max_event_bytes)
        return event, data

    async def append(
        self,
        key: ConversationKey,
        body: EventBody,
        *,
        event_id: str | None = None,
        occurred_at: datetime | None = None,
    ) -> Appended:
        event, data = self.build(key, body, event_id=event_id, occurred_at=occurred_at)
        # append_built's body (and appended_at's), inlined: a coroutine less to make and resume per append.
        coordinates = await self._log.append(key=key.encode(), value=data, headers=type_headers(event))
        return Appended(event.event_id, coordinates, body.message_id if isinstance(body, MessageAppended) else None)

    async def append_built(self, event: Event, data: bytes) -> Appended:
        """Append an event :meth:`build` (or :meth:`build_message`) made, as those bytes."""
        coordinates = await self._log.append(key=event.key.encode(), value=data, headers=type_headers(event))
        return appended_at(event, coordinates)

    def build_native(
        self,
        key: ConversationKey,
        format: str,  # noqa: A002 - the API's name for it
        payload: object,
        *,
        event_id: str | None = None,
    ) -> NativeBatch:
        """The events :meth:`append_native` would append, every one validated and encoded (one bad
        message refuses the payload: :class:`InvalidEventError` with the JSON path — ``[i].field``
        in a Chat Completions list, ``messages[i].field`` for the i-th message of a native payload).
        A batch is limited like one event: its encoded events together at most ``max_event_bytes``."""
        formats = self._formats or registry.FORMATS
        ids = parse_payload(str(key), format, payload, event_id=event_id, new_id=self._new_id, formats=formats)
        occurred_at = self._clock()
        built = []
        for i, (message, message_event_id) in enumerate(zip(ids.messages, ids.event_ids, strict=True)):
            try:
                built.append(self.build(key, message, event_id=message_event_id, occurred_at=occurred_at))
            except InvalidEventError as e:
                if not formats.traits(format).messages_are_items:
                    raise at_path(e, f"messages[{i}]") from e
                if not isinstance(payload, Mapping):
                    raise at_path(e, f"[{i}]") from e
                raise
        size = sum(len(data) for _, data in built)
        if len(built) > 1 and size > self._max_event_bytes:
            raise EventTooLargeError(size=size, limit=self._max_event_bytes)
        return NativeBatch(tuple(built), ids.deterministic, ids.next_event_id, ids.answer_paths)

    async def append_native(
        self,
        key: ConversationKey,
        format: str,  # noqa: A002 - the API's name for it
        payload: object,
        *,
        event_id: str | None = None,
    ) -> list[Appended]:
        """Append a payload in ``format`` (``chat_completions``: a message object or a list of
        them; ``anthropic``, ``responses``, ``gemini``: the provider's JSON, see
        :mod:`events.formats`) as one atomic batch: every message or none. Returns each stored
        message, in order. Unknown format: :class:`~events.errors.InvalidRequestError`
        (code ``unknown_format``); a payload breaking its format: :class:`NativeFormatError`."""
        return await self.append_batch(self.build_native(key, format, payload, event_id=event_id))

    async def append_batch(self, batch: NativeBatch) -> list[Appended]:
        """Append what :meth:`build_native` built, as those bytes, as one batch."""
        if len(batch.built) == 1:
            return [await self.append_built(*batch.built[0])]
        events = batch.events
        values = [(data, type_headers(event)) for event, data in batch.built]
        coordinates = await self._log.append_many(key=events[0].key.encode(), values=values)
        return [appended_at(event, at) for event, at in zip(events, coordinates, strict=True)]

    async def append_anthropic_message(
        self, key: ConversationKey, payload: Mapping[str, Any] | Any, *, event_id: str | None = None
    ) -> list[Appended]:
        """An Anthropic ``Message`` response or a ``MessageParam`` (the SDK object or its JSON)."""
        return await self.append_native(key, "anthropic", payload, event_id=event_id)

    async def append_response(
        self, key: ConversationKey, payload: Mapping[str, Any] | Sequence[Any] | Any, *, event_id: str | None = None
    ) -> list[Appended]:
        """An OpenAI Responses response object, one input/output item, or a list of items."""
        return await self.append_native(key, "responses", payload, event_id=event_id)

    async def append_gemini(
        self, key: ConversationKey, payload: Mapping[str, Any] | Any, *, event_id: str | None = None
    ) -> list[Appended]:
        """A Gemini ``Content`` or ``GenerateContentResponse`` (the SDK object or its JSON)."""
        return await self.append_native(key, "gemini", payload, event_id=event_id)

    async def start_conversation(
        self,
        key: ConversationKey,
        *,
        title: str | None = None,
        metadata: Mapping[str, str] | None = None,
        event_id: str | None = None,
    ) -> Appended:
        return await self.append(
            key, ConversationStarted(title=title, metadata=dict(metadata or {})), event_id=event_id
        )

    async def append_message(
        self,
        key: ConversationKey,
        message: Mapping[str, Any],
        *,
        message_id: str | None = None,
        event_id: str | None = None,
    ) -> Appended:
        """Append an OpenAI-format chat message (plus convlog's optional extras)."""
        return await self.append_built(*self.build_message(key, message, message_id=message_id, event_id=event_id))

    def build_message(
        self,
        key: ConversationKey,
        message: Mapping[str, Any],
        *,
        message_id: str | None = None,
        event_id: str | None = None,
    ) -> tuple[Event, bytes]:
        """The event :meth:`append_message` would append, validated and encoded."""
        event_id = event_id or self._new_id()
        requested = requested_message_id(message)  # type-checked: a non-string id is a 422, not a 500
        body = message_from_openai(message, message_id=message_id or (event_id if requested is None else requested))
        return self.build(key, body, event_id=event_id)

    async def append_user(
        self,
        key: ConversationKey,
        content: ContentInput,
        *,
        name: str | None = None,
        message_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        event_id: str | None = None,
    ) -> Appended:
        return await self._message(
            key, event_id, message_id, role="user", content=content, name=name, metadata=metadata
        )

    async def append_system(
        self,
        key: ConversationKey,
        content: ContentInput,
        *,
        name: str | None = None,
        message_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        event_id: str | None = None,
    ) -> Appended:
        return await self._message(
            key, event_id, message_id, role="system", content=content, name=name, metadata=metadata
        )

    async def append_assistant(
        self,
        key: ConversationKey,
        content: ContentInput = None,
        *,
        tool_calls: Sequence[ToolCallInput] = (),
        reasoning_content: str | None = None,
        thinking_duration_ms: int | None = None,
        model: str | None = None,
        usage: UsageInput = None,
        finish_reason: FinishReason | None = None,
        name: str | None = None,
        message_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        event_id: str | None = None,
    ) -> Appended:
        return await self._message(
            key,
            event_id,
            message_id,
            role="assistant",
            content=content,
            name=name,
            metadata=metadata,
            tool_calls=tool_calls_from_openai(tool_calls),
            reasoning_content=reasoning_content,
            thinking_duration_ms=thinking_duration_ms,
            model=model,
            usage=usage_from_openai(usage),
            finish_reason=finish_reason,
        )

    async def append_completion(
        self,
        key: ConversationKey,
        completion: Mapping[str, Any] | Any,
        *,
        choice: int = 0,
        thinking_duration_ms: int | None = None,
        message_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        event_id: str | None = None,
    ) -> Appended:
        """Append the assistant message of a Chat Completions response (the ``openai`` SDK's
        ``ChatCompletion`` or its JSON) with its finish reason, model, usage and reasoning.

        The event id defaults to one derived from the conversation, the completion's ``id`` and
        ``choice``: appending the same response again (a retry after a timeout) is recognised as
        the same event and applied once."""
        message = completion_message(completion, choice=choice)
        if thinking_duration_ms is not None:
            message["thinking_duration_ms"] = thinking_duration_ms
        if metadata:
            message["metadata"] = dict(metadata)
        if event_id is None:
            doc = completion.model_dump() if hasattr(completion, "model_dump") else completion
            completion_id = doc.get("id") if isinstance(doc, Mapping) else None
            if completion_id:
                event_id = str(uuid.uuid5(_COMPLETION_NAMESPACE, f"{key}\n{completion_id}\n{choice}"))
        return await self.append_message(key, message, message_id=message_id, event_id=event_id)

    async def append_tool_result(
        self,
        key: ConversationKey,
        *,
        tool_call_id: str,
        content: ContentInput,
        name: str | None = None,
        message_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        event_id: str | None = None,
    ) -> Appended:
        return await self._message(
            key,
            event_id,
            message_id,
            role="tool",
            content=content,
            name=name,
            metadata=metadata,
            tool_call_id=tool_call_id,
        )

    async def redact(
        self, key: ConversationKey, message_id: str, *, reason: str, event_id: str | None = None
    ) -> Appended:
        return await self.append(key, MessageRedacted(message_id=message_id, reason=reason), event_id=event_id)

    async def clear(self, key: ConversationKey, *, reason: str | None = None, event_id: str | None = None) -> Appended:
        return await self.append(key, ConversationCleared(reason=reason), event_id=event_id)

    async def erase(
        self,
        key: ConversationKey,
        *,
        reason: str | None = None,
        event_id: str | None = None,
        only_if_last_offset: int | None = None,
    ) -> Appended:
        """Erase the conversation's content from every read model. With ``only_if_last_offset``
        the erase applies only if no event of the conversation was applied after that offset."""
        erased = ConversationErased(reason=reason, only_if_last_offset=only_if_last_offset)
        return await self.append(key, erased, event_id=event_id)

    async def _message(
        self,
        key: ConversationKey,
        event_id: str | None,
        message_id: str | None,
        *,
        content: ContentInput,
        metadata: Mapping[str, str] | None,
        **fields: Any,
    ) -> Appended:
        event_id = event_id or self._new_id()
        # Defaulting the message id to the event id keeps a retried append (same event id) identical.
        body = MessageAppended(
            message_id=message_id or event_id,
            content=content_from_openai(content),
            metadata=dict(metadata or {}),
            **fields,
        )
        return await self.append(key, body, event_id=event_id)
