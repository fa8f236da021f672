"""Avro single-object encoding of :class:`~events.event_types.Event`: ``C3 01``, the 8-byte
little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical Form, then the
Avro binary body.

A message with ``blocks`` (schema v4) is written with its blocks only — ``content`` null,
``tool_calls`` empty, ``reasoning_content`` null — and read back with ``content`` and
``tool_calls`` derived from the blocks (:func:`events.blocks.chat_view`). The blocks are the
truth: a record that carries both (a foreign producer's) is read from its blocks alone. Its
``reasoning_content`` is kept, though, for validation to refuse: reasoning in two places is
not a view that can be re-derived.

Every ``event.vN.avsc`` in the schema directory is loaded. The highest N writes and reads;
older versions are known writer schemas, resolved to the current one (fastavro). Bodies are
written by fastavro and read by a small strict reader compiled from the writer schema:
fastavro's reader wraps a negative union or enum index around like a Python list index, so a
corrupt record would decode to a different, valid-looking event instead of failing.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import re
import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, TypeAlias, cast

from fastavro import parse_schema, schemaless_reader
from fastavro.read import SchemaResolutionError
from fastavro.schema import fingerprint as avro_fingerprint
from fastavro.schema import to_parsing_canonical_form

from events.avro_reader import compile_reader
from events.avro_writer import compile_writer
from events.blocks import chat_view
from events.errors import ConfigurationError, CorruptRecordError, InvalidEventError, UnknownSchemaError
from events.event_types import (
    Block,
    ConversationCleared,
    ConversationErased,
    ConversationStarted,
    Event,
    EventBody,
    ImagePart,
    MediaBlock,
    MessageAppended,
    MessageRedacted,
    OpaqueBlock,
    ReasoningBlock,
    SummaryRecorded,
    TextBlock,
    TextPart,
    ToolCall,
    ToolCallBlock,
    Usage,
)
from events.event_writer import compile_event_writer, content_value, micros, tool_call_records, usage_value
from events.keys import ConversationKey
from events.slot_builder import slot_builder

MAGIC: Final = b"\xc3\x01"
HEADER_SIZE: Final = 10
_NS: Final = "convlog.events."
_TEXT_PART: Final = _NS + "TextPart"
_SCHEMA_FILE: Final = re.compile(r"event\.v([1-9][0-9]*)\.avsc")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

Record: TypeAlias = dict[str, Any]

# Decoding builds an event per record: without a frozen __init__'s setattr per field (events/slot_builder.py).
_new_event: Final = slot_builder(Event)
_new_message: Final = slot_builder(MessageAppended)

# ---- hand-written converters -----------------------------------------------------------------

# A block's record has its dataclass's fields, same names, same order (schema v4).
_BLOCK_NAMES: Final[dict[type[Any], str]] = {
    cls: _NS + cls.__name__ for cls in (TextBlock, MediaBlock, ToolCallBlock, ReasoningBlock, OpaqueBlock)
}


def _block_record(b: Block) -> tuple[str, Record]:
    record = {name: getattr(b, name) for name in b.__slots__}
    if isinstance(b, ReasoningBlock) and b.summary is not None:
        record["summary"] = list(b.summary)
    return _BLOCK_NAMES[type(b)], record


def _reasoning_block(r: Record) -> ReasoningBlock:
    summary = r["summary"]
    return ReasoningBlock(**(r | {"summary": tuple(summary)}) if summary is not None else r)


_BLOCK_BODIES: Final[dict[str, Callable[[Record], Block]]] = {
    _NS + "TextBlock": lambda r: TextBlock(**r),
    _NS + "MediaBlock": lambda r: MediaBlock(**r),
    _NS + "ToolCallBlock": lambda r: ToolCallBlock(**r),
    _NS + "ReasoningBlock": _reasoning_block,
    _NS + "OpaqueBlock": lambda r: OpaqueBlock(**r),
}


def _message_record(b: MessageAppended) -> Record:
    if b.blocks:  # the blocks are the truth; the Chat Completions view is derived on read
        return _native_message_record(b)
    return {
        "message_id": b.message_id,
        "role": b.role,
        "content": content_value(b.content),
        "name": b.name,
        "tool_calls": tool_call_records(b.tool_calls),
        "tool_call_id": b.tool_call_id,
        "reasoning_content": b.reasoning_content,
        "thinking_duration_ms": b.thinking_duration_ms,
        "model": b.model,
        "usage": usage_value(b.usage),
        "finish_reason": b.finish_reason,
        "metadata": b.metadata,
        "blocks": [],
        "provider": b.provider,
        "api": b.api,
        "is_error": b.is_error,
    }


def _native_message_record(b: MessageAppended) -> Record:
    record = _message_record(dataclasses.replace(b, content=None, tool_calls=(), reasoning_content=None, blocks=()))
    record["blocks"] = [_block_record(block) for block in b.blocks]
    return record


def _summary_record(b: SummaryRecorded) -> Record:
    return {
        "summary_id": b.summary_id,
        "text": b.text,
        "covers_through_message_id": b.covers_through_message_id,
        "model": b.model,
        "prompt_version": b.prompt_version,
        "input_tokens": b.input_tokens,
        "output_tokens": b.output_tokens,
        "summary_tokens": b.summary_tokens,
        "excluded_message_ids": None if b.excluded_message_ids is None else list(b.excluded_message_ids),
    }


def _message_body(r: Record) -> MessageAppended:
    blocks: tuple[Block, ...] = ()
    tool_calls: tuple[ToolCall, ...]
    # .get: a reader schema before v4 has none of its fields (schema evolution tests use such).
    raw_blocks = r.get("blocks")
    if raw_blocks:  # whatever content and tool_calls the record also has, the blocks win
        blocks = tuple(_BLOCK_BODIES[name](v) for name, v in raw_blocks)
        content, tool_calls = chat_view(blocks, role=r["role"])
    else:
        content = r["content"]
        if isinstance(content, list):
            content = tuple(
                TextPart(text=v["text"]) if name == _TEXT_PART else ImagePart(url=v["url"], detail=v["detail"])
                for name, v in content
            )
        calls = r["tool_calls"]  # most messages have none: no generator for them
        tool_calls = tuple(ToolCall(t["id"], t["name"], t["arguments"]) for t in calls) if calls else ()
    u = r["usage"]
    return _new_message(
        message_id=r["message_id"],
        role=r["role"],
        content=content,
        name=r["name"],
        tool_calls=tool_calls,
        tool_call_id=r["tool_call_id"],
        reasoning_content=r["reasoning_content"],
        thinking_duration_ms=r["thinking_duration_ms"],
        model=r["model"],
        usage=None
        if u is None
        else Usage(
            prompt_tokens=u["prompt_tokens"],
            completion_tokens=u["completion_tokens"],
            cached_tokens=u["cached_tokens"],
            reasoning_tokens=u["reasoning_tokens"],
            cache_write_tokens=u.get("cache_write_tokens"),
        ),
        finish_reason=r["finish_reason"],
        metadata=r["metadata"],
        blocks=blocks,
        provider=r.get("provider"),
        api=r.get("api"),
        is_error=r.get("is_error"),
    )


def _summary_body(r: Record) -> SummaryRecorded:
    return SummaryRecorded(
        summary_id=r["summary_id"],
        text=r["text"],
        covers_through_message_id=r["covers_through_message_id"],
        model=r["model"],
        prompt_version=r["prompt_version"],
        input_tokens=r["input_tokens"],
        output_tokens=r["output_tokens"],
        summary_tokens=r["summary_tokens"],
        excluded_message_ids=None if r.get("excluded_message_ids") is None else tuple(r["excluded_message_ids"]),
    )


_TO_RECORD: Final[dict[type[Any], tuple[str, Callable[[Any], Record]]]] = {
    ConversationStarted: (_NS + "ConversationStarted", lambda b: {"title": b.title, "metadata": b.metadata}),
    MessageAppended: (_NS + "MessageAppended", _message_record),
    MessageRedacted: (_NS + "MessageRedacted", lambda b: {"message_id": b.message_id, "reason": b.reason}),
    SummaryRecorded: (_NS + "SummaryRecorded", _summary_record),
    ConversationCleared: (_NS + "ConversationCleared", lambda b: {"reason": b.reason}),
    ConversationErased: (
        _NS + "ConversationErased",
        lambda b: {"reason": b.reason, "only_if_last_offset": b.only_if_last_offset},
    ),
}
_FROM_RECORD: Final[dict[str, Callable[[Record], EventBody]]] = {
    _NS + "ConversationStarted": lambda r: ConversationStarted(title=r["title"], metadata=r["metadata"]),
    _NS + "MessageAppended": _message_body,
    _NS + "MessageRedacted": lambda r: MessageRedacted(message_id=r["message_id"], reason=r["reason"]),
    _NS + "SummaryRecorded": _summary_body,
    _NS + "ConversationCleared": lambda r: ConversationCleared(reason=r["reason"]),
    _NS + "ConversationErased": lambda r: ConversationErased(
        reason=r["reason"], only_if_last_offset=r.get("only_if_last_offset")
    ),
}


def _body_record(body: EventBody) -> tuple[str, Record]:
    """The body union's value: the branch's name and the body's record."""
    converter = _TO_RECORD.get(type(body))
    if converter is None:
        raise InvalidEventError(f"unknown body type {type(body).__name__}", field="body")
    name, to_record = converter
    return name, to_record(body)


# Keys repeat from event to event (a conversation is many events): validate each one once.
_conversation_key: Final = functools.lru_cache(maxsize=4096)(ConversationKey)


# ---- the codec -------------------------------------------------------------------------------


class _Version:
    __slots__ = ("fingerprint", "number", "read", "schema", "write", "write_event")

    def __init__(self, number: int, path: Path) -> None:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            # logicalType is not in the canonical form; the converters do the conversions (micros).
            self.schema = cast("Record", parse_schema(_strip_logical_types(raw), named_schemas={}))
            self.fingerprint = bytes.fromhex(avro_fingerprint(to_parsing_canonical_form(raw), "CRC-64-AVRO"))
            self.read = compile_reader(self.schema, {})
            named: dict[str, Any] = {}
            kinds: dict[str, str] = {}
            self.write = compile_writer(self.schema, named, kinds)
            self.write_event = compile_event_writer(self.schema, named, kinds, _body_record)
        except Exception as e:  # anything wrong with a schema file is a configuration error
            raise ConfigurationError(f"cannot load Avro schema {path}: {e!r}") from e
        self.number = number


def _strip_logical_types(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip_logical_types(s) for s in schema]
    return schema


def _bundled_schema_dir() -> Path:
    here = Path(__file__).resolve().parent
    wheel = here / "_schemas"  # a wheel force-includes schemas/ here
    return wheel if wheel.is_dir() else here.parent / "schemas"


class EventCodec:
    """Encodes events with the newest schema version; decodes records of every known version."""

    def __init__(self, schema_dir: Path | None = None) -> None:
        directory = schema_dir or _bundled_schema_dir()
        found = sorted((int(m[1]), p) for p in directory.glob("event.v*.avsc") if (m := _SCHEMA_FILE.fullmatch(p.name)))
        if not found:
            raise ConfigurationError(f"no event.vN.avsc schema in {directory}")
        versions = [_Version(n, p) for n, p in found]
        self._current = versions[-1]
        self._known = {v.fingerprint: v for v in versions}  # the current version last: it wins ties
        bodies: list[Any] = next((f["type"] for f in self._current.schema.get("fields", ()) if f["name"] == "body"), [])
        unknown = {b["name"] if isinstance(b, dict) else b for b in bodies} ^ set(_FROM_RECORD)
        if unknown:
            raise ConfigurationError(f"schema v{self.version} and events.event_types disagree on {sorted(unknown)}")
        self._header = MAGIC + self._current.fingerprint
        self._content_type = f"application/vnd.apache.avro+binary; encoding=single-object; schema={_NS}Event"

    @property
    def version(self) -> int:
        """The N of the ``event.vN.avsc`` that writes."""
        return self._current.number

    @property
    def fingerprint(self) -> bytes:
        """CRC-64-AVRO of the writer schema, as it appears in every encoded record (8 bytes)."""
        return self._current.fingerprint

    @property
    def content_type(self) -> str:
        """For a ``content-type`` record header; the payload names its exact schema itself."""
        return self._content_type

    def encode(self, event: Event) -> bytes:
        """Raises :class:`InvalidEventError` when the event does not fit the schema."""
        try:
            out = bytearray(self._header)
            if self._current.write_event is None:
                self._current.write(self.to_record(event), out)
            else:  # the same bytes, without making the record first (events.event_writer)
                self._current.write_event(event, out)
        except InvalidEventError:
            raise
        except (KeyError, ValueError, TypeError, AttributeError, OverflowError) as e:
            raise InvalidEventError(f"does not fit schema v{self.version}: {e!r}", field="event") from e
        return bytes(out)

    def to_record(self, event: Event) -> Record:
        """The event as the Avro record the current schema writes (fastavro's value shapes)."""
        key = event.key
        return {
            "event_id": event.event_id,
            "tenant_id": key.tenant_id,
            "user_id": key.user_id,
            "conversation_id": key.conversation_id,
            "occurred_at": micros(event.occurred_at),
            "producer": event.producer,
            "body": _body_record(event.body),
        }

    def decode(self, data: bytes | memoryview) -> Event:
        """Raises :class:`UnknownSchemaError` or :class:`CorruptRecordError`, nothing else."""
        buf = bytes(data)
        if len(buf) < HEADER_SIZE:
            raise CorruptRecordError(f"{len(buf)}-byte record is shorter than the {HEADER_SIZE}-byte header")
        if buf[:2] != MAGIC:
            raise CorruptRecordError(f"bad magic {buf[:2].hex()}: not an Avro single-object record")
        version = self._known.get(buf[2:HEADER_SIZE])
        if version is None:
            raise UnknownSchemaError(buf[2:HEADER_SIZE])
        try:
            record, end = version.read(buf, HEADER_SIZE)
            if end != len(buf):
                raise CorruptRecordError(f"{len(buf) - end} trailing byte(s) after the record")
            if version is not self._current:  # already validated strictly; now resolve to the reader
                record = schemaless_reader(
                    io.BytesIO(buf[HEADER_SIZE:]),
                    version.schema,
                    self._current.schema,
                    return_named_type=True,
                    return_named_type_override=True,
                )
            name, body = record["body"]
            return _new_event(
                event_id=record["event_id"],
                key=_conversation_key(record["tenant_id"], record["user_id"], record["conversation_id"]),
                occurred_at=_EPOCH + timedelta(0, 0, record["occurred_at"]),  # (days, seconds, microseconds)
                producer=record["producer"],
                body=_FROM_RECORD[name](body),
            )
        except (IndexError, EOFError, struct.error) as e:
            detail = "" if isinstance(e, IndexError) else f": {e}"
            raise CorruptRecordError(f"truncated record (schema v{version.number}){detail}") from e
        except UnicodeDecodeError as e:
            raise CorruptRecordError(f"invalid UTF-8 in a string: {e}") from e
        except OverflowError as e:
            raise CorruptRecordError(f"occurred_at out of range: {e}") from e
        except (ValueError, KeyError, TypeError, SchemaResolutionError) as e:
            raise CorruptRecordError(f"not a valid event (schema v{version.number}): {e}") from e


@functools.cache
def default_codec() -> EventCodec:
    """The codec over the schemas shipped with this package (built once)."""
    return EventCodec()
