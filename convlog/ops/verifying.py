"""``convlog verify`` and the comparison behind ``convlog rebuild --verify``.

``verify`` takes, in one snapshot, the live version's positions and its checksums per table and
conversation (all conversations, or a random sample of them), replays the log up to exactly
those positions into a scratch schema — only the chosen conversations' records are applied —
and compares. Any difference is a projection bug or a tampered row: exit code 1, naming the
first differing conversation and row. The scratch schema is dropped at the end. Records an
operator skipped (``convlog dead-letters skip``) are skipped by the replay too: that decision
is not in the log.

A sample is drawn from the live version's conversations, so it cannot find a conversation that
is missing from the live version altogether; ``--all`` can.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from psycopg import AsyncConnection, sql

from convlog.interruptible import INTERRUPTED
from convlog.ops.common import following, progress_bar, say
from convlog.resources import ops_resources
from convlog.settings import Settings
from events.codec import default_codec
from events.errors import ConfigurationError
from events.log import EventLog
from projectors.pg import PgPool
from projectors.store import PostgresProjectionStore, skip_decisions
from projectors.tokens import ENCODINGS, TokenCounter
from projectors.topics import claim_topic
from projectors.versions import (
    CHECKED_TABLES,
    checksums,
    compared_rows,
    index_rows_from,
    json_forms_differ,
    live_version,
    row_text,
    stores_jsonb,
)

Conn = AsyncConnection[Any]


@dataclass(frozen=True, slots=True)
class RowDifference:
    table: str
    conversation_key: str
    row_key: str  # the row's key columns, e.g. ("acme:u:c",5) for transcript seq 5
    expected: str | None  # the row as text in the reference (a fresh replay / the live version)
    found: str | None  # the row as text in the checked version; None: row missing


@dataclass(slots=True)
class Comparison:
    compared: int = 0  # (table, conversation) pairs compared
    differing: list[tuple[str, str]] = field(default_factory=list)
    skipped: int = 0  # conversations that moved on during the check (rebuild --verify)
    first: RowDifference | None = None

    def describe(self, checked: str, reference: str) -> str:
        if not self.differing:
            moved = f"; {self.skipped} conversations moved on meanwhile and were skipped" if self.skipped else ""
            return f"{checked} equals {reference}: {self.compared} table/conversation checksums match{moved}"
        lines = [f"{len(self.differing)} of {self.compared} table/conversation checksums differ"]
        if self.first is not None:
            f = self.first
            lines += [
                f"first difference: conversation {f.conversation_key!r}, table {f.table}, row {f.row_key}",
                f"  {reference}: {f.expected if f.expected is not None else '(no row)'}",
                f"  {checked}: {f.found if f.found is not None else '(no row)'}",
            ]
        return "\n".join(lines)


async def positions(conn: Conn, schema: str) -> dict[int, int]:
    cur = await conn.execute(sql.SQL("SELECT partition, next_offset FROM {}.positions").format(sql.Identifier(schema)))
    return dict(await cur.fetchall())


def uncounted_encodings(settings: Settings) -> tuple[str, ...]:
    """The encodings whose stored counts a comparison leaves out: those ``CONVLOG_TOKEN_ENCODINGS``
    does not name (a replay counts none of them; rows projected before may have them)."""
    counted = settings.counted_encodings()
    return tuple(encoding for encoding in ENCODINGS if encoding not in counted)


async def first_row_difference(
    conn: Conn, table: str, key: str, reference: str, checked: str, *, by_value: bool = False,
    uncounted: Collection[str] = (), index_from: Mapping[int, int] | None = None,
) -> RowDifference:  # fmt: skip
    """The first row, in key order, where ``checked`` differs from ``reference`` for ``key``."""
    order = CHECKED_TABLES[table]
    where, params = compared_rows(table, [key], index_from)

    async def rows(schema: str) -> list[tuple[str, str]]:
        query = sql.SQL("SELECT ROW({o})::text, {r} FROM {s}.{t} AS t {w} ORDER BY {o}")
        text = row_text(by_value=by_value, uncounted=uncounted, table=table)
        cur = await conn.execute(
            query.format(o=sql.SQL(order), r=text, s=sql.Identifier(schema), t=sql.Identifier(table), w=where), params
        )
        return [(k, text) for k, text in await cur.fetchall()]

    expected, found = await rows(reference), await rows(checked)
    for e, f in itertools.zip_longest(expected, found):
        if e != f:
            return RowDifference(table, key, (e or f)[0], e[1] if e else None, f[1] if f else None)
    return RowDifference(table, key, "(rows equal now: the conversation changed during the check)", None, None)


async def compare_settled(conn: Conn, reference: str, checked: str, *, uncounted: Collection[str] = ()) -> Comparison:
    """Compare two versions that may both be moving (the live projector keeps writing).

    In one snapshot: per partition the lower of the two versions' positions is a point both
    have passed; a conversation whose last applied event lies at or beyond it in either version
    may legitimately differ and is skipped. Every other conversation has seen the same events in
    both versions, so its rows must be equal.
    """
    await conn.commit()  # end any implicit transaction: the snapshot below must be a transaction of its own
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        pos_a, pos_b = await positions(conn, reference), await positions(conn, checked)
        floor = {p: min(pos_a.get(p, 0), pos_b.get(p, 0)) for p in pos_a.keys() | pos_b.keys()}
        moved: set[str] = set()
        for schema in (reference, checked):
            cur = await conn.execute(
                sql.SQL(
                    "SELECT c.conversation_key FROM {}.conversations c "
                    "LEFT JOIN unnest(%s::int[], %s::bigint[]) AS f(partition, floor) "
                    "ON f.partition = c.last_partition "
                    "WHERE c.last_offset >= coalesce(f.floor, 0)"
                ).format(sql.Identifier(schema)),
                [list(floor), list(floor.values())],
            )
            moved.update(k for (k,) in await cur.fetchall())
        by_value = await json_forms_differ(conn, reference, checked)  # a version made before json
        index_from = await index_rows_from(conn, reference, checked)
        a = await checksums(conn, reference, by_value=by_value, uncounted=uncounted, index_from=index_from)
        b = await checksums(conn, checked, by_value=by_value, uncounted=uncounted, index_from=index_from)
        pairs = {k for k in a.keys() | b.keys() if k[1] not in moved}
        result = Comparison(compared=len(pairs), skipped=len(moved))
        result.differing = sorted(k for k in pairs if a.get(k) != b.get(k))
        if result.differing:
            table, key = result.differing[0]
            result.first = await first_row_difference(conn, table, key, reference, checked, by_value=by_value,
                                                      uncounted=uncounted, index_from=index_from)  # fmt: skip
    return result


async def replay(
    event_log: EventLog, store: PostgresProjectionStore, until: Mapping[int, int], keys: Collection[str] | None,
    *, batch_size: int, stop: asyncio.Event, read: list[int],
) -> bool:  # fmt: skip
    """Apply the records before ``until`` whose conversation is in ``keys`` (all when None) to
    ``store``; ``read[0]`` counts records read. False if ``stop`` was set first."""
    next_offsets = {p: 0 for p, o in until.items() if o > 0}
    expected = await store.positions(sorted(next_offsets))
    while next_offsets:
        if stop.is_set():
            return False
        chosen = []
        batch = await event_log.read(dict(next_offsets), max_records=batch_size, timeout_s=1.0)
        for r in batch.records:
            if (
                r.partition not in next_offsets
                or r.offset < next_offsets[r.partition]
                or r.offset >= until[r.partition]
            ):
                continue
            read[0] += 1
            if keys is None or r.key.decode("utf-8", "replace") in keys:
                chosen.append(r)
        # The read's positions, not the last record: they move past transaction markers.
        next_offsets = {p: max(o, batch.positions.get(p, o)) for p, o in next_offsets.items()}
        next_offsets = {p: o for p, o in next_offsets.items() if o < until[p]}
        if chosen:
            report = await store.apply(chosen, {r.partition: expected[r.partition] for r in chosen})
            expected.update(report.positions)
    return True


async def verify(settings: Settings, *, sample: int | None, batch_size: int, stop: asyncio.Event) -> int:
    async with ops_resources(settings, name="convlog-verify", read_only=True) as (pool, event_log):
        return await _verify(settings, pool, event_log, sample=sample, batch_size=batch_size, stop=stop)


async def _verify(
    settings: Settings, pool: PgPool, event_log: EventLog, *, sample: int | None, batch_size: int, stop: asyncio.Event
) -> int:
    async with pool.connection() as conn:
        live = await live_version(conn)
        if live is None:
            raise ConfigurationError("no live read-models version to verify (run convlog project first)")
        await claim_topic(pool, live, settings.topic)  # its positions are offsets of one topic
        await conn.commit()
        uncounted = uncounted_encodings(settings)
        until, skips, keys, expected, by_value, index_from = await _live_snapshot(conn, live.schema, sample,
                                                                                 uncounted)  # fmt: skip
    ends = await event_log.end_offsets()
    beyond = sorted(p for p, o in until.items() if o > ends.get(p, 0))
    if beyond:
        raise ConfigurationError(
            f"the live version has read past the end of {settings.topic} on partitions {beyond}; "
            "is CONVLOG_TOPIC the live projector's topic?"
        )
    scratch = f"convlog_verify_{uuid.uuid4().hex[:12]}"
    what = "all conversations" if keys is None else f"a sample of {len(keys)} conversations"
    say(f"verifying {live.schema} ({what}, up to {sum(until.values())} records) against a replay into {scratch}")
    async with pool.connection() as conn:
        ddl = resources.files("projectors").joinpath("sql/read_models.sql").read_text(encoding="utf-8")
        await conn.execute(sql.SQL(ddl).format(schema=sql.Identifier(scratch)))
    try:
        policy, counter = live.policy, TokenCounter(encodings=settings.counted_encodings())  # the version's own
        store = PostgresProjectionStore(pool, schema=scratch, codec=default_codec(), counter=counter,
                                policy=policy, max_event_bytes=settings.max_event_bytes, skips=skips)  # fmt: skip
        read = [0]
        bar = progress_bar(sum(until.values()), "replay")

        async def done() -> int:
            return read[0]

        async with following(bar, done):
            finished = await replay(event_log, store, until, None if keys is None else frozenset(keys),
                                batch_size=batch_size, stop=stop, read=read)  # fmt: skip
        if not finished:
            say("verify interrupted; nothing was changed")
            return INTERRUPTED
        async with pool.connection() as conn:
            found = await checksums(conn, scratch, keys, by_value=by_value, uncounted=uncounted, index_from=index_from)
            result = Comparison(compared=len(expected.keys() | found.keys()))
            result.differing = sorted(k for k in expected.keys() | found.keys() if expected.get(k) != found.get(k))
            if result.differing:
                table, key = result.differing[0]
                result.first = await first_row_difference(conn, table, key, scratch, live.schema, by_value=by_value,
                                                          uncounted=uncounted, index_from=index_from)  # fmt: skip
        say(result.describe(checked=live.schema, reference="replay"))
        return 1 if result.differing else 0
    finally:
        async with pool.connection() as conn:
            await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(scratch)))


async def _live_snapshot(
    conn: Conn, schema: str, sample: int | None, uncounted: Collection[str]
) -> tuple[
    dict[int, int], dict[tuple[int, int], str], list[str] | None, dict[tuple[str, str], str], bool,
    dict[int, int] | None,
]:  # fmt: skip
    """The live version's positions, skip decisions, sampled keys (None: all) and checksums,
    from one snapshot, whether they compare JSON by value (the live version stores jsonb:
    the replay's schema is made from today's read_models.sql, JSON as json), and where its
    event index starts (the replay's indexes every record it applies)."""
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        until = await positions(conn, schema)
        skips = await skip_decisions(conn, schema)  # operators' decisions the log does not hold
        keys: list[str] | None = None
        if sample is not None:
            cur = await conn.execute(
                sql.SQL("SELECT conversation_key FROM {}.conversations ORDER BY random() LIMIT %s").format(
                    sql.Identifier(schema)
                ),
                [sample],
            )
            keys = [k for (k,) in await cur.fetchall()]
        by_value = await stores_jsonb(conn, schema)
        index_from = await index_rows_from(conn, schema)
        expected = await checksums(conn, schema, keys, by_value=by_value, uncounted=uncounted, index_from=index_from)
    return until, skips, keys, expected, by_value, index_from
