"""Contexts as they were: rebuilt from the log, never from the (current) read models.

``context_inputs_as_of`` folds the conversation's events up to and including ``as_of`` with the
projector's own pure functions, so the context assembled from them is the one served right
after that event. The log never forgets, but people may: a redaction or an erasure recorded
later still applies — such content is never served again, even for the past.

The HTTP API passes the conversation's events as read through the event index
(query_api/log_reads.py: the cost of the conversation, not of its partition); without them
this scans the conversation's partition from ``start_offset`` on (``convlog replay``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from events.codec import EventCodec, default_codec
from events.errors import ConvlogError
from events.event_types import Event, MessageAppended, MessageRedacted
from events.keys import ConversationKey
from events.log import EventLog, LogRecord
from events.reading import conversation_events
from projectors.fold import BatchInputs, decode_batch, fold_batch
from projectors.state import SummaryRow, TranscriptRow, countable_text, image_count
from projectors.tokens import text_counter
from projectors.window import WindowPolicy
from query_api.context import context_start
from query_api.context_types import StoredMessage, StoredSummary
from query_api.ports import ContextInputs


@dataclass(frozen=True, slots=True)
class BeforeMessage:
    """The point right before message ``message_id`` was appended: for an assistant answer, the
    context that produced it (the audit question "what did the model see?")."""

    message_id: str


class UnknownMessageError(ConvlogError):
    code = "unknown_message"


def as_of_offset(pairs: Sequence[tuple[LogRecord, Event]], point: int | BeforeMessage) -> int:
    """The offset an as-of point stands for: itself, or the offset just before the message's
    event (the conversation's earlier events are all at lower offsets of its partition)."""
    if isinstance(point, int):
        return point
    for record, event in pairs:
        if isinstance(event.body, MessageAppended) and event.body.message_id == point.message_id:
            return record.offset - 1
    raise UnknownMessageError(f"the conversation has no message {point.message_id!r}")


async def context_inputs_as_of(
    log: EventLog,
    key: ConversationKey,
    point: int | BeforeMessage,
    *,
    encoding: str,
    policy: WindowPolicy,
    max_event_bytes: int,
    codec: EventCodec | None = None,
    start_offset: int = 0,
    pairs: Sequence[tuple[LogRecord, Event]] | None = None,
) -> ContextInputs | None:
    """The inputs of the context right after the event at offset ``point`` of the
    conversation's partition (or right before a message, :class:`BeforeMessage`); None if the
    conversation had no event by then. Raises :class:`UnknownMessageError`."""
    codec = codec or default_codec()
    if pairs is None:
        pairs = [pair async for pair in conversation_events(log, key, codec=codec, start_offset=start_offset)]
    as_of = as_of_offset(pairs, point)
    before = [record for record, _ in pairs if record.offset <= as_of]
    if not before:
        return None
    later = [event.body for record, event in pairs if record.offset > as_of]
    redacted_later = {b.message_id for b in later if isinstance(b, MessageRedacted)}
    redactions = [(record.offset, e.body.message_id) for record, e in pairs if isinstance(e.body, MessageRedacted)]
    decoded = decode_batch([r for r, _ in pairs], codec=codec, max_event_bytes=max_event_bytes)
    # An erase recorded later still applies (content is never served again) — unless it was void
    # (a conditional one the conversation outran), which only folding the whole history tells.
    history = fold_batch(decoded, BatchInputs({}), policy=policy)
    erased_later = any(e.offset > as_of for e in history.erasures)
    out = fold_batch(decoded[: len(before)], BatchInputs({}), policy=policy)
    state = out.states.get(str(key))
    if state is None:
        return None
    redacted = {r.message_id for r in out.redactions} | redacted_later
    erased_before = max((e.before_seq for e in out.erasures), default=0)
    count = text_counter(encoding)

    def stored(row: TranscriptRow) -> StoredMessage:
        gone = erased_later or row.seq < erased_before
        return StoredMessage(
            seq=row.seq, epoch=row.epoch, message_id=row.message_id, role=row.role,
            content=None if gone or row.message_id in redacted else row.content, name=row.name,
            tool_calls=tuple(row.tool_calls or ()), tool_call_id=row.tool_call_id,
            reasoning_content=row.reasoning_content, finish_reason=row.finish_reason, flag=row.flag,
            redacted=row.message_id in redacted, erased=gone, tokens=count(countable_text(row)),
            reasoning_tokens=count(row.reasoning_content or ""), image_count=image_count(row),
        )  # fmt: skip

    rows = out.transcript
    summary = None
    seq_of = {r.message_id: r.seq for r in reversed(rows)}  # the first row of a message id
    epoch_of = {r.message_id: r.epoch for r in reversed(rows)}

    def withdrawn(s: SummaryRow) -> bool:
        """Like the projection: a redaction after the summary of a message it covers (even one
        recorded after ``as_of``: redacted content is never served again), or one before it
        that the summary does not list as left out."""
        covers = seq_of.get(s.covers_through_message_id)
        if covers is None:
            return False
        excluded = s.excluded_message_ids
        return any(
            (offset > s.offset or (excluded is not None and message_id not in excluded))
            and (m := seq_of.get(message_id)) is not None and m <= covers and epoch_of.get(message_id) == s.epoch
            for offset, message_id in redactions
        )  # fmt: skip

    current = [s for s in out.summaries if s.epoch == state.epoch and not erased_later and s.seq >= erased_before
               and epoch_of.get(s.covers_through_message_id) == s.epoch and not withdrawn(s)]  # fmt: skip
    if current:
        latest = current[-1]
        covered = seq_of.get(latest.covers_through_message_id)
        if covered is not None:
            summary = StoredSummary(latest.summary_id, latest.text, covered, count(latest.text))
    start = context_start(state.window.start_seq, summary.covers_through_seq if summary else None)
    return ContextInputs(
        conversation_key=key,
        epoch=state.epoch,
        parked=bool(out.poisoned or out.held),
        system=tuple(stored(r) for r in rows if r.role == "system"),
        summary=summary,
        window_start=state.window.start_seq,
        messages=tuple(stored(r) for r in rows if r.role != "system" and r.epoch == state.epoch and r.seq >= start),
        partition=state.last_at[0],
        last_offset=state.last_at[1],
    )
