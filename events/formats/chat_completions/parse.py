"""Chat Completions, append side: today's message object (plus convlog's extras), or a list of
them appended as one atomic batch. The message itself is read by :mod:`events.openai_format`
(it predates the other formats, and the producer's ``append_message`` uses it too)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from events.errors import InvalidEventError
from events.event_types import MessageAppended
from events.formats import Parsed, at_path
from events.openai_format import message_from_openai, requested_message_id
from events.servable import check_nesting

__all__ = ["parse"]


def parse(payload: object, *, new_id: Callable[[], str]) -> Parsed:
    """A Chat Completions message object (plus convlog's extras, as ``POST …/messages`` took it
    before formats existed), or a list of them: the messages in order. A message may name its
    own ``message_id``; else it gets ``new_id()``. In a list, a problem's ``field`` is its JSON
    path from the list (``[2].tool_calls[0].id``); for one object, the path in it, as before."""
    check_nesting(payload)
    if isinstance(payload, Mapping):
        return Parsed((_message(payload, new_id),))
    if not isinstance(payload, Sequence) or isinstance(payload, str | bytes):
        raise InvalidEventError("must be a message object or a list of message objects", field="message")
    messages = []
    for i, item in enumerate(payload):
        try:
            messages.append(_message(item, new_id))
        except InvalidEventError as e:
            raise at_path(e, f"[{i}]") from e
    return Parsed(tuple(messages))


def _message(message: object, new_id: Callable[[], str]) -> MessageAppended:
    doc = cast("Mapping[str, Any]", message)
    requested = requested_message_id(doc)  # a non-object is refused here, naming the field "message"
    return message_from_openai(doc, message_id=new_id() if requested is None else requested)
