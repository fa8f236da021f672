"""SQL fragments over the read models (projectors/sql/read_models.sql) that several readers
share: each rule about summaries is written once. ``{s}`` is the version's schema, composed with
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


# The seq of the message that summary row ``x`` covers through.
SUMMARY_COVERED_SEQ = (
    "(SELECT min(t.seq) FROM {s}.transcript t "
    "WHERE t.conversation_key = x.conversation_key AND t.message_id = x.covers_through_message_id)"
)

# For conversation row ``c``: its window ``w`` and its current summary ``m`` (``summary_id``,
# ``text``, ``covers``: the seq it covers through) — the current epoch's latest summary whose
# text was neither withdrawn nor erased.
WINDOW_AND_CURRENT_SUMMARY = (
    "LEFT JOIN {s}.windows w ON w.conversation_key = c.conversation_key "
    "LEFT JOIN LATERAL (SELECT x.summary_id, x.text, " + SUMMARY_COVERED_SEQ + " AS covers "
    "FROM {s}.summaries x WHERE x.conversation_key = c.conversation_key AND x.epoch = c.epoch "
    "AND x.text IS NOT NULL ORDER BY x.seq DESC LIMIT 1) m ON true "
)
