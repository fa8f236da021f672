"""Events as JSON for the audit endpoints, with erased and redacted content left out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from events.blocks import blocks_to_json
from events.event_types import Event, MessageAppended, SummaryRecorded
from events.log import LogRecord
from projectors.applied import apply_decisions
from projectors.fold import BatchInputs, Decoded, fold_batch
from projectors.row_values import content_json, tool_calls_json, usage_json
from projectors.window import WindowPolicy

_WITHHELD = "[withheld]"


def events_json(pairs: Sequence[tuple[LogRecord, Event]]) -> list[dict[str, Any]]:
    """The log never changes, so erasure, redaction and summary withdrawal are applied here, as
    the projection decides them: ``pairs`` (the conversation's history from its first event) is
    folded and the fold's decisions applied (projectors/applied.py). Withheld: the content of
    messages whose row a redaction or an erasure cleared, the text of summaries withdrawn or
    erased, and everything before the last erasure that applied (a conditional one may be void).
    A record that made no row (a repeated event id) is withheld like the message it repeats."""
    folded = fold_batch([Decoded(r, str(e.key), e) for r, e in pairs], BatchInputs({}), policy=WindowPolicy())
    applied = apply_decisions(folded)
    cleared = {m.original.offset for m in applied.messages.values() if m.redacted or m.erased}
    cleared_ids = {m.original.message_id for m in applied.messages.values() if m.redacted}
    rows = {m.original.offset for m in applied.messages.values()}
    withdrawn = {x.offset for x in applied.summaries.values() if x.text is None}
    erase_offsets = {erasure.offset for erasure in folded.erasures}
    last_erase = max((i for i, (r, _) in enumerate(pairs) if r.offset in erase_offsets), default=-1)
    out = []
    for i, (record, event) in enumerate(pairs):
        body = event.body
        withhold = i < last_erase or record.offset in cleared or record.offset in withdrawn
        if isinstance(body, MessageAppended) and record.offset not in rows:
            withhold = withhold or body.message_id in cleared_ids
        out.append(
            {
                "partition": record.partition,
                "offset": record.offset,
                "event_id": event.event_id,
                "event_type": event.event_type,
                "occurred_at": event.occurred_at.isoformat(),
                "producer": event.producer,
                "body": _body(body, withhold=withhold),
            }
        )
    return out


def _body(body: Any, *, withhold: bool) -> dict[str, Any]:
    if isinstance(body, MessageAppended):
        data: dict[str, Any] = {
            "message_id": body.message_id,
            "role": body.role,
            "content": content_json(body),
            "name": body.name,
            "tool_calls": tool_calls_json(body),
            "tool_call_id": body.tool_call_id,
            "reasoning_content": body.reasoning_content,
            "thinking_duration_ms": body.thinking_duration_ms,
            "model": body.model,
            "usage": usage_json(body),
            "finish_reason": body.finish_reason,
            "metadata": dict(body.metadata),
        }
        # Schema v4, when set (a native message's): its blocks as the transcript stores them.
        if body.blocks:
            data["blocks"] = blocks_to_json(body.blocks)
        data.update(
            (k, v)
            for k, v in (("provider", body.provider), ("api", body.api), ("is_error", body.is_error))
            if v is not None
        )
        if body.sealed is not None:  # an erased placeholder: its key was destroyed
            data["erased"] = withhold = True
        if withhold:
            data.update(content=_WITHHELD, reasoning_content=None, tool_calls=None, name=None, metadata={})
            if "blocks" in data:  # signatures and encrypted reasoning are content too
                data["blocks"] = None
        return data
    data = asdict(body)
    if data.pop("sealed", None) is not None:  # an erased placeholder (never the ciphertext)
        data["erased"] = withhold = True
    if withhold and isinstance(body, SummaryRecorded):
        data["text"] = _WITHHELD
    if withhold and "title" in data:
        data["title"] = None
    if withhold and "metadata" in data:
        data["metadata"] = {}
    return data
