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


def tool_calls_ran(finish_reason: str | None) -> bool:
    """Whether an assistant message's tool calls ran: an interrupted stream's never did, so
    nothing may answer them, no context serves them and no summary folds them in."""
    return finish_reason != "interrupted"


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


# Schema v4: a message's lossless, provider-neutral content (events/blocks.py explains them).
ApiFormat: TypeAlias = Literal["chat_completions", "anthropic", "responses", "gemini"]
API_FORMATS: tuple[ApiFormat, ...] = ("chat_completions", "anthropic", "responses", "gemini")


@dataclass(frozen=True, slots=True)
class TextBlock:
    text: str
    item_id: str | None = None  # the provider's id of the item holding it (Responses msg_…)
    extra: str | None = None  # compact JSON object: the native block's other keys


@dataclass(frozen=True, slots=True)
class MediaBlock:
    """An image or a file, by ``url`` or inline base64 ``data`` with its ``media_type``."""

    kind: Literal["image", "file"]
    url: str | None = None
    data: str | None = None
    media_type: str | None = None
    detail: ImageDetail | None = None
    filename: str | None = None
    extra: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallBlock:
    """A function call: ``id`` pairs it with its result (Anthropic ``tool_use.id``, Responses
    ``call_id``, Gemini ``functionCall.id`` or one convlog derived); ``arguments`` is JSON text."""

    id: str
    name: str
    arguments: str
    item_id: str | None = None  # the provider's id of the call item itself (Responses fc_…, Gemini id)
    signature: str | None = None  # Gemini thoughtSignature on the functionCall part
    extra: str | None = None


@dataclass(frozen=True, slots=True)
class ReasoningBlock:
    """Reasoning as the provider returned it: visible ``text`` (Anthropic ``thinking``, a Gemini
    thought), ``summary`` texts (Responses), and the opaque parts that must come back verbatim:
    ``signature``, redacted ``data``, ``encrypted_content``."""

    text: str | None = None
    summary: tuple[str, ...] | None = None
    signature: str | None = None
    redacted_data: str | None = None
    encrypted_content: str | None = None
    item_id: str | None = None  # Responses rs_…
    extra: str | None = None


@dataclass(frozen=True, slots=True)
class OpaqueBlock:
    """A native block convlog does not model, kept verbatim: ``provider`` is the format it came
    in (an :data:`ApiFormat`), ``json`` the block's compact JSON."""

    provider: str
    json: str


Block: TypeAlias = TextBlock | MediaBlock | ToolCallBlock | ReasoningBlock | OpaqueBlock


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage as reported by the provider for the call that produced a message."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # read from the provider's prompt cache (part of prompt_tokens)
    reasoning_tokens: int | None = None
    # Schema v4: written to the prompt cache (Anthropic cache_creation_input_tokens). prompt_tokens
    # is always the whole prompt: for Anthropic input + cache read + cache write tokens.
    cache_write_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Sealed:
    """Schema v5: a body's content, sealed under its conversation's data key (events/sealing/).
    The body carrying it has every content field empty; the ciphertext holds the whole body.
    A body that still carries ``sealed`` after opening (events.sealing.bodies.open_event) is an
    erased placeholder: its key was destroyed, only its clear fields remain."""

    key_id: str
    nonce: bytes
    ciphertext: bytes
    # Not on the wire: the writer schema (fingerprint) of the record the seal came in, which
    # its plaintext is encoded with; empty for a seal made by this build (the current schema).
    writer: bytes = field(default=b"", compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ConversationStarted:
    title: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    sealed: Sealed | None = None  # schema v5


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
    # Schema v4 (events/blocks.py). ``blocks`` non-empty: the message's lossless content, and
    # ``content``/``tool_calls`` are its Chat Completions view (events.blocks.chat_view), never
    # written to the log beside them; ``reasoning_content`` is then None.
    blocks: tuple[Block, ...] = ()
    provider: str | None = None  # who made it: "anthropic", "openai", "google", "deepseek", ...
    api: ApiFormat | None = None  # the format it was appended in (None: chat_completions, before v4)
    is_error: bool | None = None  # a tool result that reports a failure (Anthropic is_error)
    sealed: Sealed | None = None  # schema v5: the content above, sealed (then all empty here)


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
    sealed: Sealed | None = None  # schema v5: the text, sealed (then "" here)


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
    # Schema v5: what was erased ("conversation", or "user": this erase is one of a user's) and
    # who asked (a token id, an operator's name). Audit facts, never content.
    subject: str | None = None
    requested_by: str | None = None


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
