"""What an append answers (:class:`Appended`: the event id, the message id, where it landed)
and the headers every record of an event carries (the producer contract's event type header)."""

from __future__ import annotations

from dataclasses import dataclass

from events.event_types import BODY_TYPES, Event, MessageAppended
from events.log import Coordinates

__all__ = ["EVENT_TYPE_HEADER", "Appended", "appended_at", "type_headers"]

EVENT_TYPE_HEADER = "convlog.event_type"


@dataclass(frozen=True, slots=True)
class Appended:
    """What an append returns: the event id, the message id (for messages) and where it landed."""

    event_id: str
    coordinates: Coordinates
    message_id: str | None = None

    @property
    def partition(self) -> int:
        return self.coordinates.partition

    @property
    def offset(self) -> int:
        return self.coordinates.offset


def appended_at(event: Event, coordinates: Coordinates) -> Appended:
    """What appending ``event`` answers once it is stored at ``coordinates``."""
    message_id = event.body.message_id if isinstance(event.body, MessageAppended) else None
    return Appended(event_id=event.event_id, coordinates=coordinates, message_id=message_id)


def type_headers(event: Event) -> tuple[tuple[str, bytes], ...]:
    """The record's headers: the event type (see the producer contract)."""
    headers = _TYPE_HEADERS.get(type(event.body))
    return ((EVENT_TYPE_HEADER, event.event_type.encode()),) if headers is None else headers


# Built once per body type: every append sends one of these.
_TYPE_HEADERS: dict[type, tuple[tuple[str, bytes], ...]] = {
    cls: ((EVENT_TYPE_HEADER, cls.__name__.encode()),) for cls in BODY_TYPES
}
