"""The event types: plain frozen dataclasses, no driver types.

An :class:`Event` is an envelope (id, conversation key, time, producer) around one body. The
six bodies are the whole vocabulary of a conversation; the Avro schemas in ``schemas/``
mirror them field for field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, TypeAlias

from events.keys import ConversationKey

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")

FinishReason: TypeAlias = Literal["stop", "length", "tool_calls", "content_filter", "interrupted"]
FINISH_REASONS: tuple[FinishReason, ...] = ("stop", "length", "tool_calls", "content_filter", "interrupted")

ImageDetail: TypeAlias = Literal["auto", "low", "high"]


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An ``image_url`` content part; ``url`` may be an https URL or a ``data:`` URL."""

    url: str
    detail: ImageDetail = "auto"


ContentPart: TypeAlias = TextPart | ImagePart
Content: TypeAlias = str | tuple[ContentPart, ...] | None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call requested by the assistant; ``arguments`` is JSON text, as OpenAI sends it."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage as reported by the provider for the call that produced a message."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ConversationStarted:
    title: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MessageAppended:
    message_id: str
    role: Role
    content: Content = None
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    thinking_duration_ms: int | None = None
    model: str | None = None
    usage: Usage | None = None
    finish_reason: FinishReason | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MessageRedacted:
    """The message's content leaves every read model; the audit keeps that it existed."""

    message_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class SummaryRecorded:
    summary_id: str
    text: str
    covers_through_message_id: str
    model: str
    prompt_version: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    summary_tokens: int | None = None
    # Redacted messages of the covered range the summary left out (schema v2; None: not recorded).
    # A summary covering a message redacted before it that it does not list is withdrawn.
    excluded_message_ids: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ConversationCleared:
    """ "New chat": window and summary restart; the audit transcript keeps everything."""

    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ConversationErased:
    """Right to be forgotten: content leaves every read model.

    ``only_if_last_offset`` (schema v3) makes the erase conditional: it applies only if the
    conversation's last applied event is still the one at that offset of its partition. Retention
    sets it to the event it judged idle, so a conversation written to after that judgement and
    before the erase landed is spared (the erase is void) instead of losing the new message.
    The log orders both on one partition, so every projection and replay decides alike."""

    reason: str | None = None
    only_if_last_offset: int | None = None


EventBody: TypeAlias = (
    ConversationStarted | MessageAppended | MessageRedacted | SummaryRecorded | ConversationCleared | ConversationErased
)
BODY_TYPES: tuple[type[EventBody], ...] = (
    ConversationStarted,
    MessageAppended,
    MessageRedacted,
    SummaryRecorded,
    ConversationCleared,
    ConversationErased,
)


@dataclass(frozen=True, slots=True)
class Event:
    """One immutable fact about a conversation. ``occurred_at`` is timezone-aware UTC."""

    event_id: str
    key: ConversationKey
    occurred_at: datetime
    producer: str
    body: EventBody

    @property
    def event_type(self) -> str:
        return type(self.body).__name__
