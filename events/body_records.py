"""The hand-written converters between the event bodies (events/event_types.py) and the Avro
records of the current schema (fastavro's value shapes): what :class:`events.codec.EventCodec`
writes for a body that its generated writer does not take, and what it builds a body from.

A message with ``blocks`` (schema v4) is written with its blocks only and read back with
``content`` and ``tool_calls`` derived from them (:func:`events.blocks.chat_view`). A sealed
body's seal (schema v5) is read with the fingerprint of its record's writer schema, which its
plaintext is encoded with (events/sealing/bodies.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Final, TypeAlias

from events.blocks import chat_view
from events.errors import InvalidEventError
from events.event_types import (
    Block,
    ConversationCleared,
    ConversationErased,
    ConversationStarted,
    EventBody,
    ImagePart,
    MediaBlock,
    MessageAppended,
    MessageRedacted,
    OpaqueBlock,
    ReasoningBlock,
    Sealed,
    SummaryRecorded,
    TextBlock,
    TextPart,
    ToolCall,
    ToolCallBlock,
    Usage,
)
from events.event_writer import content_value, sealed_value, tool_call_records, usage_value
from events.slot_builder import slot_builder

__all__ = ["FROM_RECORD", "NS", "Record", "body_record"]

NS: Final = "convlog.events."
_NS: Final = NS
_TEXT_PART: Final = _NS + "TextPart"

Record: TypeAlias = dict[str, Any]

# Decoding builds a message per record: without a frozen __init__'s setattr per field (events/slot_builder.py).
_new_message: Final = slot_builder(MessageAppended)

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
        "sealed": sealed_value(b.sealed),
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
        "sealed": sealed_value(b.sealed),
    }


def _sealed(r: Record, writer: bytes) -> Sealed | None:
    # .get: records of schema versions before 5 have no seal.
    v = r.get("sealed")
    return None if v is None else Sealed(v["key_id"], v["nonce"], v["ciphertext"], writer)


def _message_body(r: Record, writer: bytes = b"") -> MessageAppended:
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
        sealed=_sealed(r, writer),
    )


def _summary_body(r: Record, writer: bytes = b"") -> SummaryRecorded:
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
        sealed=_sealed(r, writer),
    )


_TO_RECORD: Final[dict[type[Any], tuple[str, Callable[[Any], Record]]]] = {
    ConversationStarted: (
        _NS + "ConversationStarted",
        lambda b: {"title": b.title, "metadata": b.metadata, "sealed": sealed_value(b.sealed)},
    ),
    MessageAppended: (_NS + "MessageAppended", _message_record),
    MessageRedacted: (_NS + "MessageRedacted", lambda b: {"message_id": b.message_id, "reason": b.reason}),
    SummaryRecorded: (_NS + "SummaryRecorded", _summary_record),
    ConversationCleared: (_NS + "ConversationCleared", lambda b: {"reason": b.reason}),
    ConversationErased: (
        _NS + "ConversationErased",
        lambda b: {
            "reason": b.reason,
            "only_if_last_offset": b.only_if_last_offset,
            "subject": b.subject,
            "requested_by": b.requested_by,
        },
    ),
}
# (record, the writer schema's fingerprint: what a seal's plaintext is encoded with)
FROM_RECORD: Final[dict[str, Callable[[Record, bytes], EventBody]]] = {
    _NS + "ConversationStarted": lambda r, w: ConversationStarted(
        title=r["title"], metadata=r["metadata"], sealed=_sealed(r, w)
    ),
    _NS + "MessageAppended": _message_body,
    _NS + "MessageRedacted": lambda r, _: MessageRedacted(message_id=r["message_id"], reason=r["reason"]),
    _NS + "SummaryRecorded": _summary_body,
    _NS + "ConversationCleared": lambda r, _: ConversationCleared(reason=r["reason"]),
    _NS + "ConversationErased": lambda r, _: ConversationErased(
        reason=r["reason"],
        only_if_last_offset=r.get("only_if_last_offset"),
        subject=r.get("subject"),
        requested_by=r.get("requested_by"),
    ),
}


def body_record(body: EventBody) -> tuple[str, Record]:
    """The body union's value: the branch's name and the body's record."""
    converter = _TO_RECORD.get(type(body))
    if converter is None:
        raise InvalidEventError(f"unknown body type {type(body).__name__}", field="body")
    name, to_record = converter
    return name, to_record(body)
