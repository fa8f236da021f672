"""Writing an event without building its Avro record first: the producer's hot path.

:meth:`events.codec.EventCodec.to_record` turns an event into the dicts and tuples the schema's
writer takes, and the writer reads them back: for a message, a dict of nineteen entries made
and read once per append. Here the current schema's writer is generated to read the event's
own objects instead — ``event.key.tenant_id``, ``body.role`` — for the envelope and for a
message without blocks (the common event); every other body still goes through its record.
The bytes are the same (tests/test_codec.py compares every encoding with fastavro's of
``to_record``). A schema whose fields this does not know gets no such writer, and the codec
writes every event through its record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from events.avro_writer import Writer, compile_object_writer, compile_writer
from events.errors import InvalidEventError
from events.event_types import Content, EventBody, MessageAppended, Sealed, TextPart, ToolCall, Usage

NS: Final = "convlog.events."
_TEXT_PART: Final = NS + "TextPart"
_IMAGE_PART: Final = NS + "ImagePart"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO: Final = timedelta(microseconds=1)
_MIN_MICROS: Final = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // _MICRO
_MAX_MICROS: Final = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _MICRO


def micros(value: datetime) -> int:
    """``occurred_at`` as the schema's timestamp-micros."""
    if value.utcoffset() is None:
        raise InvalidEventError("must be timezone-aware", field="occurred_at")
    result = (value - _EPOCH) // _MICRO
    if not _MIN_MICROS <= result <= _MAX_MICROS:
        raise InvalidEventError("outside the years 1..9999 in UTC", field="occurred_at")
    return result


def content_value(content: Content) -> Any:
    """A message's content as the schema's union value: text or null as is, parts as records."""
    if content is None or isinstance(content, str):
        return content
    return [
        (_TEXT_PART, {"text": p.text}) if isinstance(p, TextPart) else (_IMAGE_PART, {"url": p.url, "detail": p.detail})
        for p in content
    ]


def tool_call_records(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    return [{"id": t.id, "name": t.name, "arguments": t.arguments} for t in calls]


def usage_value(u: Usage | None) -> Any:
    if u is None:
        return None
    return (
        NS + "Usage",
        {
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "cached_tokens": u.cached_tokens,
            "reasoning_tokens": u.reasoning_tokens,
            "cache_write_tokens": u.cache_write_tokens,
        },
    )


def sealed_value(sealed: Sealed | None) -> Any:
    """A body's seal (schema v5) as the schema's union value."""
    if sealed is None:
        return None
    return (NS + "Sealed", {"key_id": sealed.key_id, "nonce": sealed.nonce, "ciphertext": sealed.ciphertext})


# Where each field's value is, as an expression over ``value`` (the event, the message).
_ENVELOPE: Final = {
    "event_id": "value.event_id",
    "tenant_id": "value.key.tenant_id",
    "user_id": "value.key.user_id",
    "conversation_id": "value.key.conversation_id",
    "occurred_at": "micros(value.occurred_at)",
    "producer": "value.producer",
    "body": "value.body",
}
_MESSAGE_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(MessageAppended))
_MESSAGE: Final = {
    "content": "content_value(value.content)",
    "tool_calls": "tool_call_records(value.tool_calls) if value.tool_calls else ()",
    "usage": "usage_value(value.usage)",
    "blocks": "()",  # this writer takes messages without blocks only
    "sealed": "sealed_value(value.sealed)",
}
_HELPERS: Final = {
    "micros": micros,
    "content_value": content_value,
    "tool_call_records": tool_call_records,
    "usage_value": usage_value,
    "sealed_value": sealed_value,
}


def compile_event_writer(
    schema: Any, named: dict[str, Writer], kinds: dict[str, str], body_record: Callable[[EventBody], Any]
) -> Writer | None:
    """The writer of an :class:`~events.event_types.Event` under ``schema`` (its named types
    in ``named``/``kinds``, as compiling it filled them), or None when the schema has a field
    this module does not know. ``body_record`` makes the body union's value of other bodies."""
    fields = {f["name"]: f for f in schema["fields"]}
    if set(fields) != set(_ENVELOPE):
        return None
    branches = fields["body"]["type"]
    index = next((i for i, b in enumerate(branches) if b["name"] == NS + "MessageAppended"), None)
    if index is None or index >= 64:
        return None
    message = branches[index]
    if not {f["name"] for f in message["fields"]} <= _MESSAGE_FIELDS | set(_MESSAGE):
        return None
    write_message = compile_object_writer(message, named, kinds, fetch=_MESSAGE, writers={}, namespace=_HELPERS)
    write_union = compile_writer(fields["body"]["type"], dict(named), dict(kinds))
    tag = index << 1  # zigzag(index), one byte

    def write_body(body: EventBody, out: bytearray) -> None:
        if type(body) is MessageAppended and not body.blocks:
            out.append(tag)
            write_message(body, out)
        else:
            write_union(body_record(body), out)

    return compile_object_writer(
        schema, named, kinds, fetch=_ENVELOPE, writers={"body": write_body}, namespace=_HELPERS
    )
