"""SQL fragments over the read models (pgstore/sql/read_models.sql) that several readers
share, each written once; none restates a rule the fold decides. ``{s}`` is the version's schema, composed with
``psycopg.sql`` by the caller."""

from __future__ import annotations

import functools
from typing import LiteralString

from psycopg import sql


@functools.lru_cache(maxsize=1024)
def in_schema(schema: str, text: LiteralString) -> bytes:
    """``text`` with ``{s}`` as ``schema``, composed once, to the bytes psycopg sends: formatting
    parses the template again on every call, which was a tenth of a small batch's CPU, and a
    composed statement is walked and encoded again on every execute (~75 calls a batch)."""
    return sql.SQL(text).format(s=sql.Identifier(schema)).as_bytes(None)


# For summary row ``x``: the first transcript row of the message it covers through, ``covered``
# (its ``seq`` and ``turn``), by transcript_by_message_id.
SUMMARY_COVERED = (
    "JOIN LATERAL (SELECT t.seq, t.turn FROM {s}.transcript t WHERE t.conversation_key = x.conversation_key "
    "AND t.message_id = x.covers_through_message_id ORDER BY t.seq LIMIT 1) covered ON true "
)

# Whether summary row ``x`` keeps its text: in clear or sealed (a withdrawal or an erasure sets
# both NULL; projectors/sealed_rows.py). Presence only: no reader computes on the text itself.
KEPT_TEXT = "(x.text IS NOT NULL OR x.sealed IS NOT NULL) "

# For conversation row ``c``: its window ``w`` and its current summary ``m``, the one the fold
# chose (``c.summary_seq``; projectors/context_range.py): joined by key, no rule restated.
WINDOW_AND_CURRENT_SUMMARY = (
    "LEFT JOIN {s}.windows w ON w.conversation_key = c.conversation_key "
    "LEFT JOIN {s}.summaries m ON m.conversation_key = c.conversation_key AND m.seq = c.summary_seq "
)
