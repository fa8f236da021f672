"""Sealed read-model rows in Postgres (issue 25, projectors/sealed_rows.py): opening what the
readers select, and sealing again what a redaction leaves of a sealed row.

Every reader of content columns selects a row's ``sealed`` and ``key_id`` beside them and
passes the row through :func:`open_dict_row` (or opens the values itself where rows are tuples):
a plain row (``key_id`` NULL) is returned as it is; a sealed one gets its content columns from
the seal, parsed as the driver parses the json and jsonb columns, so the conversions after it
run unchanged. A destroyed key reads as erased: content NULL, ``metadata`` ``{}`` and
``erased_at`` the key's destruction (when the erase event applied already, its own time stays);
an unknown key raises :class:`~events.errors.UnknownKeyError` for that read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, LiteralString

from psycopg import AsyncCursor
from psycopg.rows import dict_row

from events.errors import UnknownKeyError
from pgstore.read_sql import in_schema
from projectors.changes import CLEARS_TO_EMPTY, REDACTION_CLEARS, Redaction
from projectors.sealed_rows import CONVERSATION_ROW, EMPTY_WHEN_SEALED, SEALED_COLUMNS, Opened, RowSealer

__all__ = ["JSON_COLUMNS", "open_dict_row", "open_sealed", "reseal_redacted"]

# The content columns of json or jsonb type: the driver hands them over parsed (json.loads).
JSON_COLUMNS = frozenset({"content", "tool_calls", "metadata", "blocks"})

_SEALED_OF: LiteralString = (
    "SELECT seq, event_id, key_id, sealed FROM {s}.transcript "
    "WHERE conversation_key = %s AND message_id = %s AND seq < %s AND sealed IS NOT NULL"
)
_RESEAL: LiteralString = "UPDATE {s}.transcript SET sealed = %s WHERE conversation_key = %s AND seq = %s"


def open_sealed(
    sealer: RowSealer | None, table: str, conversation_key: str, *, event_id: str | None, key_id: str, sealed: Any
) -> Opened:
    """The content of a sealed row (``event_id`` None: a conversation's row)."""
    if sealer is None:
        raise UnknownKeyError(
            f"a {table} row of {conversation_key} is sealed under {key_id!r}, but this reader has no key ring"
        )
    at = CONVERSATION_ROW if event_id is None else event_id
    return sealer.open(table, conversation_key, at, key_id, None if sealed is None else bytes(sealed))


def open_dict_row(
    sealer: RowSealer | None, table: str, row: dict[str, Any], *, conversation_key: str | None = None
) -> dict[str, Any]:
    """``row`` (by column name, with ``key_id`` and ``sealed``) with its content columns opened,
    in place; ``conversation_key`` when the row does not select it."""
    key_id = row.get("key_id")
    if key_id is None:
        return row
    key = conversation_key if conversation_key is not None else row["conversation_key"]
    opened = open_sealed(sealer, table, key, event_id=row.get("event_id"), key_id=key_id, sealed=row.get("sealed"))
    for column in SEALED_COLUMNS[table]:
        text = opened.values.get(column)
        row[column] = json.loads(text) if text is not None and column in JSON_COLUMNS else text
    for column in EMPTY_WHEN_SEALED:  # cleared (redacted, erased, a destroyed key): {} as in a plain row
        if column in row and row[column] is None:
            row[column] = {}
    if opened.erased_at is not None and "erased_at" in row and row["erased_at"] is None:
        row["erased_at"] = opened.erased_at
    return row


async def reseal_redacted(
    cur: AsyncCursor[Any], schema: str, sealer: RowSealer | None, redactions: Sequence[Redaction]
) -> None:
    """Seal again, without what a redaction clears, the sealed rows ``redactions`` name (the
    UPDATE that cleared their clear columns ran already). Deterministic like any row seal, so a
    rebuild writes the same bytes."""
    dropped = {*REDACTION_CLEARS, *CLEARS_TO_EMPTY}
    async with cur.connection.cursor(row_factory=dict_row) as read:
        updates = []
        for r in redactions:
            await read.execute(in_schema(schema, _SEALED_OF), (r.conversation_key, r.message_id, r.before_seq))
            for row in await read.fetchall():
                key, event_id, key_id = r.conversation_key, row["event_id"], row["key_id"]
                opened = open_sealed(sealer, "transcript", key, event_id=event_id, key_id=key_id, sealed=row["sealed"])
                kept = {c: opened.values.get(c) for c in SEALED_COLUMNS["transcript"] if c not in dropped}
                assert sealer is not None  # open_sealed raised otherwise
                updates.append((sealer.seal("transcript", key, event_id, key_id, kept), key, row["seq"]))
        if updates:
            await read.executemany(in_schema(schema, _RESEAL), updates)
