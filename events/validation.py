"""Invariants an event must satisfy before it may enter the log.

Pure functions: they raise :class:`InvalidEventError` naming the offending field, so a chat
app learns what to fix instead of a provider answering HTTP 400 turns later.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from events.errors import InvalidEventError
from events.model import (
    FINISH_REASONS,
    ROLES,
    ConversationCleared,
    ConversationErased,
    ConversationStarted,
    Event,
    ImagePart,
    MessageAppended,
    MessageRedacted,
    SummaryRecorded,
    TextPart,
)

MAX_ID_LENGTH = 128
# OpenAI accepts this for function names and for the `name` of a message.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_IMAGE_URL_PREFIXES = ("https://", "http://", "data:image/")


def validate_event(event: Event) -> None:
    _require_id(event.event_id, "event_id")
    if event.occurred_at.tzinfo is None:
        raise InvalidEventError("must be timezone-aware", field="occurred_at")
    if not event.producer:
        raise InvalidEventError("must not be empty", field="producer")
    body = event.body
    if isinstance(body, MessageAppended):
        validate_message(body)
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


def validate_message(msg: MessageAppended) -> None:
    _require_id(msg.message_id, "message_id")
    if msg.role not in ROLES:
        raise InvalidEventError(f"unknown role {msg.role!r}; expected one of {', '.join(ROLES)}", field="role")
    if msg.name is not None and not _NAME_RE.match(msg.name):
        raise InvalidEventError("must match ^[A-Za-z0-9_-]{1,64}$", field="name")
    if msg.finish_reason is not None and msg.finish_reason not in FINISH_REASONS:
        raise InvalidEventError(f"unknown finish_reason {msg.finish_reason!r}", field="finish_reason")
    _non_negative(msg.thinking_duration_ms, "thinking_duration_ms")
    if msg.usage is not None:
        for name in ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens"):
            _non_negative(getattr(msg.usage, name), f"usage.{name}")
    _check_metadata(msg.metadata)
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
        _check_tool_calls(msg)


def _check_content(msg: MessageAppended) -> None:
    content = msg.content
    if isinstance(content, tuple):
        if not content:
            raise InvalidEventError("content parts must not be empty", field="content")
        for i, part in enumerate(content):
            if isinstance(part, ImagePart):
                if msg.role != "user":
                    raise InvalidEventError("only user messages may carry images", field=f"content[{i}]")
                if not part.url.startswith(_IMAGE_URL_PREFIXES):
                    raise InvalidEventError("must be an http(s) or data:image/ URL", field=f"content[{i}].url")
            elif not isinstance(part, TextPart):
                raise InvalidEventError("must be a text or image_url part", field=f"content[{i}]")
        return
    has_text = bool(content)
    # An assistant turn may be only tool calls, and a stream may be cut before any text.
    if msg.role == "assistant" and (msg.tool_calls or msg.finish_reason == "interrupted"):
        return
    if msg.role == "tool" and content is not None:
        return  # a tool may legitimately return an empty string
    if not has_text:
        raise InvalidEventError(f"a {msg.role} message needs content", field="content")


def _check_tool_calls(msg: MessageAppended) -> None:
    seen: set[str] = set()
    for i, call in enumerate(msg.tool_calls):
        field = f"tool_calls[{i}]"
        if not call.id:
            raise InvalidEventError("a tool call needs an id", field=f"{field}.id")
        if call.id in seen:
            raise InvalidEventError(f"duplicate tool call id {call.id!r}", field=f"{field}.id")
        seen.add(call.id)
        if not _NAME_RE.match(call.name or ""):
            raise InvalidEventError("must match ^[A-Za-z0-9_-]{1,64}$", field=f"{field}.name")
        # An interrupted stream may stop mid-arguments; it is stored for audit and never served.
        if msg.finish_reason == "interrupted":
            continue
        try:
            json.loads(call.arguments)
        except (TypeError, ValueError) as e:
            raise InvalidEventError(f"arguments are not valid JSON ({e})", field=f"{field}.arguments") from e


def _require_id(value: str, field: str) -> None:
    if not value or not value.strip():
        raise InvalidEventError("must not be empty", field=field)
    if len(value) > MAX_ID_LENGTH:
        raise InvalidEventError(f"longer than {MAX_ID_LENGTH} characters", field=field)


def _require_text(value: str | None, field: str) -> None:
    if not value or not value.strip():
        raise InvalidEventError("must not be empty", field=field)


def _non_negative(value: int | None, field: str) -> None:
    if value is not None and value < 0:
        raise InvalidEventError("must be >= 0", field=field)


def _check_metadata(metadata: Mapping[str, str]) -> None:
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidEventError("keys and values must be strings", field=f"metadata.{k}")
