"""Contexts as they were: rebuilt from the log, never from the (current) read models.

``context_inputs_as_of`` folds the conversation's events up to and including ``as_of`` with the
projector's own fold, and applies to those rows the decisions (redactions, erasures, summary
withdrawals) of the whole history as the store writes them (projectors/applied.py), so the
context assembled from them is the one served right after that event. The log never forgets,
but people may: a redaction or an erasure recorded later still applies — such content is
never served again, even for the past.

Which window: each read-models version serves with its own (a changed window is a rebuild and a
switch), so the API passes a :data:`PolicyAt` that names the window of the version live when the
context's last event was projected (pgstore/versions.py ``policy_served_at``): a context
served before a switch is rebuilt with the old version's window, one served after it with the
new one's.

The HTTP API passes the conversation's events as read through the event index
(query_api/log_reads.py: the cost of the conversation, not of its partition); without them
this scans the conversation's partition from ``start_offset`` on (``convlog replay``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from events.codec import EventCodec, default_codec
from events.errors import ConvlogError, InvalidRequestError
from events.event_types import Event, MessageAppended
from events.keys import ConversationKey
from events.log import EventLog, LogRecord
from events.reading import conversation_events
from projectors.applied import AppliedHistory, AppliedMessage, apply_decisions
from projectors.changes import TranscriptRow
from projectors.context_range import SummaryAt, after_withdrawals, in_range
from projectors.fold import BatchInputs, BatchOutcome, decode_batch, fold_batch
from projectors.prepare import with_new_keys
from projectors.row_values import countable_reasoning, countable_text, image_count
from projectors.state import ConversationState
from projectors.tokens import text_counter
from projectors.window import WindowPolicy
from query_api.context_types import StoredMessage, StoredSummary
from query_api.ports import ContextInputs

PolicyAt = Callable[[int, int], Awaitable[WindowPolicy]]
"""(partition, offset) -> the window policy of the version that served the context as of that event."""


@dataclass(frozen=True, slots=True)
class BeforeMessage:
    """The point right before message ``message_id`` was appended: for an assistant answer, the
    context that produced it (the audit question "what did the model see?")."""

    message_id: str


class UnknownMessageError(ConvlogError):
    code = "unknown_message"


class OffsetBeyondLogEndError(InvalidRequestError):
    """An offset the conversation's partition does not hold yet: no context was served right
    after it, and no projection reaches it (HTTP 422, for ``as_of`` and ``min_offset`` alike).
    ``field``: the input that named the offset, when a caller says (None: not said)."""

    code = "offset_beyond_log_end"

    def __init__(self, partition: int, offset: int, *, field: str | None = None) -> None:
        super().__init__(f"partition {partition} of the log holds no offset {offset} yet")
        self.partition = partition
        self.field = field


async def refuse_beyond_log_end(log: EventLog, partition: int, offset: int) -> None:
    """:class:`OffsetBeyondLogEndError` unless the log's end on ``partition`` (its committed
    end, for a transactional producer) is past ``offset``."""
    if offset >= (await log.end_offsets([partition]))[partition]:
        raise OffsetBeyondLogEndError(partition, offset)


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
    policy: WindowPolicy | PolicyAt,
    max_event_bytes: int,
    codec: EventCodec | None = None,
    start_offset: int = 0,
    pairs: Sequence[tuple[LogRecord, Event]] | None = None,
) -> ContextInputs | None:
    """The inputs of the context right after the event at offset ``point`` of the
    conversation's partition (or right before a message, :class:`BeforeMessage`); None if the
    conversation had no event by then. ``policy``: the window, or what names it for the
    conversation's last event by then. Raises :class:`UnknownMessageError`."""
    codec = codec or default_codec()
    if pairs is None:
        pairs = [pair async for pair in conversation_events(log, key, codec=codec, start_offset=start_offset)]
    as_of = as_of_offset(pairs, point)
    before = [record for record, _ in pairs if record.offset <= as_of]
    if not before:
        return None
    if not isinstance(policy, WindowPolicy):  # the version that served it: live when its last event was projected
        policy = await policy(before[-1].partition, before[-1].offset)
    decoded = decode_batch([r for r, _ in pairs], codec=codec, max_event_bytes=max_event_bytes)
    decoded = await with_new_keys(decoded, codec=codec, max_event_bytes=max_event_bytes)
    # The rows as of ``as_of``, with the decisions of the whole history applied: a redaction or
    # an erase recorded later still applies (content is never served again, even for the past),
    # a void conditional erase does not — the projection's own fold and decisions, so the
    # context is the one the read models serve.
    applied = apply_decisions(fold_batch(decoded, BatchInputs({}), policy=policy))
    out = fold_batch(decoded[: len(before)], BatchInputs({}), policy=policy)
    k = str(key)
    state = out.states.get(k)
    if state is None:
        return None
    count = text_counter(encoding)

    def stored(original: TranscriptRow) -> StoredMessage:
        return stored_message(applied.messages[(k, original.seq)], count)

    rows = out.transcript
    # The fold's state as of then, with the later decisions on its summaries applied as well.
    state = replace(state, summary=_summary_after_decisions(state, out, applied))
    summary = None
    if state.summary is not None:
        chosen = applied.summaries[(k, state.summary.seq)]
        assert chosen.text is not None  # after_withdrawals chose a kept one
        summary = StoredSummary(chosen.summary_id, chosen.text, state.summary.covers_seq, count(chosen.text))
    start = state.context_start
    return ContextInputs(
        conversation_key=key,
        epoch=state.epoch,
        parked=bool(out.poisoned or out.held),
        system=tuple(stored(r) for r in rows if r.role == "system"),
        summary=summary,
        window_start=state.window.start_seq,
        messages=tuple(
            stored(r) for r in rows if in_range(r.seq, r.epoch, r.role, start=start, current_epoch=state.epoch)
        ),
        partition=state.last_at[0],
        last_offset=state.last_at[1],
    )


def _summary_after_decisions(state: ConversationState, out: BatchOutcome, applied: AppliedHistory) -> SummaryAt | None:
    """The summary the fold chose as of the state's last event, unless a later decision took its
    text: then the one before it, as the fold falls back (projectors/context_range.py)."""
    k = str(state.key)
    first: dict[str, TranscriptRow] = {}
    for r in out.transcript:
        first.setdefault(r.message_id, r)
    covered = [(s, first[s.covers_through_message_id]) for s in out.summaries]  # apply_event checked them
    recorded = [SummaryAt(s.seq, s.epoch, c.seq, c.turn) for s, c in covered]
    withdrawn = {s.seq for s in out.summaries if applied.summaries[(k, s.seq)].text is None}
    return after_withdrawals(state.summary, recorded, withdrawn, state.epoch)


def stored_message(m: AppliedMessage, count: Callable[[str], int]) -> StoredMessage:
    """A folded row as the context assembler reads it from the transcript: the decisions of the
    whole history applied, its token counts (``count``) taken as appended."""
    row, original = m.row, m.original
    return StoredMessage(
        seq=row.seq,
        epoch=row.epoch,
        message_id=row.message_id,
        role=row.role,
        content=row.content,
        name=row.name,
        tool_calls=tuple(row.tool_calls or ()),
        tool_call_id=row.tool_call_id,
        reasoning_content=row.reasoning_content,
        finish_reason=row.finish_reason,
        flag=row.flag,
        redacted=m.redacted,
        erased=m.erased,
        tokens=count(countable_text(original)),
        reasoning_tokens=count(countable_reasoning(original)),
        image_count=image_count(original),
        blocks=row.blocks or (),
        api=row.api,
        provider=row.provider,
        model=row.model,
        is_error=row.is_error,
        prompt_tokens=(row.usage or {}).get("prompt_tokens"),
    )
