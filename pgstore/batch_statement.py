"""A small batch of plain records written in one statement: its rows, its conversations' states
and its position move as data-modifying CTEs of one ``INSERT … WITH``.

psycopg spends about as much Python on each statement as the server spends on a one-row
INSERT, and a read-your-writes request waits for exactly such a batch: one statement instead
of six is most of what is left of its transaction's cost beyond the round trips. Only for a
*plain* batch — rows to insert and states to upsert, nothing that changes rows of the same
batch (a redaction, an erasure, a withdrawn summary: the CTEs of one statement all see the
snapshot before it, so they could not see rows inserted beside them), no poison, nothing held.
Anything else goes the statement-per-table way (pgstore/writes.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, LiteralString

from psycopg import sql

from pgstore.writes import state_upsert
from projectors.fold import BatchOutcome
from projectors.rows import (
    CONVERSATION_COLUMNS,
    SUMMARY_COLUMNS,
    TRANSCRIPT_COLUMNS,
    WINDOW_COLUMNS,
    states_json,
    summary_copy_rows,
)
from projectors.sealed_rows import RowSealer

__all__ = ["MOVE_POSITIONS", "BatchStatement", "is_plain", "move_params", "moved_rows"]

_EVENT_ID_COLUMNS = ("conversation_key", "event_id")
_INDEX_COLUMNS = ("conversation_key", "event_id", "partition", "offset")
# A batch's position move, as a CTE: fenced on the offsets the batch started from (under the
# batch's FOR UPDATE it cannot miss; it guards a bug), one row per moved partition. Both write
# paths end with it (store.py's statement per table, and the one statement here).
MOVE_POSITIONS: LiteralString = (
    "moved AS (UPDATE {s}.positions AS p SET next_offset = v.next FROM unnest(%s::int[], %s::bigint[], "
    "%s::bigint[]) AS v(partition, next, expected) "
    "WHERE p.partition = v.partition AND p.next_offset = v.expected RETURNING p.partition)"
)


def moved_rows(*, notify: bool) -> LiteralString:
    """What follows :data:`MOVE_POSITIONS`: its rows, with ``notify`` a ``pg_notify`` beside them
    (no extra round trip: Postgres delivers one notification for identical ones of a transaction,
    and only at its commit)."""
    return "SELECT partition, pg_notify(%s, %s) FROM moved" if notify else "SELECT partition FROM moved"


def move_params(expected: Mapping[int, int], new: Mapping[int, int], notify: tuple[str, str] | None) -> list[Any]:
    """The parameters of :data:`MOVE_POSITIONS` and :func:`moved_rows` (``notify``: channel, payload)."""
    parts = sorted(new)
    return [parts, [new[p] for p in parts], [expected[p] for p in parts], *(notify or ())]


def is_plain(out: BatchOutcome) -> bool:
    """Whether ``out`` only inserts rows and upserts states (see the module)."""
    return not (out.redactions or out.erasures or out.withdrawals or out.poisoned or out.skipped or out.held)


class BatchStatement:
    """Composes the one statement of a plain batch for one schema (cached per shape)."""

    def __init__(self, schema: str, *, sealer: RowSealer | None = None) -> None:
        self._schema = schema
        self._sealer = sealer
        self._cache: dict[tuple[int, ...], bytes] = {}

    def compose(
        self,
        out: BatchOutcome,
        *,
        transcript: Sequence[Sequence[Any]],
        index: Sequence[Sequence[Any]],
        expected: Mapping[int, int],
        new: Mapping[int, int],
        notify: tuple[str, str] | None,
    ) -> tuple[bytes, list[Any]]:
        """The statement and its parameters: ``transcript`` and ``index`` rows as the writer and
        the event index make them; it returns one row per moved position (with ``notify``, the
        channel and payload, a ``pg_notify`` beside it, delivered at the commit)."""
        tables: list[tuple[str, Sequence[str], Sequence[Sequence[Any]]]] = [
            ("transcript", TRANSCRIPT_COLUMNS, transcript),
            ("summaries", SUMMARY_COLUMNS, summary_copy_rows(out.summaries, self._sealer)),
            ("event_ids", _EVENT_ID_COLUMNS, out.applied_event_ids),
            ("event_index", _INDEX_COLUMNS, index),
        ]
        params: list[Any] = [value for _, _, rows in tables for row in rows for value in row]
        if out.states:
            params += states_json(list(out.states.values()), self._sealer)
        params += move_params(expected, new, notify)
        shape = (*(len(rows) for _, _, rows in tables), bool(out.states), notify is not None)
        statement = self._cache.get(shape)
        if statement is None:
            statement = self._cache[shape] = self._statement(tables, states=bool(out.states), notify=notify is not None)
        return statement, params

    def _statement(
        self, tables: Sequence[tuple[str, Sequence[str], Sequence[Sequence[Any]]]], *, states: bool, notify: bool
    ) -> bytes:
        s = sql.Identifier(self._schema)
        ctes = []
        for table, columns, rows in tables:
            if not rows:
                continue
            row = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(columns)))
            ctes.append(
                sql.SQL("{n} AS (INSERT INTO {s}.{t} ({c}) VALUES {v})").format(
                    n=sql.Identifier(f"w_{table}"),
                    s=s,
                    t=sql.Identifier(table),
                    c=sql.SQL(", ").join(map(sql.Identifier, columns)),
                    v=sql.SQL(", ").join([row] * len(rows)),
                )
            )
        if states:
            for table, columns in (("conversations", CONVERSATION_COLUMNS), ("windows", WINDOW_COLUMNS)):
                ctes.append(
                    sql.SQL("{n} AS ({u})").format(
                        n=sql.Identifier(f"w_{table}"), u=state_upsert(self._schema, table, columns)
                    )
                )
        ctes.append(sql.SQL(MOVE_POSITIONS).format(s=s))
        tail = sql.SQL(moved_rows(notify=notify))
        return sql.SQL("WITH {ctes} {tail}").format(ctes=sql.SQL(", ").join(ctes), tail=tail).as_bytes(None)
