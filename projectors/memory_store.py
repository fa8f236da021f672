"""The :class:`~projectors.ports.ProjectionStore` in memory: the same fold as the Postgres store
(:mod:`projectors.fold`), written into :class:`~projectors.memory_tables.MemoryTables`.

pyeventsourcing's POPO recorders are the model: a real adapter, not a mock — positions guarded
like Postgres', duplicates ignored, poison dead-lettered and its conversation parked — so the
read-model contract suite (tests/contract/test_read_models_contract.py) runs against it and the
query API can be tested without Postgres. A batch is folded first and written after: nothing
here can fail half-way, so there is no transaction to roll back, and memory refuses no row.
Operators' work (releasing or skipping dead letters, rebuilds, verify) stays on Postgres: this
store has no ``resolve`` and no skips — but an erase or a clear held behind a parked record
releases it here too, as there.

Like the Postgres store it prefetches what the fold needs to know of the stored rows and
writes the fold's decisions (which rows a redaction or an erasure clears, which summaries are
withdrawn): it decides nothing itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from events.codec import EventCodec
from events.log import LogRecord
from projectors.changes import CLEARS_TO_EMPTY, ERASURE_CLEARS, REDACTION_CLEARS
from projectors.context_range import SummaryAt
from projectors.errors import PositionConflictError
from projectors.fold import BatchInputs, BatchOutcome, Lookups, decode_batch, fold_batch, lookups
from projectors.memory_tables import DeadLetter, MemoryTables, covered_row, stamp
from projectors.ports import UNREADABLE_BATCH, BatchReport
from projectors.prepare import PreparedBatch
from projectors.rows import (
    SUMMARY_COLUMNS,
    TRANSCRIPT_COLUMNS,
    TokenCounting,
    index_rows,
    message_at,
    summary_copy_rows,
    transcript_copy_rows,
)
from projectors.state import MessageAt
from projectors.window import WindowPolicy

_EMPTIED = dict.fromkeys(CLEARS_TO_EMPTY, json.dumps({}))  # JSON columns hold their text


class InMemoryProjectionStore:
    """Applies records to ``tables`` (one projection version), exactly once per position."""

    def __init__(
        self,
        tables: MemoryTables,
        *,
        codec: EventCodec,
        counter: TokenCounting,
        policy: WindowPolicy,
        max_event_bytes: int,
        fail_fast: bool = False,
    ) -> None:
        self.tables = tables
        self._codec = codec
        self._counter = counter
        self._policy = policy
        self._max_event_bytes = max_event_bytes
        self._fail_fast = fail_fast

    @property
    def schema(self) -> str:
        return self.tables.schema

    async def positions(self, partitions: Sequence[int]) -> dict[int, int]:
        for p in partitions:
            self.tables.positions.setdefault(p, 0)
        return {p: self.tables.positions[p] for p in partitions}

    async def prepare(self, records: Sequence[LogRecord]) -> PreparedBatch:
        return PreparedBatch(decode_batch(records, codec=self._codec, max_event_bytes=self._max_event_bytes))

    async def apply(
        self,
        records: Sequence[LogRecord],
        expected: Mapping[int, int],
        *,
        through: Mapping[int, int] | None = None,
        prepared: PreparedBatch | None = None,
    ) -> BatchReport:
        t = self.tables
        decoded = (prepared or await self.prepare(records)).decoded
        new_positions = {p: o for p, o in (through or {}).items() if p in expected}
        for r in records:
            new_positions[r.partition] = max(r.offset + 1, new_positions.get(r.partition, 0))
        moved = {p: expected[p] for p in new_positions}
        wrong = {p: (o, t.positions.get(p)) for p, o in moved.items() if t.positions.get(p) != o}
        if wrong:
            raise PositionConflictError(
                "positions moved under this consumer (expected, stored): "
                + ", ".join(f"p{p}: {e} != {s}" for p, (e, s) in sorted(wrong.items()))
            )
        look = lookups(decoded)
        outcome = fold_batch(decoded, self._inputs(look), policy=self._policy, fail_fast=self._fail_fast)
        self._write(outcome)
        self._release_superseded(outcome)
        for key, event_id, partition, offset in index_rows(decoded):
            t.event_index.setdefault(key, []).append((event_id, partition, offset))
        t.positions.update(new_positions)
        return BatchReport(
            positions=new_positions,
            applied=len(outcome.applied_event_ids),
            duplicates=outcome.duplicates,
            dead_lettered=len(outcome.poisoned),
            held=len(outcome.held),
        )

    async def record_unreadable(self, partition: int, offset: int, error: str) -> None:
        t = self.tables
        letter = t.dead_letter_at(partition, offset)
        if letter is None:
            letter_id = t.next_dead_letter_id()
            t.dead_letters[letter_id] = DeadLetter(letter_id, partition, offset, None, None, UNREADABLE_BATCH, error)
        elif letter.error_code == UNREADABLE_BATCH:
            letter.status, letter.error, letter.resolution = "parked", error, None

    def _release_superseded(self, out: BatchOutcome) -> None:
        """The Postgres store's ``_release_superseded``: an erase or a clear held behind a parked
        record skips that record (with the fold's reason) and applies the held ones, it among them."""
        t = self.tables
        for key, reason in out.superseding.items():
            letter_id = t.parked.pop(key, None)
            if letter_id is None:
                continue
            letter = t.dead_letters[letter_id]
            letter.status, letter.resolution = "skipped", reason
            held = decode_batch(t.held.pop(key, []), codec=self._codec, max_event_bytes=self._max_event_bytes)
            released = fold_batch(held, self._inputs(lookups(held)), policy=self._policy, fail_fast=self._fail_fast)
            self._write(released)
            self._release_superseded(released)

    def _inputs(self, look: Lookups) -> BatchInputs:
        """What the Postgres store's ``_fold`` prefetches, read from the tables."""
        t = self.tables
        known: dict[tuple[str, str], list[MessageAt]] = {}
        for k, message_id in look.referenced_messages:
            at = [message_at(r) for r in t.transcript.get(k, ()) if r["message_id"] == message_id]
            if at:
                known[(k, message_id)] = at
        summaries: dict[str, list[SummaryAt]] = {}
        for k in look.redacting:
            rows = t.transcript.get(k, [])
            for x in t.summaries.get(k, ()):
                covered = covered_row(rows, x)
                if x["text"] is not None and covered is not None:  # a summary covers a stored message
                    at_summary = SummaryAt(x["seq"], x["epoch"], covered["seq"], covered["turn"])
                    summaries.setdefault(k, []).append(at_summary)
        redacted: dict[str, list[tuple[str, MessageAt]]] = {}
        for k in look.listing:
            for r in t.transcript.get(k, ()):
                if r["redacted_at"] is not None:
                    redacted.setdefault(k, []).append((r["message_id"], message_at(r)))
        return BatchInputs(
            states={k: t.conversations[k] for k in look.keys if k in t.conversations},
            parked=frozenset(k for k in look.keys if k in t.parked),
            seen_event_ids=frozenset(look.event_ids & t.event_ids),
            known_messages=known,
            summaries=summaries,
            redacted=redacted,
        )

    def _write(self, out: BatchOutcome) -> None:
        """pgstore/writes.py's BatchWriter.write, statement for statement, in the same order."""
        t = self.tables
        for row in transcript_copy_rows(out.transcript, self._counter):
            entry: dict[str, Any] = dict(zip(TRANSCRIPT_COLUMNS, row, strict=True))
            entry |= {"redacted_at": None, "redaction_reason": None, "erased_at": None}
            t.transcript.setdefault(entry["conversation_key"], []).append(entry)
        for row in summary_copy_rows(out.summaries):
            entry = dict(zip(SUMMARY_COLUMNS, row, strict=True)) | {"erased_at": None}
            t.summaries.setdefault(entry["conversation_key"], []).append(entry)
        t.event_ids.update(out.applied_event_ids)
        for r in out.redactions:
            for m in t.transcript.get(r.conversation_key, ()):
                if m["message_id"] == r.message_id and m["seq"] < r.before_seq:
                    m.update(
                        dict.fromkeys(REDACTION_CLEARS),
                        **_EMPTIED,
                        redacted_at=stamp(m["redacted_at"], r.occurred_at),
                        redaction_reason=m["redaction_reason"] or r.reason,
                    )
        for w in out.withdrawals:
            _summary(t, w.conversation_key, w.seq)["text"] = None
        for e in out.erasures:
            for m in t.transcript.get(e.conversation_key, ()):
                if m["seq"] < e.before_seq:
                    m.update(dict.fromkeys(ERASURE_CLEARS), **_EMPTIED, erased_at=stamp(m["erased_at"], e.occurred_at))
            for x in t.summaries.get(e.conversation_key, ()):
                if x["seq"] < e.before_seq:
                    x |= {"text": None, "erased_at": stamp(x["erased_at"], e.occurred_at)}
        t.conversations.update(out.states)
        self._write_poison(out)

    def _write_poison(self, out: BatchOutcome) -> None:
        t = self.tables
        for poison in out.poisoned:
            r = poison.record
            letter = t.dead_letter_at(r.partition, r.offset)
            if letter is None:
                letter = DeadLetter(
                    t.next_dead_letter_id(),
                    r.partition,
                    r.offset,
                    poison.conversation_key,
                    r,
                    poison.error_code,
                    poison.error,
                )
                t.dead_letters[letter.id] = letter
            else:
                letter.status, letter.error, letter.error_code, letter.resolution = (
                    "parked",
                    poison.error,
                    poison.error_code,
                    None,
                )
            if poison.conversation_key is not None:
                t.parked[poison.conversation_key] = letter.id
        for poison, reason in out.skipped:
            r = poison.record
            if t.dead_letter_at(r.partition, r.offset) is None:
                letter_id = t.next_dead_letter_id()
                t.dead_letters[letter_id] = DeadLetter(
                    letter_id,
                    r.partition,
                    r.offset,
                    poison.conversation_key,
                    r,
                    poison.error_code,
                    poison.error,
                    "skipped",
                    reason,
                )
        for key, record in out.held:
            t.held.setdefault(key, []).append(record)


def _summary(tables: MemoryTables, key: str, seq: int) -> dict[str, Any]:
    return next(x for x in tables.summaries[key] if x["seq"] == seq)
