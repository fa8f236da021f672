"""Appending events to the log: each validated and encoded first, then appended alone or, for a
payload of several messages, as one atomic batch (:meth:`~events.log.EventLog.append_many`) — in
order, contiguous, or none. :class:`EventAppender` is the base of the producer API
(:class:`events.producer.ConversationProducer`, its typed helpers for chat apps); what an
append answers is :class:`~events.appended.Appended`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from events.appended import EVENT_TYPE_HEADER, Appended, appended_at, type_headers
from events.batches import NativeBatch, parse_payload
from events.codec import EventCodec, default_codec
from events.errors import EventTooLargeError, InvalidEventError
from events.event_types import Event, EventBody, MessageAppended
from events.formats import at_path, registry
from events.formats.registry import FormatRegistry
from events.keys import ConversationKey
from events.log import EventLog
from events.sealing.bodies import SEALABLE, seal_event
from events.sealing.ports import KeyStore
from events.servable import check_servable
from events.validation import validate_event

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "EVENT_TYPE_HEADER", "Appended", "EventAppender", "appended_at"]

DEFAULT_MAX_EVENT_BYTES = 1024 * 1024


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _new_id() -> str:
    return str(uuid.uuid4())


class EventAppender:
    """Validates, encodes and appends events to an :class:`~events.log.EventLog`."""

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
        keys: KeyStore | None = None,
        seal: bool = True,
    ) -> None:
        """``formats``: the provider formats :meth:`append_native` takes (None: convlog's,
        :data:`events.formats.registry.FORMATS`); a test adds one with ``FORMATS.with_format``.
        ``keys``: the key store content is sealed with before it enters the log (schema v5,
        events/sealing/); None writes plain records, which erasure cannot shred. ``seal=False``
        (``CONVLOG_SEALING=false``) writes plain records too, but keeps the store: the keys of
        what was sealed before are still destroyed by an erase."""
        self._formats = formats
        self._keys = keys
        self._seal_with = keys if seal else None
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
        if self._seal_with is not None and isinstance(body, SEALABLE):
            # Sealed here when this process knows the conversation's key already (the usual
            # case); else the append seals it, once it has made sure of the key (_sealed).
            data_key = self._seal_with.current(key)
            if data_key is not None:
                event = seal_event(event, data_key, self._codec)
        return event, self._encoded(event)

    @property
    def keys(self) -> KeyStore | None:
        """The key store this appender seals with and erasure destroys keys in (None: none)."""
        return self._keys

    @property
    def seals(self) -> bool:
        """Whether new content is sealed (else it enters the log plain)."""
        return self._seal_with is not None

    def _encoded(self, event: Event) -> bytes:
        data = self._codec.encode(event)
        if len(data) > self._max_event_bytes:
            raise EventTooLargeError(size=len(data), limit=self._max_event_bytes)
        return data

    async def _sealed(self, event: Event, data: bytes) -> tuple[Event, bytes]:
        """What is appended for a built event: sealed, if a key store seals and :meth:`build`
        could not yet (the conversation's first event in this process)."""
        body = event.body
        if self._seal_with is None or not isinstance(body, SEALABLE) or body.sealed is not None:
            return event, data
        sealed = seal_event(event, await self._seal_with.ensure(event.key), self._codec)
        return sealed, self._encoded(sealed)

    async def append(
        self,
        key: ConversationKey,
        body: EventBody,
        *,
        event_id: str | None = None,
        occurred_at: datetime | None = None,
    ) -> Appended:
        event, data = self.build(key, body, event_id=event_id, occurred_at=occurred_at)
        if self._seal_with is not None:
            event, data = await self._sealed(event, data)
        # append_built's body (and appended_at's), inlined: a coroutine less to make and resume per append.
        coordinates = await self._log.append(key=key.encode(), value=data, headers=type_headers(event))
        return Appended(event.event_id, coordinates, body.message_id if isinstance(body, MessageAppended) else None)

    async def append_built(self, event: Event, data: bytes) -> Appended:
        """Append an event :meth:`build` (or :meth:`build_message`) made, as those bytes (sealed
        first if :meth:`build` could not)."""
        event, data = await self._sealed(event, data)
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
        return NativeBatch(
            tuple(built), ids.deterministic, ids.next_event_id, ids.answer_paths, plain=tuple(ids.messages)
        )

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
        built = [await self._sealed(event, data) for event, data in batch.built]
        events = [event for event, _ in built]
        if sum(len(data) for _, data in built) > self._max_event_bytes:
            raise EventTooLargeError(size=sum(len(data) for _, data in built), limit=self._max_event_bytes)
        values = [(data, type_headers(event)) for event, data in built]
        coordinates = await self._log.append_many(key=events[0].key.encode(), values=values)
        return [appended_at(event, at) for event, at in zip(events, coordinates, strict=True)]
