"""The :class:`~projectors.ports.ProjectionStore` in memory: the same fold as the Postgres store
(:mod:`projectors.fold`), written into :class:`~projectors.memory_tables.MemoryTables`.

pyeventsourcing's POPO recorders are the model: a real adapter, not a mock — positions guarded
like Postgres', duplicates ignored, poison dead-lettered and its conversation parked — so the
read-model contract suite (tests/contract/test_read_models_contract.py) runs against it and the
query API can be tested without Postgres. A batch is folded first and written after: nothing
here can fail half-way, so there is no transaction to roll back, and memory refuses no row.
Operators' work (releasing or skipping dead letters, rebuilds, verify) stays on Postgres: this
store has no ``resolve`` and no skips.

The redaction, erasure and summary-withdrawal writes below mirror projectors/writes.py's
UPDATEs one for one; the contract suite holds them equal. (Issue 13 item 1 moves those
decisions into the fold; then both stores only write the fold's decisions.)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from events.codec import EventCodec
from events.log import LogRecord
from projectors.errors import PositionConflictError
from projectors.fold import BatchInputs, BatchOutcome, decode_batch, fold_batch, lookups
from projectors.memory_tables import DeadLetter, MemoryTables, covered_seq, stamp
from projectors.ports import UNREADABLE_BATCH, BatchReport
from projectors.rows import (
    SUMMARY_COLUMNS,
    TRANSCRIPT_COLUMNS,
    TokenCounting,
    index_rows,
    summary_copy_rows,
    transcript_copy_rows,
)
from projectors.window import WindowPolicy

_EMPTY_OBJECT = json.dumps({})


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

    async def apply(
        self, records: Sequence[LogRecord], expected: Mapping[int, int], *, through: Mapping[int, int] | None = None
    ) -> BatchReport:
        t = self.tables
        decoded = decode_batch(records, codec=self._codec, max_event_bytes=self._max_event_bytes)
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
        stored = {(k, r["message_id"]) for k in look.keys for r in t.transcript.get(k, ())}
        inputs = BatchInputs(
            states={k: t.conversations[k] for k in look.keys if k in t.conversations},
            parked=frozenset(k for k in look.keys if k in t.parked),
            seen_event_ids=frozenset(look.event_ids & t.event_ids),
            known_messages=frozenset(look.referenced_messages & stored),
        )
        outcome = fold_batch(decoded, inputs, policy=self._policy, fail_fast=self._fail_fast)
        self._write(outcome)
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

    def _write(self, out: BatchOutcome) -> None:
        """projectors/writes.py's BatchWriter.write, statement for statement, in the same order."""
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
                if m["message_id"] == r.message_id:
                    m |= {"content": None, "reasoning_content": None, "tool_calls": None, "metadata": _EMPTY_OBJECT,
                          "redacted_at": stamp(m["redacted_at"], r.occurred_at),
                          "redaction_reason": m["redaction_reason"] or r.reason}  # fmt: skip
        self._withdraw_summaries(out)
        for e in out.erasures:
            for m in t.transcript.get(e.conversation_key, ()):
                if m["seq"] < e.before_seq:
                    m |= {"content": None, "reasoning_content": None, "tool_calls": None, "name": None,
                          "metadata": _EMPTY_OBJECT, "usage": None,
                          "erased_at": stamp(m["erased_at"], e.occurred_at)}  # fmt: skip
            for x in t.summaries.get(e.conversation_key, ()):
                if x["seq"] < e.before_seq:
                    x |= {"text": None, "erased_at": stamp(x["erased_at"], e.occurred_at)}
        t.conversations.update(out.states)
        self._write_poison(out)

    def _withdraw_summaries(self, out: BatchOutcome) -> None:
        """The three withdrawals of writes.py's ``_withdraw_summaries``, in its order."""
        t = self.tables
        for r in out.redactions:
            rows = t.transcript.get(r.conversation_key, [])
            for m in (m for m in rows if m["message_id"] == r.message_id):
                for x in t.summaries.get(r.conversation_key, ()):
                    covers = covered_seq(rows, x)
                    if (x["epoch"] == m["epoch"] and x["offset"] < r.offset and x["text"] is not None
                            and covers is not None and m["seq"] <= covers):  # fmt: skip
                        x["text"] = None
        for s in out.summaries:
            rows = t.transcript.get(s.conversation_key, [])
            x = _summary(t, s.conversation_key, s.seq)
            covering = [m for m in rows if m["message_id"] == x["covers_through_message_id"]]
            if covering and x["epoch"] != covering[0]["epoch"]:  # rows are in seq order
                x["text"] = None
        for s in out.summaries:
            if s.excluded_message_ids is None:
                continue
            rows = t.transcript.get(s.conversation_key, [])
            x = _summary(t, s.conversation_key, s.seq)
            covers = covered_seq(rows, x)
            if x["text"] is not None and covers is not None and any(
                r["epoch"] == x["epoch"] and r["redacted_at"] is not None
                and r["message_id"] not in s.excluded_message_ids and r["seq"] <= covers
                for r in rows
            ):  # fmt: skip
                x["text"] = None

    def _write_poison(self, out: BatchOutcome) -> None:
        t = self.tables
        for poison in out.poisoned:
            r = poison.record
            letter = t.dead_letter_at(r.partition, r.offset)
            if letter is None:
                letter = DeadLetter(t.next_dead_letter_id(), r.partition, r.offset, poison.conversation_key, r,
                                    poison.error_code, poison.error)  # fmt: skip
                t.dead_letters[letter.id] = letter
            else:
                letter.status, letter.error, letter.error_code, letter.resolution = (
                    "parked", poison.error, poison.error_code, None,
                )  # fmt: skip
            if poison.conversation_key is not None:
                t.parked[poison.conversation_key] = letter.id
        for poison, reason in out.skipped:
            r = poison.record
            if t.dead_letter_at(r.partition, r.offset) is None:
                letter_id = t.next_dead_letter_id()
                t.dead_letters[letter_id] = DeadLetter(letter_id, r.partition, r.offset, poison.conversation_key, r,
                                                       poison.error_code, poison.error, "skipped", reason)  # fmt: skip
        for key, record in out.held:
            t.held.setdefault(key, []).append(record)


def _summary(tables: MemoryTables, key: str, seq: int) -> dict[str, Any]:
    return next(x for x in tables.summaries[key] if x["seq"] == seq)
