"""The conversations and transcripts of a read-models version as the operators' jobs read
them: where a conversation starts, which are idle, and the audit export's snapshot."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.rows import dict_row

from events.sealing.ports import KeyRing
from pgstore.pool import PgPool
from pgstore.sealed import open_dict_row
from projectors.sealed_rows import RowSealer

# Erased and redacted content is NULL in the read models already; the export's markers say why.
_EXPORTED = sql.SQL(
    't.conversation_key, c.tenant_id, c.user_id, c.conversation_id, t.seq, t.partition, t."offset", t.event_id, '
    "t.message_id, t.role, t.content, t.name, t.tool_calls, t.tool_call_id, t.reasoning_content, "
    "t.thinking_duration_ms, t.finish_reason, t.model, t.usage, t.metadata, t.occurred_at, t.epoch, t.turn, t.flag, "
    "t.redacted_at, t.redaction_reason, t.erased_at, t.blocks, t.provider, t.api, t.is_error, t.key_id, t.sealed"
)
_FILTERED = sql.SQL(
    "(%(tenant)s::text IS NULL OR c.tenant_id = %(tenant)s) AND (%(user)s::text IS NULL OR c.user_id = %(user)s) "
    "AND (%(since)s::timestamptz IS NULL OR t.occurred_at >= %(since)s) "
    "AND (%(until)s::timestamptz IS NULL OR t.occurred_at < %(until)s) "
    "AND (%(keys)s::text[] IS NULL OR t.conversation_key = ANY(%(keys)s))"
)


@dataclass(frozen=True, slots=True)
class ExportFilter:
    tenant: str | None  # None: every tenant (retention archives)
    user: str | None = None
    since: datetime | None = None  # inclusive, on the message's occurred_at
    until: datetime | None = None  # exclusive
    conversation_keys: Sequence[str] | None = None  # only these conversations (retention archives)

    def params(self) -> dict[str, Any]:
        keys = None if self.conversation_keys is None else list(self.conversation_keys)
        return {"tenant": self.tenant, "user": self.user, "since": self.since, "until": self.until, "keys": keys}


@dataclass(frozen=True, slots=True)
class TranscriptPages:
    total: int  # messages matching, in the snapshot
    pages: AsyncIterator[list[dict[str, Any]]]  # the exported columns by name, by conversation and seq


async def first_offset(pool: PgPool, schema: str, key: str) -> int | None:
    """The conversation's first offset on its partition (None: unknown to ``schema``)."""
    query = sql.SQL("SELECT first_offset FROM {}.conversations WHERE conversation_key = %s").format(
        sql.Identifier(schema)
    )
    async with pool.connection() as conn:
        row = await (await conn.execute(query, [key])).fetchone()
    return None if row is None else int(row[0])


async def idle_conversations(pool: PgPool, schema: str, *, cutoff: datetime) -> list[tuple[str, datetime, int, int]]:
    """(key, last event at, its partition, its offset) of each conversation whose last event
    is before ``cutoff`` with something left to erase (never erased, or events since), by key."""
    query = sql.SQL(
        "SELECT conversation_key, last_event_at, last_partition, last_offset FROM {}.conversations "
        "WHERE last_event_at < %s AND (erased_at IS NULL OR erased_at < last_event_at) ORDER BY conversation_key"
    ).format(sql.Identifier(schema))
    async with pool.connection() as conn:
        rows = await (await conn.execute(query, [cutoff])).fetchall()
    return [(str(k), t, int(p), int(o)) for k, t, p, o in rows]


@contextlib.asynccontextmanager
async def transcript_pages(
    pool: PgPool,
    schema: str,
    where: ExportFilter,
    *,
    page_size: int,
    keys: KeyRing | None = None,
    keep_sealed: bool = False,
) -> AsyncIterator[TranscriptPages]:
    """The matching messages in one read-only, repeatable-read snapshot, fetched through one
    server-side cursor in pages of ``page_size`` rows while the block reads them (memory stays
    constant whatever the size). Sealed rows are opened with ``keys`` (pgstore/sealed.py): the
    pages hold the exported columns only, never the seal (a destroyed key: an erased row).
    ``keep_sealed`` (retention's archives): sealed rows stay sealed — ``key_id`` and ``sealed``
    (base64) instead of their content — so that erasing the subject later shreds the archive too."""
    sealer = None if keys is None else RowSealer(keys)
    s = sql.Identifier(schema)
    source = sql.SQL("FROM {s}.conversations c JOIN {s}.transcript t USING (conversation_key) WHERE {w}").format(
        s=s, w=_FILTERED
    )
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        total_row = await (await conn.execute(sql.SQL("SELECT count(*) ") + source, where.params())).fetchone()
        async with conn.cursor(name="convlog_export", row_factory=dict_row) as cur:
            cur.itersize = page_size
            query = sql.SQL("SELECT {c} ").format(c=_EXPORTED) + source + sql.SQL(" ORDER BY t.conversation_key, t.seq")

            async def pages() -> AsyncIterator[list[dict[str, Any]]]:
                await cur.execute(query, where.params())
                while rows := await cur.fetchmany(page_size):
                    yield [_as_sealed(r) if keep_sealed else _opened(sealer, r) for r in rows]

            yield TranscriptPages(int(total_row[0]) if total_row else 0, pages())


def _as_sealed(row: dict[str, Any]) -> dict[str, Any]:
    if row["sealed"] is None:
        del row["key_id"], row["sealed"]
    else:
        row["sealed"] = base64.b64encode(bytes(row["sealed"])).decode("ascii")
    return row


def _opened(sealer: RowSealer | None, row: dict[str, Any]) -> dict[str, Any]:
    opened = open_dict_row(sealer, "transcript", row)
    del opened["key_id"], opened["sealed"]
    return opened
