"""The provider-neutral, lossless content of a message (event schema v4): ordered typed blocks.

A message appended in a provider's native format (Anthropic Messages, OpenAI Responses, Gemini)
keeps its content as these blocks, in the order the provider gave them. Whatever convlog does
not model is kept, never dropped:

- a block's native keys beyond the modelled ones (Anthropic ``citations``, Responses
  ``annotations``, a Gemini text part's ``thoughtSignature``...) are its ``extra``: the compact
  JSON of those keys, served back only to the format the message came from (``api``);
- a block convlog does not model at all (server tool blocks, future block types) is an
  :class:`OpaqueBlock`: the native block's JSON, verbatim.

A tool *result* is a message of its own (role ``tool``, ``tool_call_id``, ``is_error``) whose
blocks are the result's content, so the turn and tool-pairing rules hold for every format
alike: an Anthropic user message holding three ``tool_result`` blocks is three tool messages.

Each message also has its Chat Completions *view* — ``content`` and ``tool_calls`` as
before v4 — derived from the blocks by :func:`chat_view`; it is what token counts, the
summarizer and the ``chat_completions`` format read. Reasoning never enters the view: an
opaque reasoning blob is served back only to the provider that made it, never as text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from events.event_types import (
    API_FORMATS,
    ApiFormat,
    Block,
    Content,
    ContentPart,
    FinishReason,
    ImagePart,
    MediaBlock,
    MessageAppended,
    OpaqueBlock,
    ReasoningBlock,
    Role,
    TextBlock,
    TextPart,
    ToolCall,
    ToolCallBlock,
    Usage,
)

__all__ = [
    "API_FORMATS",
    "CONTENT_PLACEHOLDER",
    "IMAGE_PLACEHOLDER",
    "MEDIA_PLACEHOLDER",
    "ApiFormat",
    "Block",
    "MediaBlock",
    "OpaqueBlock",
    "ReasoningBlock",
    "TextBlock",
    "ToolCallBlock",
    "blocks_from_json",
    "blocks_to_json",
    "chat_view",
    "drop_images",
    "is_image_part",
    "native_message",
    "reasoning_text",
]

CONTENT_PLACEHOLDER = "[content omitted]"
"""The Chat Completions view of a user or system message whose blocks hold nothing it can carry."""

MEDIA_PLACEHOLDER = "[file omitted]"
"""The text a media block stands as in the Chat Completions view where Chat Completions cannot
carry it (a file, or an image outside a user message)."""

IMAGE_PLACEHOLDER = "[image omitted]"
"""The text part an image older than the request's ``image_turns`` is served as (every format's
renderer, and the token accounting that prices it: projectors.tokens re-exports it)."""


def drop_images(content: Any) -> Any:
    """``content`` with every ``image_url`` part replaced by an :data:`IMAGE_PLACEHOLDER` text
    part; a string or ``None`` is returned as it is."""
    if not isinstance(content, list):
        return content
    return [{"type": "text", "text": IMAGE_PLACEHOLDER} if is_image_part(p) else p for p in content]


def is_image_part(part: Any) -> bool:
    """Whether ``part`` is a Chat Completions ``image_url`` content part."""
    return isinstance(part, Mapping) and part.get("type") == "image_url"


def chat_view(blocks: Sequence[Block], *, role: str) -> tuple[Content, tuple[ToolCall, ...]]:
    """``(content, tool_calls)`` of the message in Chat Completions terms.

    One text block is a string content, several (or text with images) are content parts; an
    image stays an image part in a user message only (Chat Completions takes images nowhere
    else), else it and every file become :data:`MEDIA_PLACEHOLDER`. Reasoning and opaque blocks
    are not part of the view. No text at all is ``None``."""
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    for b in blocks:
        if isinstance(b, TextBlock):
            parts.append(TextPart(b.text))
        elif isinstance(b, MediaBlock):
            url = b.url if b.url is not None else f"data:{b.media_type or 'application/octet-stream'};base64,{b.data}"
            if b.kind == "image" and role == "user":
                parts.append(ImagePart(url, b.detail or "auto"))
            else:
                parts.append(TextPart(MEDIA_PLACEHOLDER))
        elif isinstance(b, ToolCallBlock):
            calls.append(ToolCall(b.id, b.name, b.arguments))
    if not parts:
        # A question or a prompt is always served (it starts a turn), a tool always returns
        # something: with nothing Chat Completions can carry, they stand as a placeholder / "".
        # An answer with only reasoning or opaque blocks has no view (nothing the user saw).
        if role in ("user", "system") and blocks:
            return CONTENT_PLACEHOLDER, tuple(calls)
        return ("" if role == "tool" else None), tuple(calls)
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text, tuple(calls)
    return tuple(parts), tuple(calls)


def reasoning_text(blocks: Sequence[Block]) -> str:
    """The visible reasoning text of ``blocks`` (thinking text, summaries), for token counts."""
    texts: list[str] = []
    for b in blocks:
        if isinstance(b, ReasoningBlock):
            if b.text:
                texts.append(b.text)
            texts.extend(b.summary or ())
    return "\n".join(texts)


# JSON form (the transcript's ``blocks`` column): one object per block, ``type`` plus the
# fields that are set, so the column stays small and a new optional field needs no migration.
_TYPES: Mapping[str, type[Any]] = {
    "text": TextBlock,
    "media": MediaBlock,
    "tool_call": ToolCallBlock,
    "reasoning": ReasoningBlock,
    "opaque": OpaqueBlock,
}
_NAMES: Mapping[type[Any], str] = {v: k for k, v in _TYPES.items()}


def blocks_to_json(blocks: Sequence[Block]) -> list[dict[str, Any]]:
    out = []
    for b in blocks:
        doc: dict[str, Any] = {"type": _NAMES[type(b)]}
        for name in b.__slots__:
            value = getattr(b, name)
            if value is not None:
                doc[name] = list(value) if isinstance(value, tuple) else value
        out.append(doc)
    return out


def blocks_from_json(docs: Sequence[Mapping[str, Any]] | str | None) -> tuple[Block, ...]:
    """Inverse of :func:`blocks_to_json` (also from its JSON text)."""
    if docs is None:
        return ()
    parsed: Sequence[Mapping[str, Any]] = json.loads(docs) if isinstance(docs, str) else docs
    out: list[Block] = []
    for doc in parsed:
        kind = _TYPES[doc["type"]]
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in doc.items() if k != "type"}
        out.append(kind(**fields))
    return tuple(out)


def native_message(
    *,
    message_id: str,
    role: Role,
    blocks: Sequence[Block],
    api: ApiFormat,
    provider: str | None = None,
    model: str | None = None,
    usage: Usage | None = None,
    finish_reason: FinishReason | None = None,
    tool_call_id: str | None = None,
    is_error: bool | None = None,
    name: str | None = None,
    metadata: Mapping[str, str] | None = None,
) -> MessageAppended:
    """A message appended in a native format: ``blocks`` and their Chat Completions view."""
    content, tool_calls = chat_view(blocks, role=role)
    return MessageAppended(
        message_id=message_id,
        role=role,
        content=content,
        name=name,
        tool_calls=tool_calls,
        tool_call_id=tool_call_id,
        model=model,
        usage=usage,
        finish_reason=finish_reason,
        metadata=dict(metadata or {}),
        blocks=tuple(blocks),
        provider=provider,
        api=api,
        is_error=is_error,
    )
