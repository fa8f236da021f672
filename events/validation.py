"""Invariants an event must satisfy before it may enter the log.

Pure functions: they raise :class:`InvalidEventError` naming the offending field, so a chat
app learns what to fix instead of a provider answering HTTP 400 turns later — or Postgres
refusing the record in the projector, which no retry can fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from events.blocks import chat_view
from events.errors import InvalidEventError
from events.event_types import (
    API_FORMATS,
    FINISH_REASONS,
    ROLES,
    ConversationCleared,
    ConversationErased,
    ConversationStarted,
    Event,
    ImagePart,
    MediaBlock,
    MessageAppended,
    MessageRedacted,
    OpaqueBlock,
    ReasoningBlock,
    SummaryRecorded,
    TextBlock,
    TextPart,
    ToolCallBlock,
)
from events.storable import check_storable, storable, unstorable_char
from events.strict_json import NotJsonError, parse_json

__all__ = ["MAX_ID_LENGTH", "unstorable_char", "validate_event", "validate_message"]

MAX_ID_LENGTH = 128
# OpenAI accepts this for function names and for the `name` of a message.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_IMAGE_URL_PREFIXES = ("https://", "http://", "data:image/")
# The read models are Postgres bigint columns and the log Avro longs.
_MAX_COUNT = (1 << 63) - 1


def validate_event(event: Event, *, stored: bool = False) -> None:
    """Raises :class:`InvalidEventError` naming the field. ``stored``: an event read back from the
    log (the fold), whose JSON text may name a key twice — another producer's, or appended before
    convlog refused that (events/strict_json.py): the last value counts, as every renderer reads
    it, rather than a dead letter that would park the conversation on a rebuild."""
    check_storable(event)
    _require_id(event.event_id, "event_id")
    if event.occurred_at.tzinfo is None:
        raise InvalidEventError("must be timezone-aware", field="occurred_at")
    if not event.producer:
        raise InvalidEventError("must not be empty", field="producer")
    body = event.body
    if isinstance(body, MessageAppended):
        validate_message(body, stored=stored)
    elif isinstance(body, MessageRedacted):
        _require_id(body.message_id, "message_id")
        _require_text(body.reason, "reason")
    elif isinstance(body, SummaryRecorded):
        _require_id(body.summary_id, "summary_id")
        _require_id(body.covers_through_message_id, "covers_through_message_id")
        _require_text(body.text, "text")
        _require_text(body.model, "model")
        _require_text(body.prompt_version, "prompt_version")
        for name in ("input_tokens", "output_tokens", "summary_tokens"):
            _non_negative(getattr(body, name), name)
        for i, excluded in enumerate(body.excluded_message_ids or ()):
            _require_id(excluded, f"excluded_message_ids[{i}]")
    elif isinstance(body, ConversationStarted):
        _check_metadata(body.metadata)
    elif isinstance(body, ConversationErased):
        _non_negative(body.only_if_last_offset, "only_if_last_offset")
    elif isinstance(body, ConversationCleared):
        pass
    else:  # pragma: no cover - the union is closed; this guards foreign subclasses
        raise InvalidEventError(f"unknown event body {type(body).__name__}", field="body")


def validate_message(msg: MessageAppended, *, stored: bool = False) -> None:
    _require_id(msg.message_id, "message_id")
    if msg.role not in ROLES:
        raise InvalidEventError(f"unknown role {msg.role!r}; expected one of {', '.join(ROLES)}", field="role")
    if msg.name is not None and not (isinstance(msg.name, str) and _NAME_RE.match(msg.name)):
        raise InvalidEventError("must match ^[A-Za-z0-9_-]{1,64}$", field="name")
    if msg.finish_reason is not None and msg.finish_reason not in FINISH_REASONS:
        raise InvalidEventError(f"unknown finish_reason {msg.finish_reason!r}", field="finish_reason")
    _non_negative(msg.thinking_duration_ms, "thinking_duration_ms")
    if msg.usage is not None:
        for name in ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "cache_write_tokens"):
            _non_negative(getattr(msg.usage, name), f"usage.{name}")
    _check_metadata(msg.metadata)
    _check_native(msg, stored=stored)
    _check_content(msg)
    if msg.role != "assistant":
        for name in ("tool_calls", "reasoning_content", "thinking_duration_ms", "finish_reason"):
            if getattr(msg, name) not in (None, ()):
                raise InvalidEventError(f"only assistant messages carry {name}", field=name)
    if msg.role == "tool":
        if not msg.tool_call_id:
            raise InvalidEventError("a tool message needs the id of the call it answers", field="tool_call_id")
    elif msg.tool_call_id is not None:
        raise InvalidEventError("only tool messages carry tool_call_id", field="tool_call_id")
    if msg.role == "assistant":
        _check_tool_calls(msg, stored=stored)


def _check_native(msg: MessageAppended, *, stored: bool) -> None:
    """Schema v4's fields. The blocks are checked before the view derived from them, so an
    error names the block (``blocks[2].arguments``), not the tool call it became."""
    if msg.api is not None and msg.api not in API_FORMATS:
        raise InvalidEventError(f"unknown api {msg.api!r}; expected one of {', '.join(API_FORMATS)}", field="api")
    if msg.provider is not None and not isinstance(msg.provider, str):
        raise InvalidEventError("must be a string", field="provider")
    if msg.is_error is not None:
        if not isinstance(msg.is_error, bool):
            raise InvalidEventError("must be a boolean", field="is_error")
        if msg.role != "tool":
            raise InvalidEventError("only tool messages carry is_error", field="is_error")
    if not msg.blocks:
        return
    if not isinstance(msg.blocks, tuple):
        raise InvalidEventError("must be a list of blocks", field="blocks")
    call_ids: set[str] = set()
    for i, block in enumerate(msg.blocks):
        _check_block(msg, block, f"blocks[{i}]", call_ids, stored=stored)
    # The view is derived, never stated: a message whose view disagrees with its blocks would
    # be one thing in the log (the blocks) and another in the request that wrote it.
    content, tool_calls = chat_view(msg.blocks, role=msg.role)
    if msg.content != content:
        raise InvalidEventError(
            "must be the Chat Completions view of blocks (events.blocks.chat_view)", field="content"
        )
    if msg.tool_calls != tool_calls:
        raise InvalidEventError("must be the tool calls of blocks (events.blocks.chat_view)", field="tool_calls")
    if msg.reasoning_content is not None:
        raise InvalidEventError("a message with blocks keeps its reasoning in blocks", field="reasoning_content")


_REASONING_PARTS = ("text", "summary", "signature", "redacted_data", "encrypted_content")


def _check_block(msg: MessageAppended, block: object, field: str, call_ids: set[str], *, stored: bool) -> None:
    if isinstance(block, TextBlock):
        if not isinstance(block.text, str):
            raise InvalidEventError("must be a string", field=f"{field}.text")
    elif isinstance(block, MediaBlock):
        _check_media(block, field, role=msg.role)
    elif isinstance(block, ToolCallBlock | ReasoningBlock) and msg.role != "assistant":
        raise InvalidEventError(f"only assistant messages carry {type(block).__name__}", field=field)
    elif isinstance(block, ToolCallBlock):
        _check_call_block(msg, block, field, call_ids, stored=stored)
    elif isinstance(block, ReasoningBlock):
        if all(getattr(block, part) is None for part in _REASONING_PARTS):
            raise InvalidEventError(f"a reasoning block needs one of {', '.join(_REASONING_PARTS)}", field=field)
    elif isinstance(block, OpaqueBlock):
        if not (isinstance(block.provider, str) and block.provider.strip()):
            raise InvalidEventError("must not be empty", field=f"{field}.provider")
        _check_json_text(block.json, f"{field}.json", stored=stored)
        return
    else:
        raise InvalidEventError("must be a text, media, tool call, reasoning or opaque block", field=field)
    if block.extra is not None:
        _check_json_text(block.extra, f"{field}.extra", object_only=True, stored=stored)


def _check_call_block(
    msg: MessageAppended, block: ToolCallBlock, field: str, call_ids: set[str], *, stored: bool
) -> None:
    if not (isinstance(block.id, str) and block.id):
        raise InvalidEventError("a tool call needs an id", field=f"{field}.id")
    if block.id in call_ids:
        raise InvalidEventError(f"duplicate tool call id {block.id!r}", field=f"{field}.id")
    call_ids.add(block.id)
    if not (isinstance(block.name, str) and _NAME_RE.match(block.name)):
        raise InvalidEventError("must match ^[A-Za-z0-9_-]{1,64}$", field=f"{field}.name")
    if msg.finish_reason != "interrupted":  # as for tool_calls: a cut stream keeps its cut arguments
        _check_json_text(block.arguments, f"{field}.arguments", stored=stored)


_MEDIA_KINDS = ("image", "file")
_DETAILS = ("auto", "low", "high")


def _check_media(block: MediaBlock, field: str, *, role: str) -> None:
    if block.kind not in _MEDIA_KINDS:
        raise InvalidEventError(f"unknown kind {block.kind!r}; expected image or file", field=f"{field}.kind")
    if (block.url is None) == (block.data is None):
        raise InvalidEventError("a media block needs exactly one of url and data", field=field)
    if block.data is not None and not block.media_type:
        raise InvalidEventError("inline data needs its media_type", field=f"{field}.media_type")
    # A user's image is an image_url part of the view: the content rule, named at the block.
    if block.kind == "image" and role == "user":
        if block.url is not None and not block.url.startswith(_IMAGE_URL_PREFIXES):
            raise InvalidEventError("must be an http(s) or data:image/ URL", field=f"{field}.url")
        if block.data is not None and not (block.media_type or "").startswith("image/"):
            raise InvalidEventError("an image's media_type must be image/...", field=f"{field}.media_type")
    if block.detail is not None and block.detail not in _DETAILS:
        raise InvalidEventError(f"unknown detail {block.detail!r}", field=f"{field}.detail")


def _check_content(msg: MessageAppended) -> None:
    content = msg.content
    if isinstance(content, tuple):
        if not content:
            raise InvalidEventError("content parts must not be empty", field="content")
        for i, part in enumerate(content):
            if isinstance(part, ImagePart):
                if msg.role != "user":
                    raise InvalidEventError("only user messages may carry images", field=f"content[{i}]")
                if not (isinstance(part.url, str) and part.url.startswith(_IMAGE_URL_PREFIXES)):
                    raise InvalidEventError("must be an http(s) or data:image/ URL", field=f"content[{i}].url")
            elif not isinstance(part, TextPart):
                raise InvalidEventError("must be a text or image_url part", field=f"content[{i}]")
        return
    has_text = bool(content)
    # An assistant turn may be only tool calls, and a stream may be cut before any text.
    if msg.role == "assistant" and (msg.tool_calls or msg.finish_reason == "interrupted"):
        return
    if msg.blocks:
        return  # its content is its blocks (an answer may be only reasoning, a server tool's blocks)
    if msg.role == "tool" and content is not None:
        return  # a tool may legitimately return an empty string
    if not has_text:
        raise InvalidEventError(f"a {msg.role} message needs content", field="content")


def _check_tool_calls(msg: MessageAppended, *, stored: bool) -> None:
    seen: set[str] = set()
    for i, call in enumerate(msg.tool_calls):
        field = f"tool_calls[{i}]"
        if not call.id:
            raise InvalidEventError("a tool call needs an id", field=f"{field}.id")
        if not isinstance(call.id, str):
            raise InvalidEventError("must be a string", field=f"{field}.id")
        if call.id in seen:
            raise InvalidEventError(f"duplicate tool call id {call.id!r}", field=f"{field}.id")
        seen.add(call.id)
        if not (isinstance(call.name, str) and _NAME_RE.match(call.name)):
            raise InvalidEventError("must match ^[A-Za-z0-9_-]{1,64}$", field=f"{field}.name")
        # An interrupted stream may stop mid-arguments; it is stored for audit and never served.
        if msg.finish_reason == "interrupted":
            continue
        _check_json_text(call.arguments, f"{field}.arguments", stored=stored)


def _check_json_text(text: object, field: str, *, object_only: bool = False, stored: bool) -> None:
    if not isinstance(text, str):
        raise InvalidEventError("must be a string of JSON", field=field)
    try:
        parsed = parse_json(text, stored=stored)
    except NotJsonError as e:
        raise InvalidEventError(f"not valid JSON ({e})", field=field) from e
    if object_only and not isinstance(parsed, dict):
        raise InvalidEventError("must be a JSON object", field=field)
    # Parsed (as renderers to object-typed tool inputs do), an escaped \u0000 or lone
    # surrogate is the character itself: Postgres jsonb refuses both escapes too.
    if not storable(parsed):
        raise InvalidEventError(
            "holds an escaped U+0000 or lone surrogate, which Postgres jsonb cannot store", field=field
        )


def _require_id(value: str, field: str) -> None:
    if not isinstance(value, str):
        raise InvalidEventError("must be a string", field=field)
    if not value or value.isspace():  # as `not value.strip()`, without a copy
        raise InvalidEventError("must not be empty", field=field)
    if len(value) > MAX_ID_LENGTH:
        raise InvalidEventError(f"longer than {MAX_ID_LENGTH} characters", field=field)


def _require_text(value: str | None, field: str) -> None:
    if not isinstance(value, str):
        raise InvalidEventError("must be a string", field=field)
    if not value or value.isspace():
        raise InvalidEventError("must not be empty", field=field)


def _non_negative(value: int | None, field: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidEventError("must be an integer", field=field)
    if not 0 <= value <= _MAX_COUNT:
        raise InvalidEventError(f"must be between 0 and {_MAX_COUNT}", field=field)


def _check_metadata(metadata: Mapping[str, str]) -> None:
    if type(metadata) is not dict and not isinstance(metadata, Mapping):  # a dict: no ABC check
        raise InvalidEventError("must be an object of strings", field="metadata")
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidEventError("keys and values must be strings", field=f"metadata.{k}")
