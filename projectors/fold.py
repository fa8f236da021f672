"""Folding a batch of log records into read-model changes — pure, no I/O.

Three steps, so each record is decoded once: :func:`decode_batch` turns records into events
(or poison), :func:`lookups` says what the store must prefetch (conversation states, parked
conversations, already applied event ids, messages that redactions and summaries refer to),
and :func:`fold_batch` applies the events. The store writes the outcome in one transaction
with the positions.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from events.codec import EventCodec
from events.errors import ConvlogError, InvalidEventError
from events.event_types import Event, MessageAppended, MessageRedacted, SummaryRecorded
from events.keys import ConversationKey
from events.log import Coordinates, LogRecord
from events.validation import validate_event
from projectors.errors import InvariantError, ProjectionError
from projectors.state import (
    ConversationState,
    Erasure,
    Redaction,
    SummaryRow,
    TranscriptRow,
    apply_event,
)
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
        event = codec.decode(record.value)
        validate_event(event)  # foreign producers bypass convlog's producer API
    except ConvlogError as e:
        return poison(e.code, str(e))
    if str(event.key) != key:
        return poison("key_mismatch", f"record key {key} but the event names {event.key}")
    return Decoded(record, key, event)


def decode_batch(records: Sequence[LogRecord], *, codec: EventCodec, max_event_bytes: int) -> list[Decoded]:
    return [decode_one(r, codec=codec, max_event_bytes=max_event_bytes) for r in records]


@dataclass(frozen=True, slots=True)
class Lookups:
    keys: frozenset[str]
    event_ids: frozenset[tuple[str, str]]
    referenced_messages: frozenset[tuple[str, str]]


def lookups(decoded: Sequence[Decoded]) -> Lookups:
    keys: set[str] = set()
    event_ids: set[tuple[str, str]] = set()
    referenced: set[tuple[str, str]] = set()
    for d in decoded:
        if d.key is not None:
            keys.add(d.key)
        if d.event is None or d.key is None:
            continue
        event_ids.add((d.key, d.event.event_id))
        body = d.event.body
        if isinstance(body, MessageRedacted):
            referenced.add((d.key, body.message_id))
        elif isinstance(body, SummaryRecorded):
            referenced.add((d.key, body.covers_through_message_id))
    return Lookups(frozenset(keys), frozenset(event_ids), frozenset(referenced))


@dataclass(frozen=True, slots=True)
class BatchInputs:
    """What the store prefetched for a batch."""

    states: Mapping[str, ConversationState]
    parked: frozenset[str] = frozenset()
    seen_event_ids: frozenset[tuple[str, str]] = frozenset()
    known_messages: frozenset[tuple[str, str]] = frozenset()  # (conversation_key, message_id) stored
    # (partition, offset) -> reason: poison records an operator skipped in the version this one
    # rebuilds or verifies; skipped again here instead of parking, so the versions agree.
    skips: Mapping[tuple[int, int], str] = field(default_factory=dict)


@dataclass(slots=True)
class BatchOutcome:
    states: dict[str, ConversationState] = field(default_factory=dict)  # changed conversations, final
    transcript: list[TranscriptRow] = field(default_factory=list)
    summaries: list[SummaryRow] = field(default_factory=list)
    redactions: list[Redaction] = field(default_factory=list)
    erasures: list[Erasure] = field(default_factory=list)
    applied_event_ids: list[tuple[str, str]] = field(default_factory=list)
    poisoned: list[Poison] = field(default_factory=list)
    skipped: list[tuple[Poison, str]] = field(default_factory=list)  # with the operator's reason
    held: list[tuple[str, LogRecord]] = field(default_factory=list)  # behind a parked conversation
    duplicates: int = 0


def fold_batch(
    decoded: Sequence[Decoded], inputs: BatchInputs, *, policy: WindowPolicy, fail_fast: bool = False
) -> BatchOutcome:
    """Apply the batch (log order per partition) on top of ``inputs``.

    A conversation with a poisoned record is parked: its later records are held, in order,
    while other conversations go on. With ``fail_fast`` a poisoned record raises
    :class:`PoisonRecordError` instead (a rebuild must not quietly differ from the live run).
    A poisoned record listed in ``inputs.skips`` is skipped, as the operator decided before.
    """
    out = BatchOutcome()
    parked = set(inputs.parked)
    seen = set(inputs.seen_event_ids)
    known = set(inputs.known_messages)
    for d in decoded:
        if d.key is not None and d.key in parked:
            out.held.append((d.key, d.record))
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
    return out


def _apply(
    d: Decoded,
    *,
    states: Mapping[str, ConversationState],
    out: BatchOutcome,
    seen: set[tuple[str, str]],
    known: set[tuple[str, str]],
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
        new_state, changes = apply_event(
            state, event, Coordinates(d.record.partition, d.record.offset),
            policy=policy, message_known=lambda message_id: (key, message_id) in known,
        )  # fmt: skip
    except InvariantError as e:
        return Poison(d.record, key, e.code, str(e))
    seen.add((key, event.event_id))
    out.applied_event_ids.append((key, event.event_id))
    out.states[key] = new_state
    if isinstance(event.body, MessageAppended):
        known.add((key, event.body.message_id))
    for change in changes:
        if isinstance(change, TranscriptRow):
            out.transcript.append(change)
        elif isinstance(change, SummaryRow):
            out.summaries.append(change)
        elif isinstance(change, Redaction):
            out.redactions.append(change)
        else:
            out.erasures.append(change)
    return None
