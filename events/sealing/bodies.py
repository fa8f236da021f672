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
from typing import Final, Protocol, TypeGuard

from events.errors import MalformedSealError, UnauthenticSealError, UnknownKeyError
from events.event_types import ConversationStarted, Event, EventBody, MessageAppended, Sealed, SummaryRecorded
from events.sealing.envelope import open_bytes, record_associated_data, seal_bytes
from events.sealing.keys import DataKey, DestroyedKey
from events.sealing.ports import KeyRing

__all__ = ["SEALABLE", "BodyCodec", "SealableBody", "clear_copy", "is_erased", "open_event", "seal_event"]


class BodyCodec(Protocol):
    """What sealing asks of the codec (events.codec.EventCodec): a body's record alone."""

    def encode_body(self, body: EventBody) -> bytes: ...
    def decode_body(self, data: bytes, body_type: str, *, writer: bytes = b"") -> EventBody: ...


SealableBody = ConversationStarted | MessageAppended | SummaryRecorded
SEALABLE: Final = (ConversationStarted, MessageAppended, SummaryRecorded)


def clear_copy(body: SealableBody) -> SealableBody:
    """``body`` with every content field empty: what stays readable without the key."""
    if isinstance(body, MessageAppended):
        return dataclasses.replace(
            body, content=None, name=None, tool_calls=(), reasoning_content=None, metadata={}, blocks=(), sealed=None
        )
    if isinstance(body, ConversationStarted):
        return dataclasses.replace(body, title=None, metadata={}, sealed=None)
    return dataclasses.replace(body, text="", sealed=None)


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
    nonce, ciphertext = seal_bytes(key.secret, plaintext, ad)
    sealed = dataclasses.replace(clear_copy(body), sealed=Sealed(key.key_id, nonce, ciphertext))
    return dataclasses.replace(event, body=sealed)


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
    if clear_copy(body) != dataclasses.replace(body, sealed=None):
        raise MalformedSealError("a sealed record carries content beside its seal")
    found = keys.lookup(seal.key_id)
    if found is None:
        raise UnknownKeyError(f"the record is sealed under key {seal.key_id}, which the key store does not hold")
    if found.conversation != event.key:
        raise UnauthenticSealError(f"key {seal.key_id} belongs to another conversation than {event.key}")
    if isinstance(found, DestroyedKey):
        return event  # erased: the placeholder, clear fields only
    return dataclasses.replace(event, body=_opened(event, body, seal, found, codec))


def _opened(event: Event, body: SealableBody, seal: Sealed, key: DataKey, codec: BodyCodec) -> SealableBody:
    body_type = type(body).__name__
    ad = record_associated_data(str(event.key), event.event_id, body_type, seal.key_id)
    plaintext = open_bytes(key.secret, seal.nonce, seal.ciphertext, ad)
    try:
        opened = codec.decode_body(plaintext, body_type, writer=seal.writer)
    except Exception as e:  # authentic but not a body: a producer's bug, this record's dead letter
        raise MalformedSealError(f"the sealed plaintext is not a {body_type} record: {e}") from e
    if not isinstance(opened, type(body)) or opened.sealed is not None:
        raise MalformedSealError(f"the sealed plaintext is not a plain {body_type}")
    if clear_copy(opened) != dataclasses.replace(body, sealed=None):
        raise MalformedSealError("the record's clear fields disagree with its sealed body")
    return opened
