"""Folding a batch of log records into read-model changes — pure, no I/O.

Three steps, so each record is decoded once: :func:`decode_batch` turns records into events
(or poison), :func:`lookups` says what the store must prefetch (conversation states, parked
conversations, already applied event ids, messages that redactions and summaries refer to),
and :func:`fold_batch` applies the events. The store writes the outcome in one transaction
with the positions.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from events.codec import EventCodec
from events.errors import ConvlogError, InvalidEventError
from events.event_types import ConversationCleared, ConversationErased, Event, MessageRedacted, SummaryRecorded
from events.keys import ConversationKey
from events.log import Coordinates, LogRecord
from events.sealing.bodies import is_erased, open_event
from events.validation import validate_event
from projectors.changes import Erasure, Redaction, SummaryRow, SummaryWithdrawal, TranscriptRow
from projectors.context_range import SummaryAt
from projectors.errors import InvariantError, ProjectionError
from projectors.state import ConversationState, MessageAt, apply_event
from projectors.turns import starts_turn
from projectors.window import WindowPolicy


@dataclass(frozen=True, slots=True)
class Poison:
    """Why a record cannot be applied; it goes to dead letters and parks its conversation."""

    record: LogRecord
    conversation_key: str | None  # None when even the record key is unreadable
    error_code: str
    error: str


@dataclass(frozen=True, slots=True)
class Decoded:
    record: LogRecord
    key: str | None
    event: Event | None  # None: see poison
    poison: Poison | None = None
    key_id: str | None = None  # the data key the record was sealed with (None: a plain record)


class PoisonRecordError(ProjectionError):
    """Raised instead of dead-lettering when folding fails fast (rebuilds)."""

    code = "poison_record"

    def __init__(self, poison: Poison) -> None:
        r = poison.record
        super().__init__(f"poison record at partition {r.partition} offset {r.offset}: {poison.error}")
        self.poison = poison


def _record_key(record: LogRecord) -> str | None:
    return _parse_key(record.key)


@functools.lru_cache(maxsize=65536)  # a batch mostly repeats the same conversations' keys
def _parse_key(raw: bytes) -> str | None:
    try:
        return str(ConversationKey.parse(raw))
    except InvalidEventError:
        return None


def decode_one(record: LogRecord, *, codec: EventCodec, max_event_bytes: int) -> Decoded:
    key = _record_key(record)

    def poison(code: str, error: str) -> Decoded:
        return Decoded(record, key, None, Poison(record, key, code, error))

    if key is None:
        return poison("invalid_key", f"record key {record.key[:80]!r} is not tenant:user:conversation")
    if len(record.value) > max_event_bytes:
        return poison("event_too_large", f"{len(record.value)} bytes, the limit is {max_event_bytes}")
    try:
        event = codec.decode_unopened(record.value)
        seal = getattr(event.body, "sealed", None)
        if seal is not None:
            keys = codec.keys
            if keys is None:
                return poison("unknown_key", f"the record is sealed under key {seal.key_id} and no key store is set")
            event = open_event(event, keys, codec)
        if not is_erased(event.body):  # a placeholder has its clear fields only: no message to validate
            validate_event(event, stored=True)  # foreign producers bypass convlog's producer API
    except ConvlogError as e:
        return poison(e.code, str(e))
    if str(event.key) != key:
        return poison("key_mismatch", f"record key {key} but the event names {event.key}")
    return Decoded(record, key, event, key_id=None if seal is None else seal.key_id)


def decode_batch(records: Sequence[LogRecord], *, codec: EventCodec, max_event_bytes: int) -> list[Decoded]:
    return [decode_one(r, codec=codec, max_event_bytes=max_event_bytes) for r in records]


@dataclass(frozen=True, slots=True)
class Lookups:
    keys: frozenset[str]
    event_ids: frozenset[tuple[str, str]]
    referenced_messages: frozenset[tuple[str, str]]
    redacting: frozenset[str] = frozenset()  # conversations with a redaction: their kept summaries
    listing: frozenset[str] = frozenset()  # with a summary listing left-out messages: their redactions


def lookups(decoded: Sequence[Decoded]) -> Lookups:
    keys: set[str] = set()
    event_ids: set[tuple[str, str]] = set()
    referenced: set[tuple[str, str]] = set()
    redacting: set[str] = set()
    listing: set[str] = set()
    for d in decoded:
        if d.key is not None:
            keys.add(d.key)
        if d.event is None or d.key is None:
            continue
        event_ids.add((d.key, d.event.event_id))
        body = d.event.body
        if isinstance(body, MessageRedacted):
            referenced.add((d.key, body.message_id))
            redacting.add(d.key)
        elif isinstance(body, SummaryRecorded):
            referenced.add((d.key, body.covers_through_message_id))
            if body.excluded_message_ids is not None:
                listing.add(d.key)
    return Lookups(
        frozenset(keys), frozenset(event_ids), frozenset(referenced), frozenset(redacting), frozenset(listing)
    )


@dataclass(frozen=True, slots=True)
class BatchInputs:
    """What the store prefetched for a batch."""

    states: Mapping[str, ConversationState]
    parked: frozenset[str] = frozenset()
    seen_event_ids: frozenset[tuple[str, str]] = frozenset()
    # (conversation_key, message_id) -> where it is stored, for the lookups' referenced messages
    known_messages: Mapping[tuple[str, str], Sequence[MessageAt]] = field(default_factory=dict)
    # (partition, offset) -> reason: poison records an operator skipped in the version this one
    # rebuilds or verifies; skipped again here instead of parking, so the versions agree.
    skips: Mapping[tuple[int, int], str] = field(default_factory=dict)
    # The stored summaries with text of the lookups' ``redacting`` conversations, and the stored
    # redacted messages (message_id -> where) of its ``listing`` ones.
    summaries: Mapping[str, Sequence[SummaryAt]] = field(default_factory=dict)
    redacted: Mapping[str, Sequence[tuple[str, MessageAt]]] = field(default_factory=dict)


@dataclass(slots=True)
class BatchOutcome:
    states: dict[str, ConversationState] = field(default_factory=dict)  # changed conversations, final
    transcript: list[TranscriptRow] = field(default_factory=list)
    summaries: list[SummaryRow] = field(default_factory=list)
    redactions: list[Redaction] = field(default_factory=list)
    erasures: list[Erasure] = field(default_factory=list)
    withdrawals: list[SummaryWithdrawal] = field(default_factory=list)
    applied_event_ids: list[tuple[str, str]] = field(default_factory=list)
    poisoned: list[Poison] = field(default_factory=list)
    skipped: list[tuple[Poison, str]] = field(default_factory=list)  # with the operator's reason
    held: list[tuple[str, LogRecord]] = field(default_factory=list)  # behind a parked conversation
    # Conversations parked before this batch with an erase or a clear among its held records ->
    # the reason to skip what parks them: neither is ever held (the store releases them).
    superseding: dict[str, str] = field(default_factory=dict)
    duplicates: int = 0


def fold_batch(
    decoded: Sequence[Decoded], inputs: BatchInputs, *, policy: WindowPolicy, fail_fast: bool = False
) -> BatchOutcome:
    """Apply the batch (log order per partition) on top of ``inputs``.

    A conversation with a poisoned record is parked: its later records are held, in order,
    while other conversations go on. With ``fail_fast`` a poisoned record raises
    :class:`PoisonRecordError` instead (a rebuild must not quietly differ from the live run).
    A poisoned record listed in ``inputs.skips`` is skipped, as the operator decided before.
    An erase or a clear is never held: behind a poisoned record of this batch, that record is
    skipped (the reason names the erase or clear) and the records held behind it are applied,
    then the erase or clear; behind a conversation parked before (``inputs.parked``) it is held
    and named in ``superseding``, for the store to do the same with the stored held records.
    """
    out = BatchOutcome()
    parked = set(inputs.parked)
    local: dict[str, tuple[Poison, list[Decoded]]] = {}  # parked in this batch: its poison, its held records
    seen = set(inputs.seen_event_ids)
    known = _Known(inputs, out.transcript)
    pending = deque(decoded)
    while pending:
        d = pending.popleft()
        if d.key is not None and d.key in parked:
            reason = _superseding(d, seen)
            if reason is not None and d.key in local:
                parking, held = local.pop(d.key)
                out.poisoned.remove(parking)
                out.skipped.append((parking, reason))
                out.held = [(k, r) for k, r in out.held if k != d.key]
                parked.discard(d.key)
                pending.extendleft(reversed([*held, d]))  # applied next, in log order
                continue
            out.held.append((d.key, d.record))
            if d.key in local:
                local[d.key][1].append(d)
            elif reason is not None:
                out.superseding.setdefault(d.key, reason)
            continue
        poison = d.poison or _apply(d, states=inputs.states, out=out, seen=seen, known=known, policy=policy)
        if poison is None:
            continue
        reason = inputs.skips.get((d.record.partition, d.record.offset))
        if reason is not None:
            out.skipped.append((poison, reason))
            continue
        if fail_fast:
            raise PoisonRecordError(poison)
        out.poisoned.append(poison)
        if poison.conversation_key is not None:
            parked.add(poison.conversation_key)
            local[poison.conversation_key] = (poison, [])
    return out


def _superseding(d: Decoded, seen: set[tuple[str, str]]) -> str | None:
    """Why a held record releases its conversation: it is a clear or an unconditional erase
    (a conditional one is decided on the applied events: it waits for them). None otherwise."""
    event = d.event
    if event is None or d.key is None or (d.key, event.event_id) in seen:
        return None
    body = event.body
    if isinstance(body, ConversationCleared):
        kind = "clear"
    elif isinstance(body, ConversationErased) and body.only_if_last_offset is None:
        kind = "erase"
    else:
        return None
    return (
        f"skipped for the {kind} at partition {d.record.partition}, offset {d.record.offset}: an erase or a "
        "clear is never held behind a parked record"
    )


class _Known:
    """What the fold knows of the batch's conversations' earlier events: prefetched, and
    updated as it applies the batch's events. The batch's messages are indexed only when a
    redaction or a summary asks where one is: nothing is added to the per-message path."""

    def __init__(self, inputs: BatchInputs, rows: list[TranscriptRow]) -> None:
        self._messages = {at: list(rows) for at, rows in inputs.known_messages.items()}
        self._rows = rows  # the batch's transcript rows so far (the outcome's list)
        self._indexed = 0  # rows[:_indexed] are in _messages
        self.summaries = {k: {s.seq: s for s in v} for k, v in inputs.summaries.items()}
        self.redacted = {k: set(v) for k, v in inputs.redacted.items()}

    def of(self, key: str) -> _ConversationHistory:
        # Not cached here: a view refers back to this, and a cycle would keep the whole batch's
        # rows alive until the cyclic collector runs (measured: a fifth slower fold).
        return _ConversationHistory(self, key)

    def rows(self, key: str, message_id: str) -> Sequence[MessageAt]:
        for row in self._rows[self._indexed :]:  # after the stored rows: in seq order
            at = MessageAt(row.seq, row.epoch, row.turn, starts_turn(row.role))
            self._messages.setdefault((row.conversation_key, row.message_id), []).append(at)
        self._indexed = len(self._rows)
        return self._messages.get((key, message_id), ())

    def record(self, key: str, change: SummaryRow | Redaction | Erasure | SummaryWithdrawal) -> None:
        if isinstance(change, SummaryRow):
            covered = self.rows(key, change.covers_through_message_id)[0]  # apply_event checked it
            at = SummaryAt(change.seq, change.epoch, covered.seq, covered.turn)
            self.summaries.setdefault(key, {})[change.seq] = at
        elif isinstance(change, Redaction):
            rows = self.rows(key, change.message_id)
            self.redacted.setdefault(key, set()).update(
                (change.message_id, r) for r in rows if r.seq < change.before_seq
            )
        elif isinstance(change, SummaryWithdrawal):
            self.summaries.get(key, {}).pop(change.seq, None)
        else:  # an erasure takes the text of every summary before it
            kept = self.summaries.get(key, {})
            self.summaries[key] = {seq: s for seq, s in kept.items() if seq >= change.before_seq}


class _ConversationHistory:
    """One conversation's :class:`~projectors.state.History`, as the fold knows it."""

    __slots__ = ("key", "known")

    def __init__(self, known: _Known, key: str) -> None:
        self.known = known
        self.key = key

    def rows(self, message_id: str) -> Sequence[MessageAt]:
        return self.known.rows(self.key, message_id)

    def summaries(self) -> Iterable[SummaryAt]:
        return self.known.summaries.get(self.key, {}).values()

    def redacted(self) -> Iterable[tuple[str, MessageAt]]:
        return self.known.redacted.get(self.key, set())


def _apply(
    d: Decoded,
    *,
    states: Mapping[str, ConversationState],
    out: BatchOutcome,
    seen: set[tuple[str, str]],
    known: _Known,
    policy: WindowPolicy,
) -> Poison | None:
    event, key = d.event, d.key
    assert event is not None  # decode_one sets event and key unless it sets poison
    assert key is not None
    if (key, event.event_id) in seen:
        out.duplicates += 1
        return None
    state = out.states.get(key) or states.get(key) or ConversationState(event.key)
    try:
        at = Coordinates(d.record.partition, d.record.offset)
        new_state, changes = apply_event(state, event, at, policy=policy, history=known.of(key), key_id=d.key_id)
    except InvariantError as e:
        return Poison(d.record, key, e.code, str(e))
    seen.add((key, event.event_id))
    out.applied_event_ids.append((key, event.event_id))
    out.states[key] = new_state
    for change in changes:
        if isinstance(change, TranscriptRow):  # the hot path: once per message
            out.transcript.append(change)
            continue
        known.record(key, change)
        if isinstance(change, SummaryRow):
            out.summaries.append(change)
        elif isinstance(change, Redaction):
            out.redactions.append(change)
        elif isinstance(change, SummaryWithdrawal):
            out.withdrawals.append(change)
        else:
            out.erasures.append(change)
    return None
