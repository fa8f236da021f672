"""Events as JSON for the audit endpoints, with erased and redacted content left out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from events.event_types import Event, MessageAppended, MessageRedacted, SummaryRecorded
from events.log import LogRecord
from projectors.fold import BatchInputs, Decoded, fold_batch
from projectors.state import content_json, tool_calls_json, usage_json
from projectors.window import WindowPolicy

_WITHHELD = "[withheld]"


def events_json(pairs: Sequence[tuple[LogRecord, Event]]) -> list[dict[str, Any]]:
    """The log never changes, so erasure and redaction are applied here: content of messages
    redacted later, and of everything before the last erasure, is withheld. ``pairs`` is the
    conversation's history from its first event: whether an erase applied (a conditional one
    may be void) is decided by folding it, as the projection does."""
    redacted = {e.body.message_id for _, e in pairs if isinstance(e.body, MessageRedacted)}
    folded = fold_batch([Decoded(r, str(e.key), e) for r, e in pairs], BatchInputs({}), policy=WindowPolicy())
    erase_offsets = {erasure.offset for erasure in folded.erasures}
    last_erase = max((i for i, (r, _) in enumerate(pairs) if r.offset in erase_offsets), default=-1)
    out = []
    for i, (record, event) in enumerate(pairs):
        body = event.body
        withhold = i < last_erase or (isinstance(body, MessageAppended) and body.message_id in redacted)
        out.append({
            "partition": record.partition,
            "offset": record.offset,
            "event_id": event.event_id,
            "event_type": event.event_type,
            "occurred_at": event.occurred_at.isoformat(),
            "producer": event.producer,
            "body": _body(body, withhold=withhold),
        })  # fmt: skip
    return out


def _body(body: Any, *, withhold: bool) -> dict[str, Any]:
    if isinstance(body, MessageAppended):
        data: dict[str, Any] = {
            "message_id": body.message_id, "role": body.role, "content": content_json(body), "name": body.name,
            "tool_calls": tool_calls_json(body), "tool_call_id": body.tool_call_id,
            "reasoning_content": body.reasoning_content, "thinking_duration_ms": body.thinking_duration_ms,
            "model": body.model, "usage": usage_json(body), "finish_reason": body.finish_reason,
            "metadata": dict(body.metadata),
        }  # fmt: skip
        if withhold:
            data.update(content=_WITHHELD, reasoning_content=None, tool_calls=None, name=None, metadata={})
        return data
    data = asdict(body)
    if withhold and isinstance(body, SummaryRecorded):
        data["text"] = _WITHHELD
    if withhold and "title" in data:
        data["title"] = None
    if withhold and "metadata" in data:
        data["metadata"] = {}
    return data
