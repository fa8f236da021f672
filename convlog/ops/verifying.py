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

from convlog.interruptible import INTERRUPTED
from convlog.ops.common import following, progress_bar, say
from convlog.resources import keyed_codec, opened_keys, ops_resources
from convlog.settings import Settings
from events.errors import ConfigurationError
from events.log import EventLog
from events.sealing.ports import KeyRing
from pgstore import registry
from pgstore.checks import VersionReads, reads, snapshot
from pgstore.pool import PgPool
from pgstore.schemas import create_read_models_schema, drop_schema
from pgstore.store import PostgresProjectionStore
from pgstore.topics import claim_topic
from projectors.tokens import ENCODINGS, TokenCounter
from projectors.window import WindowPolicy


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


def uncounted_encodings(settings: Settings) -> tuple[str, ...]:
    """The encodings whose stored counts a comparison leaves out: those ``CONVLOG_TOKEN_ENCODINGS``
    does not name (a replay counts none of them; rows projected before may have them)."""
    counted = settings.counted_encodings()
    return tuple(encoding for encoding in ENCODINGS if encoding not in counted)


async def first_row_difference(
    found: VersionReads,
    table: str,
    key: str,
    reference: str,
    checked: str,
    *,
    by_value: bool = False,
    uncounted: Collection[str] = (),
    index_from: Mapping[int, int] | None = None,
) -> RowDifference:
    """The first row, in key order, where ``checked`` differs from ``reference`` for ``key``."""

    async def rows(schema: str) -> list[tuple[str, str]]:
        return await found.rows_as_text(
            schema, table, key, by_value=by_value, uncounted=uncounted, index_from=index_from
        )

    expected, got = await rows(reference), await rows(checked)
    for e, f in itertools.zip_longest(expected, got):
        if e != f:
            return RowDifference(table, key, (e or f)[0], e[1] if e else None, f[1] if f else None)
    return RowDifference(table, key, "(rows equal now: the conversation changed during the check)", None, None)


async def compare_settled(pool: PgPool, reference: str, checked: str, *, uncounted: Collection[str] = ()) -> Comparison:
    """Compare two versions that may both be moving (the live projector keeps writing).

    In one snapshot: per partition the lower of the two versions' positions is a point both
    have passed; a conversation whose last applied event lies at or beyond it in either version
    may legitimately differ and is skipped. Every other conversation has seen the same events in
    both versions, so its rows must be equal.
    """
    async with snapshot(pool) as found:
        pos_a, pos_b = await found.positions(reference), await found.positions(checked)
        floor = {p: min(pos_a.get(p, 0), pos_b.get(p, 0)) for p in pos_a.keys() | pos_b.keys()}
        moved = await found.moved_since(reference, floor) | await found.moved_since(checked, floor)
        by_value = await found.json_forms_differ(reference, checked)  # a version made before json
        index_from = await found.index_rows_from(reference, checked)
        a = await found.checksums(reference, by_value=by_value, uncounted=uncounted, index_from=index_from)
        b = await found.checksums(checked, by_value=by_value, uncounted=uncounted, index_from=index_from)
        pairs = {k for k in a.keys() | b.keys() if k[1] not in moved}
        result = Comparison(compared=len(pairs), skipped=len(moved))
        result.differing = sorted(k for k in pairs if a.get(k) != b.get(k))
        if result.differing:
            table, key = result.differing[0]
            result.first = await first_row_difference(
                found, table, key, reference, checked, by_value=by_value, uncounted=uncounted, index_from=index_from
            )
    return result


async def replay(
    event_log: EventLog,
    store: PostgresProjectionStore,
    until: Mapping[int, int],
    keys: Collection[str] | None,
    *,
    batch_size: int,
    stop: asyncio.Event,
    read: list[int],
) -> bool:
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
    async with (
        ops_resources(settings, name="convlog-verify", read_only=True) as (pool, event_log),
        opened_keys(settings, read_only=True) as key_ring,
    ):
        return await _verify(
            settings, pool, event_log, sample=sample, batch_size=batch_size, stop=stop, key_ring=key_ring
        )


async def _verify(
    settings: Settings,
    pool: PgPool,
    event_log: EventLog,
    *,
    sample: int | None,
    batch_size: int,
    stop: asyncio.Event,
    key_ring: KeyRing | None = None,
) -> int:
    live = await registry.live(pool)
    if live is None:
        raise ConfigurationError("no live read-models version to verify (run convlog project first)")
    await claim_topic(pool, live, settings.topic)  # its positions are offsets of one topic
    uncounted = uncounted_encodings(settings)
    until, skips, keys, expected, by_value, index_from = await _live_snapshot(pool, live.schema, sample, uncounted)
    await _refuse_positions_beyond_the_log(event_log, until, topic=settings.topic)
    scratch = f"convlog_verify_{uuid.uuid4().hex[:12]}"
    what = "all conversations" if keys is None else f"a sample of {len(keys)} conversations"
    say(f"verifying {live.schema} ({what}, up to {sum(until.values())} records) against a replay into {scratch}")
    await create_read_models_schema(pool, scratch)
    try:
        store = _replay_store(settings, pool, scratch, policy=live.policy, skips=skips, key_ring=key_ring)
        read = [0]
        bar = progress_bar(sum(until.values()), "replay")

        async def done() -> int:
            return read[0]

        async with following(bar, done):
            finished = await replay(
                event_log,
                store,
                until,
                None if keys is None else frozenset(keys),
                batch_size=batch_size,
                stop=stop,
                read=read,
            )
        if not finished:
            say("verify interrupted; nothing was changed")
            return INTERRUPTED
        async with reads(pool) as now:
            found = await now.checksums(scratch, keys, by_value=by_value, uncounted=uncounted, index_from=index_from)
            result = Comparison(compared=len(expected.keys() | found.keys()))
            result.differing = sorted(k for k in expected.keys() | found.keys() if expected.get(k) != found.get(k))
            if result.differing:
                table, key = result.differing[0]
                result.first = await first_row_difference(
                    now, table, key, scratch, live.schema, by_value=by_value, uncounted=uncounted, index_from=index_from
                )
        say(result.describe(checked=live.schema, reference="replay"))
        return 1 if result.differing else 0
    finally:
        await drop_schema(pool, scratch)


def _replay_store(
    settings: Settings,
    pool: PgPool,
    scratch: str,
    *,
    policy: WindowPolicy,
    skips: Mapping[tuple[int, int], str],
    key_ring: KeyRing | None,
) -> PostgresProjectionStore:
    """The store the replay writes ``scratch`` with: the live version's own policy and skips."""
    return PostgresProjectionStore(
        pool,
        schema=scratch,
        codec=keyed_codec(key_ring),
        counter=TokenCounter(encodings=settings.counted_encodings()),
        policy=policy,
        max_event_bytes=settings.max_event_bytes,
        skips=skips,
        keys=key_ring,
    )


async def _refuse_positions_beyond_the_log(event_log: EventLog, until: Mapping[int, int], *, topic: str) -> None:
    """A live version whose positions pass the log's end was built from another topic."""
    ends = await event_log.end_offsets()
    beyond = sorted(p for p, o in until.items() if o > ends.get(p, 0))
    if beyond:
        raise ConfigurationError(
            f"the live version has read past the end of {topic} on partitions {beyond}; "
            "is CONVLOG_TOPIC the live projector's topic?"
        )


async def _live_snapshot(
    pool: PgPool, schema: str, sample: int | None, uncounted: Collection[str]
) -> tuple[
    dict[int, int],
    dict[tuple[int, int], str],
    list[str] | None,
    dict[tuple[str, str], str],
    bool,
    dict[int, int] | None,
]:
    """The live version's positions, skip decisions, sampled keys (None: all) and checksums,
    from one snapshot, whether they compare JSON by value (the live version stores jsonb:
    the replay's schema is made from today's read_models.sql, JSON as json), and where its
    event index starts (the replay's indexes every record it applies)."""
    async with snapshot(pool) as found:
        until = await found.positions(schema)
        skips = await found.skip_decisions(schema)  # operators' decisions the log does not hold
        keys = None if sample is None else await found.sample_keys(schema, sample)
        by_value = await found.stores_jsonb(schema)
        index_from = await found.index_rows_from(schema)
        expected = await found.checksums(schema, keys, by_value=by_value, uncounted=uncounted, index_from=index_from)
    return until, skips, keys, expected, by_value, index_from
