"""What the client's calls answer: frozen dataclasses, one per kind of API body.

Dataclasses rather than pydantic models: the bodies are the service's own (already checked
there), so a parse is a handful of dict look-ups — the cheapest way to keep the client's overhead
per call near a bare request's — and the client needs nothing but httpx. Each object keeps the
body it came from in ``raw`` (fields added by a newer service are there before this client
names them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

ACCOUNTING_KEYS = frozenset(
    {
        "format",
        "token_count",
        "encoding",
        "encoding_estimated",
        "summary",
        "dropped_turns",
        "dropped",
        "compressed",
        "degraded",
        "position",
        "estimate",
        "prompt_cache_key",
        "counted_at_read",
        "edits",
    }
)
"""The context body's keys that are not the provider's request fragment."""


def _time(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


@dataclass(frozen=True, slots=True)
class Appended:
    """One event an append stored: its id, the message it holds, and where the log put it."""

    event_id: str
    message_id: str | None
    partition: int
    offset: int

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Appended:
        return cls(body["event_id"], body.get("message_id"), body["partition"], body["offset"])


@dataclass(frozen=True, slots=True)
class UserErasure:
    """What ``DELETE /v1/users/{user_id}`` did: the user's keys destroyed (``destroyed_keys``:
    how many), then an erase event appended to each conversation, ``(conversation_id,
    partition, offset)``; ``already`` when the user was erased before (nothing more done)."""

    user_id: str
    erased_conversations: tuple[tuple[str, int, int], ...]
    destroyed_keys: int
    already: bool
    raw: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> UserErasure:
        erased = tuple((c["conversation_id"], c["partition"], c["offset"]) for c in body["erased_conversations"])
        return cls(body["user_id"], erased, body["destroyed_keys"], body["already"], body)


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append stored: one :class:`Appended` per message, in log order (a native payload
    can hold several messages; a Chat Completions message is one). ``offset`` is the last one's:
    pass it as ``min_offset`` to read your own write."""

    messages: tuple[Appended, ...]

    @property
    def last(self) -> Appended:
        return self.messages[-1]

    @property
    def offset(self) -> int:
        return self.messages[-1].offset

    @property
    def partition(self) -> int:
        return self.messages[-1].partition

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> AppendResult:
        listed = body.get("messages")
        if listed is None:  # a service from before native appends: the single append's body
            return cls((Appended.from_json(body),))
        return cls(tuple(Appended.from_json(m) for m in listed))


@dataclass(frozen=True, slots=True)
class ContextSummary:
    summary_id: str
    text: str
    covers_through_seq: int | None


@dataclass(frozen=True, slots=True)
class Dropped:
    """Something the context left out, and why (a message over the budget, a reasoning blob
    bound to another provider, an unfinished tool call, ...)."""

    message_id: str | None
    what: str
    reason: str


@dataclass(frozen=True, slots=True)
class ContextEdit:
    """What one kind of context editing changed (``clear_tool_results``, ``clear_thinking``):
    the tokens it saved and the messages it changed."""

    kind: str
    cleared_tokens: int
    messages: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Position:
    partition: int
    offset: int | None


@dataclass(frozen=True, slots=True)
class Context:
    """The history to send to the model. ``fragment`` is the provider's request keys as they go
    into the request (Chat Completions ``messages``; Anthropic ``system`` + ``messages``;
    Responses ``instructions`` + ``input``; Gemini ``system_instruction`` + ``contents``), also
    readable as the attributes of the same names (None when the format has no such key).
    ``cacheable_prefix_tokens`` is the ``Convlog-Cacheable-Prefix-Tokens`` header: leading
    tokens equal to the previous context served for the conversation (None when absent)."""

    fragment: Mapping[str, Any]
    format: str
    token_count: int
    encoding: str | None
    encoding_estimated: bool
    summary: ContextSummary | None
    dropped_turns: int
    dropped: tuple[Dropped, ...]
    position: Position
    compressed: bool
    degraded: bool
    prompt_cache_key: str | None
    cacheable_prefix_tokens: int | None
    raw: Mapping[str, Any] = field(repr=False)
    counted_at_read: bool = False  # the projector stores no counts in ``encoding``: counted when read
    edits: tuple[ContextEdit, ...] = ()  # what context editing changed (empty: nothing)

    @property
    def messages(self) -> Any:
        return self.fragment.get("messages")

    @property
    def system(self) -> Any:
        return self.fragment.get("system")

    @property
    def instructions(self) -> Any:
        return self.fragment.get("instructions")

    @property
    def input(self) -> Any:
        return self.fragment.get("input")

    @property
    def system_instruction(self) -> Any:
        return self.fragment.get("system_instruction")

    @property
    def contents(self) -> Any:
        return self.fragment.get("contents")

    @classmethod
    def from_json(cls, body: Mapping[str, Any], *, cacheable_prefix: str | None) -> Context:
        summary = body.get("summary")
        position = body["position"]
        return cls(
            fragment={k: v for k, v in body.items() if k not in ACCOUNTING_KEYS},
            format=body.get("format", "chat_completions"),
            token_count=body["token_count"],
            encoding=body.get("encoding"),
            encoding_estimated=bool(body.get("encoding_estimated", False)),
            summary=None
            if summary is None
            else ContextSummary(summary["summary_id"], summary["text"], summary.get("covers_through_seq")),
            dropped_turns=body.get("dropped_turns", 0),
            dropped=tuple(Dropped(d.get("message_id"), d["what"], d["reason"]) for d in body.get("dropped", ())),
            position=Position(position["partition"], position.get("offset")),
            compressed=bool(body.get("compressed", False)),
            degraded=bool(body.get("degraded", False)),
            prompt_cache_key=body.get("prompt_cache_key"),
            cacheable_prefix_tokens=None if cacheable_prefix is None else int(cacheable_prefix),
            raw=body,
            counted_at_read=bool(body.get("counted_at_read", False)),
            edits=tuple(
                ContextEdit(e["kind"], e["cleared_tokens"], tuple(e["messages"])) for e in body.get("edits", ())
            ),
        )


@dataclass(frozen=True, slots=True)
class TranscriptMessage:
    """One message of the audit transcript (``raw`` has every field: tokens, redaction, ...)."""

    seq: int
    partition: int
    offset: int
    event_id: str
    message_id: str
    role: str
    content: Any
    name: str | None
    tool_calls: Any
    tool_call_id: str | None
    model: str | None
    finish_reason: str | None
    occurred_at: datetime | None
    redacted: bool
    erased: bool
    raw: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, m: Mapping[str, Any]) -> TranscriptMessage:
        return cls(
            m["seq"],
            m["partition"],
            m["offset"],
            m["event_id"],
            m["message_id"],
            m["role"],
            m.get("content"),
            m.get("name"),
            m.get("tool_calls"),
            m.get("tool_call_id"),
            m.get("model"),
            m.get("finish_reason"),
            _time(m.get("occurred_at")),
            m.get("redacted") is not None,
            m.get("erased_at") is not None,
            m,
        )


@dataclass(frozen=True, slots=True)
class TranscriptPage:
    """A page of the transcript, oldest first; ``next_before`` asks for the page before it
    (None: this is the oldest)."""

    messages: tuple[TranscriptMessage, ...]
    next_before: int | None


@dataclass(frozen=True, slots=True)
class SummaryEntry:
    """One summary the conversation had; ``status``: current, superseded, withdrawn or erased."""

    summary_id: str
    status: str
    text: str | None
    covers_through_message_id: str | None
    model: str | None
    prompt_version: str | None
    partition: int
    offset: int
    occurred_at: datetime | None
    raw: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, s: Mapping[str, Any]) -> SummaryEntry:
        return cls(
            s["summary_id"],
            s["status"],
            s.get("text"),
            s.get("covers_through_message_id"),
            s.get("model"),
            s.get("prompt_version"),
            s["partition"],
            s["offset"],
            _time(s.get("occurred_at")),
            s,
        )


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """A raw event as the log holds it, with its coordinates (content withheld as the
    projection decides: redacted and erased messages, withdrawn summaries)."""

    partition: int
    offset: int
    event_id: str
    event_type: str
    occurred_at: datetime | None
    producer: str | None
    body: Mapping[str, Any]

    @classmethod
    def from_json(cls, e: Mapping[str, Any]) -> LoggedEvent:
        return cls(
            e["partition"],
            e["offset"],
            e["event_id"],
            e["event_type"],
            _time(e.get("occurred_at")),
            e.get("producer"),
            e.get("body") or {},
        )


@dataclass(frozen=True, slots=True)
class Conversation:
    """One of a user's conversations, as the list shows it."""

    conversation_id: str
    title: str | None
    started_at: datetime | None
    last_activity_at: datetime | None
    message_count: int
    turn_count: int
    erased: bool
    cleared: bool
    degraded: bool

    @classmethod
    def from_json(cls, c: Mapping[str, Any]) -> Conversation:
        return cls(
            c["conversation_id"],
            c.get("title"),
            _time(c.get("started_at")),
            _time(c.get("last_activity_at")),
            c.get("message_count", 0),
            c.get("turn_count", 0),
            bool(c.get("erased")),
            bool(c.get("cleared")),
            bool(c.get("degraded")),
        )


@dataclass(frozen=True, slots=True)
class Readiness:
    """``/readyz``: whether the service is ready, and its report (projector, log, Postgres, lag)."""

    ready: bool
    report: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ConversationPage:
    """A page of conversations, newest activity first; ``next_before`` is the cursor of the
    next (older) page, None after the last."""

    conversations: tuple[Conversation, ...]
    next_before: str | None
