"""``convlog export``: an audit export of transcripts, one JSON object per message (JSON Lines).

Streamed: one server-side cursor in a read-only, repeatable-read transaction (a consistent
snapshot), fetched in pages of ``page_size`` rows and written as they come, so memory stays
constant whatever the size of the export. Every line carries the message's event coordinates
(partition, offset, event id): the log record it came from.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, TextIO

from tqdm import tqdm

from events.sealing.ports import KeyRing
from pgstore.errors import driver_errors
from pgstore.pool import PgPool
from pgstore.transcripts import ExportFilter, transcript_pages

__all__ = ["ExportFilter", "export_transcripts", "parse_timestamp"]


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
    keys: KeyRing | None = None,
    keep_sealed: bool = False,
) -> int:
    """Write the matching messages to ``out``, ordered by conversation and sequence number;
    returns how many were written. Sealed content is opened with ``keys``, or with
    ``keep_sealed`` written sealed (an archive an erase shreds too)."""
    written = 0
    with driver_errors("export the transcripts"):
        pages = transcript_pages(pool, schema, where, page_size=page_size, keys=keys, keep_sealed=keep_sealed)
        async with pages as found:
            bar = tqdm(total=found.total, unit="msg", unit_scale=True, desc="export", disable=not progress, leave=False)
            try:
                async for rows in found.pages:
                    out.write("".join(_line(row) + "\n" for row in rows))
                    written += len(rows)
                    bar.update(len(rows))
            finally:
                bar.close()
    out.flush()
    return written
