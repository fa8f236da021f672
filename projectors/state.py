"""Event application: pure functions from (conversation state, event) to (state, row changes).

No I/O here. The store loads the states of a batch's conversations, folds the batch's events
through :func:`apply_event`, and writes the resulting rows and the final states in the same
transaction as the positions. Everything is derived from the events alone (never from the
clock or from offsets' absolute values beyond recording them), so a rebuild from offset 0
produces the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypeAlias

from events.event_types import (
    ConversationCleared,
    ConversationErased,
    ConversationStarted,
    Event,
    MessageAppended,
    MessageRedacted,
    SummaryRecorded,
)
from events.keys import ConversationKey
from events.log import Coordinates
from projectors import context_range
from projectors.changes import (
    Erasure,
    Redaction,
    SummaryRow,
    SummaryWithdrawal,
    TranscriptRow,
)
from projectors.context_range import SummaryAt, after_withdrawals
from projectors.errors import InvariantError
from projectors.row_values import content_json, tool_calls_json, usage_json
from projectors.tool_calls import after_message
from projectors.turns import starts_turn
from projectors.window import EMPTY_WINDOW, Window, WindowPolicy, on_user_message


@dataclass(frozen=True, slots=True)
class ConversationState:
    key: ConversationKey
    exists: bool = False
    title: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    started_at: datetime | None = None
    last_activity_at: datetime | None = None  # last user message: conversation lists sort by it
    last_event_at: datetime | None = None
    message_count: int = 0
    turn_count: int = 0
    next_seq: int = 0
    epoch: int = 0  # bumps on clear and erase: the window and summary restart
    clear_count: int = 0
    erased_at: datetime | None = None
    open_tool_calls: tuple[str, ...] = ()  # calls of the latest assistant message not answered yet
    answered_tool_calls: tuple[str, ...] = ()  # calls of that message already answered
    window: Window = EMPTY_WINDOW
    last_at: tuple[int, int] = (-1, -1)  # (partition, offset) of the last event applied
    first_offset: int = -1  # of its first event: reading the conversation back starts there
    # What a context's range is made from (projectors/context_range.py): the current epoch's
    # current summary, the turns started before the epoch, and the seqs of its redacted questions.
    summary: SummaryAt | None = None
    turns_before_epoch: int = 0
    redacted_questions: tuple[int, ...] = ()
    # The conversation key the title and metadata are stored sealed under (projectors/sealed_rows.py;
    # that of the latest sealed record that set them), None while they came from plain records only.
    key_id: str | None = None

    @property
    def context_start(self) -> int:
        """The seq a context's non-system messages start at (with the current epoch's)."""
        return context_range.context_start(self.window.start_seq, self.summary)

    @property
    def usable_turns(self) -> int:
        """The usable turns from :attr:`context_start` on: what a context could serve at most."""
        before = context_range.turns_before(
            self.window, self.summary, turn_count=self.turn_count, turns_before_epoch=self.turns_before_epoch
        )
        return context_range.usable_turns(self.turn_count, before, self.context_start, self.redacted_questions)


class MessageAt(NamedTuple):
    """Where a row of a message id is in its conversation: its seq, epoch and turn number, and
    whether it starts its turn (:func:`~projectors.turns.starts_turn`)."""

    seq: int
    epoch: int
    turn: int
    starts_turn: bool


class History(Protocol):
    """What applying an event needs to know of its conversation's earlier events (stored, or
    earlier in the same batch): the fold keeps it, the store prefetches the stored part."""

    def rows(self, message_id: str) -> Sequence[MessageAt]:
        """The rows of a message id, in seq order (one, unless a producer reused the id)."""
        ...

    def summaries(self) -> Iterable[SummaryAt]:
        """Summaries whose text is kept (asked on a redaction only)."""
        ...

    def redacted(self) -> Iterable[tuple[str, MessageAt]]:
        """Redacted rows, by message id (asked on a summary that lists the ones it left out only)."""
        ...


Change: TypeAlias = TranscriptRow | SummaryRow | Redaction | Erasure | SummaryWithdrawal


ERASED_REASON = "erased: its key was destroyed"


def apply_event(
    state: ConversationState,
    event: Event,
    at: Coordinates,
    *,
    policy: WindowPolicy,
    history: History,
    key_id: str | None = None,
) -> tuple[ConversationState, list[Change]]:
    """Fold one event into its conversation: the new state and every row change it makes —
    the one place where redaction, erasure (conditional or not), clear and the withdrawal of
    summaries are decided, and with them the current summary. The store only writes these
    changes; ``as_of`` applies them in memory (projectors/applied.py).

    Raises :class:`InvariantError` for events that cannot be applied (they are dead-lettered
    and the conversation parked); inconsistent but storable messages are flagged instead.
    """
    if event.key is not state.key and event.key != state.key:
        raise InvariantError(f"event {event.event_id} belongs to {event.key}, not to {state.key}")
    body = event.body
    if isinstance(body, MessageAppended):  # the hot path
        if body.sealed is not None:
            return _apply_erased_message(state, event, body, at, policy)
        return _apply_message(state, event, body, at, policy, key_id=key_id)
    common: dict[str, Any] = {
        "exists": True,
        "started_at": state.started_at or event.occurred_at,
        "last_event_at": event.occurred_at,
        "last_at": (at.partition, at.offset),
        "first_offset": at.offset if state.first_offset < 0 else state.first_offset,
    }
    if key_id is not None:  # the key the conversation's row (title, metadata) is sealed with
        common["key_id"] = key_id
    base = replace(state, **common)
    if isinstance(body, MessageRedacted):
        return _apply_redaction(base, event, body, at, history)
    if isinstance(body, SummaryRecorded):
        if body.sealed is not None:  # erased (its key destroyed): nothing left to serve
            return base, []
        return _apply_summary(base, event, body, at, history, key_id=key_id)
    if isinstance(body, ConversationStarted):
        return replace(base, title=body.title or base.title, metadata={**base.metadata, **body.metadata}), []
    if isinstance(body, ConversationCleared):
        return _restart(base, clear_count=base.clear_count + 1), []
    if not erase_applies(body, state):
        return base, []  # void: the conversation moved on after the erase was decided (retention)
    erased = _restart(base, clear_count=base.clear_count, title=None, metadata={}, erased_at=event.occurred_at)
    return erased, [Erasure(str(state.key), event.occurred_at, base.next_seq, at.offset)]


def _apply_erased_message(
    state: ConversationState, event: Event, msg: MessageAppended, at: Coordinates, policy: WindowPolicy
) -> tuple[ConversationState, list[Change]]:
    """A message whose key erasure destroyed (an erased placeholder, events/sealing/bodies.py):
    it keeps its place in the audit — row, turn, tool call bookkeeping — and is redacted as it
    lands, so that a projection or an ``as_of`` that meets it before its erase event serves
    nothing of it, exactly like one made after the erase."""
    state, changes = _apply_message(state, event, msg, at, policy)
    seq = state.next_seq - 1
    redaction = Redaction(str(state.key), msg.message_id, ERASED_REASON, event.occurred_at, at.offset, seq + 1)
    if starts_turn(msg.role):
        state = replace(state, redacted_questions=(*state.redacted_questions, seq))
    return state, [*changes, redaction]


def _apply_redaction(
    base: ConversationState, event: Event, body: MessageRedacted, at: Coordinates, history: History
) -> tuple[ConversationState, list[Change]]:
    key = str(base.key)
    redacted = history.rows(body.message_id)
    if not redacted:
        # A redaction of nothing (a message id the conversation never had, a summary's id; the
        # API answers 404 for one, a foreign producer may still send it): recorded — its event
        # id is taken and it is the conversation's last event — and it changes nothing. Never
        # poison: a privacy action that parks the conversation holds back every later one.
        return base, []
    # The content leaves every read model: a summary of a redacted row's epoch that covers
    # it may repeat it, so it is withdrawn; the context falls back to the previous summary
    # and the raw turns, and the summarizer folds them again without it. (Every summary the
    # history holds came before the redaction in the log.)
    withdrawn = [
        SummaryWithdrawal(key, s.seq)
        for s in history.summaries()
        if any(r.epoch == s.epoch and r.seq <= s.covers_seq for r in redacted)
    ]
    redaction = Redaction(key, body.message_id, body.reason, event.occurred_at, at.offset, base.next_seq)
    questions = {r.seq for r in redacted if r.starts_turn and r.epoch == base.epoch}  # a redacted question is no turn
    state = replace(base, redacted_questions=tuple(sorted({*base.redacted_questions, *questions})))
    if withdrawn:
        gone = {w.seq for w in withdrawn}
        state = replace(state, summary=after_withdrawals(state.summary, history.summaries(), gone, state.epoch))
    return state, [redaction, *withdrawn]


def _apply_summary(
    base: ConversationState,
    event: Event,
    body: SummaryRecorded,
    at: Coordinates,
    history: History,
    *,
    key_id: str | None = None,
) -> tuple[ConversationState, list[Change]]:
    key = str(base.key)
    covered_rows = history.rows(body.covers_through_message_id)
    if not covered_rows:
        raise InvariantError(
            f"summary {body.summary_id!r} covers message {body.covers_through_message_id!r}, which {key} does not have"
        )
    row = SummaryRow(
        conversation_key=key,
        seq=base.next_seq,
        partition=at.partition,
        offset=at.offset,
        event_id=event.event_id,
        summary_id=body.summary_id,
        epoch=base.epoch,
        text=body.text,
        covers_through_message_id=body.covers_through_message_id,
        model=body.model,
        prompt_version=body.prompt_version,
        input_tokens=body.input_tokens,
        output_tokens=body.output_tokens,
        summary_tokens=body.summary_tokens,
        occurred_at=event.occurred_at,
        excluded_message_ids=body.excluded_message_ids,
        key_id=key_id,
    )
    state = replace(base, next_seq=base.next_seq + 1)
    covered = covered_rows[0]  # covers through its first row
    if _stale_summary(body, covered, base.epoch, history):
        return state, [row, SummaryWithdrawal(key, row.seq)]
    return replace(state, summary=SummaryAt(row.seq, row.epoch, covered.seq, covered.turn)), [row]


def _stale_summary(body: SummaryRecorded, covered: MessageAt, epoch: int, history: History) -> bool:
    """A summary made just before a clear or an erase lands after it: it covers the old epoch
    and must not become the new one's summary (nor keep erased content). One that lists the
    redacted messages it left out but misses one it covers was written from a stale read."""
    if covered.epoch != epoch:
        return True
    excluded = body.excluded_message_ids
    if excluded is None:
        return False
    return any(
        m.epoch == epoch and m.seq <= covered.seq and message_id not in excluded for message_id, m in history.redacted()
    )


def erase_applies(body: ConversationErased, state: ConversationState) -> bool:
    """An erase applies unless it is conditional and the conversation's last applied event is
    no longer the one it names (see :class:`~events.event_types.ConversationErased`)."""
    return body.only_if_last_offset is None or (state.exists and state.last_at[1] == body.only_if_last_offset)


def _restart(state: ConversationState, **changes: Any) -> ConversationState:
    """A new epoch: the window and the running summary start over; the audit keeps all."""
    return replace(
        state,
        epoch=state.epoch + 1,
        window=EMPTY_WINDOW,
        open_tool_calls=(),
        answered_tool_calls=(),
        summary=None,
        turns_before_epoch=state.turn_count,
        redacted_questions=(),
        **changes,
    )


def _apply_message(
    state: ConversationState,
    event: Event,
    msg: MessageAppended,
    at: Coordinates,
    policy: WindowPolicy,
    *,
    key_id: str | None = None,
) -> tuple[ConversationState, list[Change]]:
    seq = state.next_seq
    open_calls, answered, flag = after_message(state.open_tool_calls, state.answered_tool_calls, msg)
    turn_count, window, last_activity = state.turn_count, state.window, state.last_activity_at
    if starts_turn(msg.role):
        turn_count += 1
        last_activity = event.occurred_at
        window = on_user_message(window, seq, policy)
    row = _transcript_row(state, event, msg, at, seq=seq, turn=turn_count, flag=flag, key_id=key_id)
    # Spelled out rather than dataclasses.replace(): this runs once per message and replace()
    # costs twice as much (it reads every field back through getattr first).
    new_state = ConversationState(
        key=state.key,
        exists=True,
        title=state.title,
        metadata=state.metadata,
        started_at=state.started_at or event.occurred_at,
        last_activity_at=last_activity,
        last_event_at=event.occurred_at,
        message_count=state.message_count + 1,
        turn_count=turn_count,
        next_seq=seq + 1,
        epoch=state.epoch,
        clear_count=state.clear_count,
        erased_at=state.erased_at,
        open_tool_calls=open_calls,
        answered_tool_calls=answered,
        window=window,
        last_at=(at.partition, at.offset),
        first_offset=at.offset if state.first_offset < 0 else state.first_offset,
        summary=state.summary,
        turns_before_epoch=state.turns_before_epoch,
        redacted_questions=state.redacted_questions,
        key_id=key_id or state.key_id,
    )
    return new_state, [row]


def _transcript_row(
    state: ConversationState,
    event: Event,
    msg: MessageAppended,
    at: Coordinates,
    *,
    seq: int,
    turn: int,
    flag: str | None,
    key_id: str | None,
) -> TranscriptRow:
    """The transcript row of message ``msg`` (of ``event``, stored at ``at``) as row ``seq``."""
    return TranscriptRow(
        conversation_key=str(state.key),
        seq=seq,
        partition=at.partition,
        offset=at.offset,
        event_id=event.event_id,
        message_id=msg.message_id,
        role=msg.role,
        content=content_json(msg),
        name=msg.name,
        tool_calls=tool_calls_json(msg),
        tool_call_id=msg.tool_call_id,
        reasoning_content=msg.reasoning_content,
        thinking_duration_ms=msg.thinking_duration_ms,
        finish_reason=msg.finish_reason,
        model=msg.model,
        usage=usage_json(msg),
        metadata=dict(msg.metadata),
        occurred_at=event.occurred_at,
        epoch=state.epoch,
        turn=turn,
        flag=flag,
        blocks=msg.blocks or None,
        provider=msg.provider,
        api=msg.api,
        is_error=msg.is_error,
        key_id=key_id,
    )
