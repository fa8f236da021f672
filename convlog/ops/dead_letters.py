"""``convlog dead-letters``: inspect parked records, release them after a fix, or skip them.

Releasing and skipping go through :meth:`PostgresProjectionStore.resolve`, the projector's own code:
the held records of the conversation are then applied in log order in the same transaction.
"""

from __future__ import annotations

import json

from convlog.resources import keyed_codec
from convlog.settings import Settings
from events.codec import default_codec
from events.errors import DecodeError
from events.sealing.ports import KeyRing
from pgstore.dead_letters import DeadLetterSummary, dead_letter_row, dead_letter_summaries
from pgstore.pool import PgPool, pg_errors
from pgstore.store import PostgresProjectionStore
from projectors.errors import ProjectionError
from projectors.ports import BatchReport
from projectors.rows import record_from_row
from projectors.tokens import TokenCounter
from projectors.window import WindowPolicy
from query_api.events_json import events_json

_HEX_LINE = 32  # bytes per line of a hex dump


async def list_dead_letters(pool: PgPool, schema: str, *, status: str | None) -> list[DeadLetterSummary]:
    with pg_errors("list the dead letters"):
        return await dead_letter_summaries(pool, schema, status=status)


def render_list(letters: list[DeadLetterSummary]) -> str:
    if not letters:
        return "no dead letters"
    lines = [f"{'id':>6}  {'status':<8}  {'coordinates':<16}  {'held':>5}  {'conversation':<40}  error"]
    for d in letters:
        where = f"p{d.partition}@{d.offset}"
        error = d.error if len(d.error) <= 80 else d.error[:79] + "…"
        key = d.conversation_key or "(undecodable key)"
        lines.append(f"{d.id:>6}  {d.status:<8}  {where:<16}  {d.held:>5}  {key:<40}  {d.error_code}: {error}")
    return "\n".join(lines)


async def show_dead_letter(pool: PgPool, schema: str, dead_letter_id: int) -> str:
    """Everything about one dead letter: coordinates, error, resolution, the record decoded
    where this build can decode it, as hex where it cannot."""
    with pg_errors(f"read dead letter {dead_letter_id}"):
        row = await dead_letter_row(pool, schema, dead_letter_id)
    if row is None:
        raise ProjectionError(f"no dead letter with id {dead_letter_id}")
    record = record_from_row(row)
    lines = [
        f"dead letter {row['id']}: {row['status']}",
        f"  coordinates   partition {record.partition}, offset {record.offset}",
        f"  conversation  {row['conversation_key'] or '(undecodable key)'}",
        f"  record key    {_text_or_hex(record.key)}",
        f"  headers       {', '.join(f'{n}={_text_or_hex(v)}' for n, v in record.headers) or '(none)'}",
        f"  log time      {record.timestamp.isoformat()}",
        f"  parked at     {row['created_at'].isoformat()}",
        f"  error         {row['error_code']}: {row['error']}",
        f"  held behind   {row['held']} record(s) of the same conversation",
    ]
    if row["status"] != "parked":
        lines.append(f"  resolved      {row['resolved_at'].isoformat()} ({row['resolution'] or 'no reason given'})")
    try:
        event = default_codec().decode(record.value)
    except DecodeError as e:
        lines += [f"  value         not decodable by this build ({e}); {len(record.value)} bytes:", _hex(record.value)]
    else:
        lines += [
            "  event (decoded by this build):",
            json.dumps(events_json([(record, event)])[0], indent=2, ensure_ascii=False),
        ]
    return "\n".join(lines)


def _text_or_hex(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "hex " + data.hex()
    return text if text.isprintable() else "hex " + data.hex()


def _hex(data: bytes) -> str:
    lines = []
    for i in range(0, len(data), _HEX_LINE):
        chunk = data[i : i + _HEX_LINE]
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"    {i:08x}  {chunk.hex(' '):<{_HEX_LINE * 3}}  {ascii_}")
    return "\n".join(lines)


def store_for(
    pool: PgPool, schema: str, settings: Settings, *, policy: WindowPolicy, keys: KeyRing | None = None
) -> PostgresProjectionStore:
    """The store the projector itself uses (same codec, size limit and ``policy``, the window
    policy of the version ``schema`` holds)."""
    return PostgresProjectionStore(
        pool,
        schema=schema,
        codec=keyed_codec(keys),
        counter=TokenCounter(encodings=settings.counted_encodings()),
        policy=policy,
        max_event_bytes=settings.max_event_bytes,
        keys=keys,
    )


async def resolve(store: PostgresProjectionStore, dead_letter_id: int, *, skip_reason: str | None) -> BatchReport:
    if skip_reason is not None and not skip_reason.strip():
        raise ProjectionError("a skip needs a reason (--reason); it is recorded with the dead letter")
    with pg_errors(f"resolve dead letter {dead_letter_id}"):
        return await store.resolve(dead_letter_id, skip_reason=skip_reason)


def describe_report(report: BatchReport, *, verb: str, dead_letter_id: int) -> str:
    text = f"dead letter {dead_letter_id} {verb}: {report.applied} event(s) applied, {report.duplicates} duplicate(s)"
    if report.dead_lettered or report.held:
        text += (
            f"; the conversation is parked again ({report.dead_lettered} new dead letter(s), "
            f"{report.held} record(s) held)"
        )
    return text
