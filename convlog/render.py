"""Human-readable renderings of events for the CLI and the demo."""

from __future__ import annotations

from events.codec import EventCodec
from events.event_types import (
    ConversationCleared,
    ConversationStarted,
    Event,
    ImagePart,
    MessageAppended,
    MessageRedacted,
    SummaryRecorded,
)
from events.keys import ConversationKey
from events.log import EventLog, LogRecord
from events.reading import conversation_events

_PREVIEW = 72


def preview(text: str | None) -> str:
    if not text:
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= _PREVIEW else flat[: _PREVIEW - 1] + "…"


def describe(event: Event) -> str:
    body = event.body
    if isinstance(body, MessageAppended):
        content = body.content
        if isinstance(content, tuple):
            text = " ".join("[image]" if isinstance(p, ImagePart) else p.text for p in content)
        else:
            text = content or ""
        extras = []
        if body.tool_calls:
            extras.append("calls " + ", ".join(f"{c.name}({c.arguments})" for c in body.tool_calls))
        if body.tool_call_id:
            extras.append(f"answers {body.tool_call_id}")
        if body.reasoning_content:
            extras.append(f"reasoning {len(body.reasoning_content)} chars")
        if body.finish_reason:
            extras.append(f"finish={body.finish_reason}")
        suffix = f"  [{'; '.join(extras)}]" if extras else ""
        return f"{body.role:<9} {preview(text)}{suffix}"
    if isinstance(body, ConversationStarted):
        return f"started   {body.title or ''}"
    if isinstance(body, MessageRedacted):
        return f"redacted  {body.message_id}: {body.reason}"
    if isinstance(body, SummaryRecorded):
        return f"summary   through {body.covers_through_message_id}: {preview(body.text)}"
    if isinstance(body, ConversationCleared):
        return f"cleared   {body.reason or ''}"
    # The audit record of an erasure: what subject, who asked, when (never content).
    audit = [f"{name}={value}" for name, value in (("subject", body.subject), ("by", body.requested_by)) if value]
    audit.append(f"at={event.occurred_at.isoformat(timespec='seconds')}")
    return f"erased    {body.reason or ''}  [{'; '.join(audit)}]"


def format_line(record: LogRecord, event: Event) -> str:
    return f"  p{record.partition}@{record.offset:<6} {describe(event)}"


async def print_conversation_events(
    log: EventLog, key: ConversationKey, *, start_offset: int = 0, codec: EventCodec | None = None
) -> int:
    print(f"conversation {key}")
    count = 0
    async for record, event in conversation_events(log, key, start_offset=start_offset, codec=codec):
        print(format_line(record, event))
        count += 1
    print(f"  ({count} events)\n")
    return count
