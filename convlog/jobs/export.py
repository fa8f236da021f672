"""``convlog export``: an audit export of transcripts, one JSON object per message (JSON Lines).

Streamed: one server-side cursor in a read-only, repeatable-read transaction (a consistent
snapshot), fetched in pages of ``page_size`` rows and written as they come, so memory stays
constant whatever the size of the export. Every line carries the message's event coordinates
(partition, offset, event id): the log record it came from.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from tqdm import tqdm

from projectors.pg import PgPool, convert_pg_error

# Erased and redacted content is NULL in the read models already; the markers say why.
_COLUMNS = sql.SQL(
    't.conversation_key, c.tenant_id, c.user_id, c.conversation_id, t.seq, t.partition, t."offset", t.event_id, '
    "t.message_id, t.role, t.content, t.name, t.tool_calls, t.tool_call_id, t.reasoning_content, "
    "t.thinking_duration_ms, t.finish_reason, t.model, t.usage, t.metadata, t.occurred_at, t.epoch, t.turn, t.flag, "
    "t.redacted_at, t.redaction_reason, t.erased_at, t.blocks, t.provider, t.api, t.is_error"
)
_WHERE = sql.SQL(
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


def parse_timestamp(text: str) -> datetime:
    """ISO 8601 date or date-time; without a zone it is UTC (argparse ``type=``)."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not an ISO 8601 timestamp: {text!r}") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _json_default(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _line(row: dict[str, Any]) -> str:
    row["coordinates"] = {"partition": row.pop("partition"), "offset": row.pop("offset")}
    return json.dumps(row, ensure_ascii=False, default=_json_default, separators=(",", ":"))


async def export_transcripts(
    pool: PgPool,
    schema: str,
    where: ExportFilter,
    out: TextIO,
    *,
    page_size: int = 2000,
    progress: bool = True,
) -> int:
    """Write the matching messages to ``out``, ordered by conversation and sequence number;
    returns how many were written."""
    s = sql.Identifier(schema)
    source = sql.SQL("FROM {s}.conversations c JOIN {s}.transcript t USING (conversation_key) WHERE {w}").format(
        s=s, w=_WHERE
    )
    written = 0
    try:
        async with pool.connection() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            total_row = await (await conn.execute(sql.SQL("SELECT count(*) ") + source, where.params())).fetchone()
            total = int(total_row[0]) if total_row else 0
            bar = tqdm(total=total, unit="msg", unit_scale=True, desc="export", disable=not progress, leave=False)
            try:
                async with conn.cursor(name="convlog_export", row_factory=dict_row) as cur:
                    cur.itersize = page_size
                    query = (
                        sql.SQL("SELECT {c} ").format(c=_COLUMNS)
                        + source
                        + sql.SQL(" ORDER BY t.conversation_key, t.seq")
                    )
                    await cur.execute(query, where.params())
                    while rows := await cur.fetchmany(page_size):
                        out.write("".join(_line(row) + "\n" for row in rows))
                        written += len(rows)
                        bar.update(len(rows))
            finally:
                bar.close()
    except psycopg.Error as e:
        raise convert_pg_error(e, action="export the transcripts") from e
    out.flush()
    return written
