"""Reads of what another process sealed: a record or a row under a key this process has not
loaded yet — one another API instance, the projector of another process or a foreign producer
created a moment ago — is read again once the key store has been refreshed. Still unknown
after that, the error stands (the projection dead-letters such a record: docs/erasure.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from events.codec import EventCodec
from events.errors import UndecodableRecordError, UnknownKeyError
from events.event_types import Event

T = TypeVar("T")


def _of_an_unknown_key(error: BaseException) -> bool:
    return isinstance(error, UnknownKeyError) or isinstance(error.__cause__, UnknownKeyError)


async def refreshing_keys(codec: EventCodec, read: Callable[[], Awaitable[T]]) -> T:
    """``read()``; once more after one refresh of ``codec``'s key store when it failed on a key
    id the store does not know."""
    try:
        return await read()
    except (UnknownKeyError, UndecodableRecordError) as e:
        if codec.keys is None or not _of_an_unknown_key(e):
            raise
    await codec.keys.refresh()
    return await read()


async def decoded_fresh(codec: EventCodec, data: bytes) -> Event:
    """``codec.decode(data)``; once more after one refresh of the key store when the record is
    sealed under a key it does not hold yet."""
    try:
        return codec.decode(data)
    except UnknownKeyError:
        if codec.keys is None:
            raise
    await codec.keys.refresh()
    return codec.decode(data)
