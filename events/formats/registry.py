"""Which parser reads a payload of each append format (``?format=`` on the HTTP append).

``chat_completions`` is parsed here: today's message object, or a list of them (appended as one
atomic batch). The native formats each have a module ``events.formats.<format>`` with a
``parse`` function (the :class:`~events.formats.Parser` signature), imported on first use only:
an app that never appends Anthropic payloads never imports that module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from events.errors import EventTooLargeError, InvalidEventError, InvalidRequestError
from events.event_types import API_FORMATS, MessageAppended
from events.formats import Parsed, Parser
from events.openai_format import message_from_openai, requested_message_id
from events.servable import check_nesting

__all__ = ["APPEND_FORMATS", "NATIVE_FORMATS", "at_path", "parse_chat_completions", "parser_for"]

APPEND_FORMATS: tuple[str, ...] = API_FORMATS
NATIVE_FORMATS: tuple[str, ...] = tuple(f for f in API_FORMATS if f != "chat_completions")


def parser_for(format: str) -> Parser:  # noqa: A002 - the query parameter's name
    """The parser of ``format``; :class:`InvalidRequestError` (code ``unknown_format``) for a
    format convlog does not know, or one whose module this build does not have."""
    if format == "chat_completions":
        return parse_chat_completions
    if format not in NATIVE_FORMATS:
        raise _unknown(f"unknown format {format!r}; expected one of {', '.join(APPEND_FORMATS)}")
    name = f"{__package__}.{format}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise  # the module is there but imports something missing: a broken build, not a bad request
        raise _unknown(f"format {format!r} is not available in this build") from e
    return cast("Parser", module.parse)


def _unknown(message: str) -> InvalidRequestError:
    error = InvalidRequestError(message)
    error.code = "unknown_format"
    return error


def parse_chat_completions(payload: object, *, new_id: Callable[[], str]) -> Parsed:
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


def at_path(error: InvalidEventError, prefix: str) -> InvalidEventError:
    """``error`` with ``prefix`` before its field (``[2]`` + ``content`` -> ``[2].content``): the
    same class and code. A too-large event has no path inside the payload: it comes back as is."""
    if isinstance(error, EventTooLargeError):
        return error
    field = prefix if error.field in (None, "", "message") else f"{prefix}.{error.field}"
    moved = type(error).__new__(type(error))
    moved.__dict__.update(error.__dict__)
    moved.field = field
    moved.args = (f"{field}: {error.reason}",)
    return moved
