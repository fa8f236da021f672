"""Sealing and opening events (schema v5; docs/producers.md, Sealed records).

A sealed body is two things in one record: its *clear* copy — the same body record with every
content field empty and ``sealed`` set — and, in ``sealed.ciphertext``, the complete body's
Avro encoding (:meth:`~events.codec.EventCodec.encode_body`) under AES-256-GCM with the
conversation's data key, bound by its associated data to the conversation, the event id, the
body type and the key id. Readers without the key see the clear fields (ids, role, model,
usage, finish reason: what an operator needs); erasure destroys the key, and then that is all
anyone ever sees again.

Opening (:func:`open_event`) answers the complete body, or — when the key was destroyed — the
clear copy still carrying its seal: an *erased placeholder* (:func:`is_erased`). It never
answers content that failed authentication, and never the clear copy of a record whose key is
unknown: those raise (the record's dead letter).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Final, Protocol, TypeGuard

from events.errors import MalformedSealError, UnauthenticSealError, UnknownKeyError
from events.event_types import ConversationStarted, Event, EventBody, MessageAppended, Sealed, SummaryRecorded
from events.sealing.envelope import AeadCache, open_with, record_associated_data, seal_with
from events.sealing.keys import DataKey, DestroyedKey
from events.sealing.ports import KeyRing
from events.slot_builder import slot_builder

__all__ = ["SEALABLE", "BodyCodec", "SealableBody", "clear_copy", "is_erased", "open_event", "seal_event"]


class BodyCodec(Protocol):
    """What sealing asks of the codec (events.codec.EventCodec): a body's record alone."""

    def encode_body(self, body: EventBody) -> bytes: ...
    def decode_body(self, data: bytes, body_type: str, *, writer: bytes = b"") -> EventBody: ...


SealableBody = ConversationStarted | MessageAppended | SummaryRecorded
SEALABLE: Final = (ConversationStarted, MessageAppended, SummaryRecorded)


class _Shape:
    """One sealable body type's fields, split once into content and clear ones: what sealing
    and opening compare and copy on every record without ``dataclasses.replace`` (3 to 4 µs a call,
    five a record before; reading and building by index is a fraction of that)."""

    __slots__ = ("build", "clear_of", "content", "content_at", "sealed_at", "values_of")

    def __init__(self, cls: type[SealableBody], content: dict[str, Callable[[], object]]) -> None:
        names = [f.name for f in dataclasses.fields(cls)]
        clear = [n for n in names if n not in content and n != "sealed"]
        self.values_of = operator.attrgetter(*names)
        # compared as they are: a tuple of several fields, one field's value, or nothing to compare
        self.clear_of: Callable[[SealableBody], object] = operator.attrgetter(*clear) if clear else _nothing
        self.content = operator.attrgetter(*content)
        self.content_at = tuple((names.index(n), empty) for n, empty in content.items())
        self.sealed_at = names.index("sealed")
        self.build = slot_builder(cls, positional=True)

    def is_clear(self, body: SealableBody) -> bool:
        """Whether every content field of ``body`` is empty (the clear copy's)."""
        got = self.content(body)
        values = got if len(self.content_at) > 1 else (got,)
        return all(v == empty() for v, (_, empty) in zip(values, self.content_at, strict=True))

    def cleared(self, body: SealableBody, seal: Sealed | None) -> SealableBody:
        """``body`` with every content field empty and ``sealed`` = ``seal``."""
        values = list(self.values_of(body))
        for at, empty in self.content_at:
            values[at] = empty()
        values[self.sealed_at] = seal
        built: SealableBody = self.build(values)
        return built


def _nothing(_: object) -> tuple[()]:
    return ()


def _none() -> None:
    return None


def _empty_tuple() -> tuple[()]:
    return ()


def _empty_text() -> str:
    return ""


_SHAPES: Final[dict[type, _Shape]] = {
    MessageAppended: _Shape(
        MessageAppended,
        {
            "content": _none,
            "name": _none,
            "tool_calls": _empty_tuple,
            "reasoning_content": _none,
            "metadata": dict,
            "blocks": _empty_tuple,
        },
    ),
    ConversationStarted: _Shape(ConversationStarted, {"title": _none, "metadata": dict}),
    SummaryRecorded: _Shape(SummaryRecorded, {"text": _empty_text}),
}
# One AES-GCM object per data key: making one costs more than sealing a message with it.
_AEADS: Final = AeadCache()
_new_event = slot_builder(Event, positional=True)


def clear_copy(body: SealableBody) -> SealableBody:
    """``body`` with every content field empty: what stays readable without the key."""
    return _SHAPES[type(body)].cleared(body, None)


def is_erased(body: EventBody) -> TypeGuard[SealableBody]:
    """Whether an opened body is an erased placeholder (its key destroyed: clear fields only)."""
    return isinstance(body, SEALABLE) and body.sealed is not None


def seal_event(event: Event, key: DataKey, codec: BodyCodec) -> Event:
    """``event`` with its body's content sealed under ``key`` (a conversation key of the
    event's conversation). Bodies without content (redactions, clears, erases) come back as
    they are."""
    body = event.body
    if not isinstance(body, SEALABLE):
        return event
    if body.sealed is not None:
        raise ValueError("the body is sealed already")
    if key.conversation != event.key:
        raise ValueError(f"key {key.key_id} is not a key of conversation {event.key}")
    plaintext = codec.encode_body(body)
    ad = record_associated_data(str(event.key), event.event_id, type(body).__name__, key.key_id)
    nonce, ciphertext = seal_with(_AEADS.get(key.key_id, key.secret), plaintext, ad)
    sealed = _SHAPES[type(body)].cleared(body, Sealed(key.key_id, nonce, ciphertext))
    return _new_event((event.event_id, event.key, event.occurred_at, event.producer, sealed))


def open_event(event: Event, keys: KeyRing, codec: BodyCodec) -> Event:
    """The event with its complete body; the erased placeholder when its key was destroyed.

    Raises :class:`UnknownKeyError` (a key id ``keys`` does not know — refresh the key store
    and try once more before calling it a dead letter), :class:`UnauthenticSealError` (a
    flipped bit; a record moved to another conversation, event id or key) or
    :class:`MalformedSealError` (content beside the seal; a plaintext that is not the record's
    body; clear fields that disagree with the sealed body)."""
    body = event.body
    if not isinstance(body, SEALABLE) or body.sealed is None:
        return event
    seal = body.sealed
    shape = _SHAPES[type(body)]
    if not shape.is_clear(body):
        raise MalformedSealError("a sealed record carries content beside its seal")
    found = keys.lookup(seal.key_id)
    if found is None:
        raise UnknownKeyError(f"the record is sealed under key {seal.key_id}, which the key store does not hold")
    if found.conversation != event.key:
        raise UnauthenticSealError(f"key {seal.key_id} belongs to another conversation than {event.key}")
    if isinstance(found, DestroyedKey):
        _AEADS.forget(seal.key_id)  # destroyed: nothing of it is kept for later
        return event  # erased: the placeholder, clear fields only
    opened = _opened(event, body, shape, found, codec)
    return _new_event((event.event_id, event.key, event.occurred_at, event.producer, opened))


def _opened(event: Event, body: SealableBody, shape: _Shape, key: DataKey, codec: BodyCodec) -> SealableBody:
    seal = body.sealed
    assert seal is not None  # open_event's caller checked
    body_type = type(body).__name__
    ad = record_associated_data(str(event.key), event.event_id, body_type, seal.key_id)
    plaintext = open_with(_AEADS.get(key.key_id, key.secret), seal.nonce, seal.ciphertext, ad)
    try:
        opened = codec.decode_body(plaintext, body_type, writer=seal.writer)
    except Exception as e:  # authentic but not a body: a producer's bug, this record's dead letter
        raise MalformedSealError(f"the sealed plaintext is not a {body_type} record: {e}") from e
    if not isinstance(opened, type(body)) or opened.sealed is not None:
        raise MalformedSealError(f"the sealed plaintext is not a plain {body_type}")
    if shape.clear_of(opened) != shape.clear_of(body):
        raise MalformedSealError("the record's clear fields disagree with its sealed body")
    return opened
