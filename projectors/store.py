"""The Postgres side of a projection version: apply a batch of records exactly once.

One transaction per batch: lock and check the positions (a consumer that lost its partitions
finds another value and writes nothing), prefetch what the fold needs, fold, write rows with
COPY, and move the positions. A crash anywhere leaves either the whole batch or none of it.

When Postgres refuses the data of a row (:class:`~projectors.errors.RecordRefusedError`) the
batch is written again in a new transaction, the record behind the refused row found by
bisection (:mod:`projectors.isolation`), dead-lettered and its conversation parked, and the
rest of the batch goes on. A batch Postgres accepts is written once, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, LiteralString

import psycopg
import structlog
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from events.codec import EventCodec
from events.log import LogRecord
from projectors.errors import PositionConflictError, ProjectionError, RecordRefusedError
from projectors.event_index import ensure_event_index, write_event_index
from projectors.fold import BatchInputs, BatchOutcome, Decoded, decode_batch, fold_batch, lookups
from projectors.isolation import as_refused, first_refused
from projectors.pg import convert_pg_error
from projectors.ports import UNREADABLE_BATCH, BatchReport
from projectors.positions_watch import positions_channel, positions_payload
from projectors.prepare import AheadCounter, PreparedBatch, prepare_batch
from projectors.read_sql import SUMMARY_COVERED_SEQ
from projectors.rows import TokenCounting, record_from_row, state_from_row
from projectors.state import ConversationState, MessageAt, SummaryAt
from projectors.window import WindowPolicy
from projectors.writes import DEAD_LETTER_INSERT, BatchWriter

Cursor = AsyncCursor[Any]
log = structlog.get_logger(__name__)

# What the fold needs to know of the stored rows (projectors.state.History), per batch.
_APPLIED_EVENT_IDS: LiteralString = (
    "SELECT DISTINCT t.conversation_key, t.event_id FROM unnest(%s::text[], %s::text[]) AS v(k, id) "
    "JOIN {s}.event_ids t ON t.conversation_key = v.k AND t.event_id = v.id"
)
_MESSAGES_AT: LiteralString = (
    "SELECT t.conversation_key, t.message_id, t.seq, t.epoch FROM unnest(%s::text[], %s::text[]) AS v(k, id) "
    "JOIN {s}.transcript t ON t.conversation_key = v.k AND t.message_id = v.id ORDER BY t.seq"
)
_KEPT_SUMMARIES: LiteralString = (
    "SELECT x.conversation_key, x.seq, x.epoch, " + SUMMARY_COVERED_SEQ + " AS covers "
    "FROM {s}.summaries x WHERE x.conversation_key = ANY(%s) AND x.text IS NOT NULL"
)
_REDACTED_MESSAGES: LiteralString = (  # the partial index transcript_redacted
    "SELECT conversation_key, message_id, seq, epoch "
    "FROM {s}.transcript WHERE conversation_key = ANY(%s) AND redacted_at IS NOT NULL"
)


class PostgresProjectionStore:
    """The :class:`~projectors.ports.ProjectionStore` of one Postgres schema (one projection version)."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        schema: str,
        codec: EventCodec,
        counter: TokenCounting,
        policy: WindowPolicy,
        max_event_bytes: int,
        fail_fast: bool = False,
        skips: Mapping[tuple[int, int], str] | None = None,
        notify_positions: bool = False,
    ) -> None:
        """``skips``: (partition, offset) -> reason of poison records an operator skipped in the
        version this one rebuilds or verifies (:func:`skip_decisions`): skipped here too.
        ``notify_positions``: each batch's transaction also ``NOTIFY``s its new positions on the
        channel :func:`positions_channel` names, delivered at its commit (API processes of
        other hosts wake their read-your-writes waits on it); the live projector sets it."""
        self._pool = pool
        self.schema = schema
        self._codec = codec
        self._counter = AheadCounter(counter)  # counts the next batch's texts before its transaction
        self._writer = BatchWriter(schema, self._counter)
        self._policy = policy
        self._max_event_bytes = max_event_bytes
        self._fail_fast = fail_fast
        self._skips = dict(skips or {})
        self._notify = notify_positions
        self._indexed = False  # ensure_event_index ran (a version older than the index gets it)
        self._queries: dict[str, sql.Composed] = {}

    @property
    def skips(self) -> Mapping[tuple[int, int], str]:
        return self._skips

    def _q(self, text: LiteralString) -> sql.Composed:
        # Composed once per statement: formatting parses the template again on every call, which
        # was a tenth of a small batch's CPU (a batch runs about ten statements).
        query = self._queries.get(text)
        if query is None:
            query = self._queries[text] = sql.SQL(text).format(s=sql.Identifier(self.schema))
        return query

    async def positions(self, partitions: Sequence[int]) -> dict[int, int]:
        """Stored next offsets; partitions never seen start at 0 (and get their row now)."""
        await self._ensure_event_index()
        async with self._pool.connection() as conn, conn.cursor() as cur:
            await cur.execute(
                self._q(
                    "INSERT INTO {s}.positions (partition, next_offset) SELECT p, 0 FROM unnest(%s::int[]) p "
                    "ON CONFLICT (partition) DO NOTHING"
                ),
                [list(partitions)],
            )
            await cur.execute(
                self._q("SELECT partition, next_offset FROM {s}.positions WHERE partition = ANY(%s)"),
                [list(partitions)],
            )
            return dict(await cur.fetchall())

    async def prepare(self, records: Sequence[LogRecord]) -> PreparedBatch:
        """Decode ``records`` and count their messages' texts, before the transaction (pure)."""
        return await prepare_batch(records, codec=self._codec, max_event_bytes=self._max_event_bytes,
                                   counter=self._counter)  # fmt: skip

    async def apply(
        self, records: Sequence[LogRecord], expected: Mapping[int, int], *, through: Mapping[int, int] | None = None,
        prepared: PreparedBatch | None = None,
    ) -> BatchReport:  # fmt: skip
        """Apply ``records`` (per partition in offset order, starting at ``expected``); with
        ``through`` (partition -> the reader's next position), the positions of those partitions
        of ``expected`` move there too: past transaction markers and aborted records, which the
        reader skipped without returning them. No records: a position-only write, as guarded.
        ``prepared``: :meth:`prepare` of exactly ``records`` (else they are prepared here)."""
        if prepared is None:
            prepared = await self.prepare(records)
        decoded = prepared.decoded
        counter = self._counter.answering(prepared.counts)
        new_positions = {p: o for p, o in (through or {}).items() if p in expected}
        for r in records:
            new_positions[r.partition] = max(r.offset + 1, new_positions.get(r.partition, 0))
        try:
            outcome = await self._apply_decoded(decoded, expected, new_positions, refused=None, counter=counter)
        except psycopg.Error as e:
            refused = convert_pg_error(e, action="applying a batch")
            if not isinstance(refused, RecordRefusedError):
                raise  # availability or a broken schema: the caller's retrying() decides
            outcome = await self._apply_decoded(decoded, expected, new_positions, refused=refused, counter=counter)
        return BatchReport(
            positions=new_positions,
            applied=len(outcome.applied_event_ids),
            duplicates=outcome.duplicates,
            dead_lettered=len(outcome.poisoned),
            held=len(outcome.held),
        )

    async def _ensure_event_index(self) -> None:
        if not self._indexed:
            async with self._pool.connection() as conn:
                await ensure_event_index(conn, self.schema)
            self._indexed = True

    async def _apply_decoded(
        self, decoded: Sequence[Decoded], expected: Mapping[int, int], new_positions: Mapping[int, int], *,
        refused: RecordRefusedError | None, counter: TokenCounting,
    ) -> BatchOutcome:  # fmt: skip
        """One transaction: check the positions, fold, write, move the positions. ``refused``:
        Postgres refused this batch in an earlier transaction; find the records it refuses."""
        moved = {p: expected[p] for p in new_positions}
        async with (
            self._pool.connection() as conn,
            conn.transaction(),
            conn.cursor(row_factory=dict_row) as cur,
        ):
            await self._check_positions(cur, moved)
            if refused is None:
                outcome = await self._fold(cur, decoded, parked_override=None)
                await self._writer.write(cur, outcome, counter=counter)
            else:
                outcome = await self._write_isolating(cur, decoded, parked_override=None, refused=refused)
            await write_event_index(cur, self.schema, decoded)  # every record, whatever the fold made of it
            await self._move_positions(cur, moved, new_positions)
        return outcome

    async def _write_isolating(
        self, cur: Cursor, decoded: Sequence[Decoded], *, parked_override: str | None,
        refused: RecordRefusedError | None,
    ) -> BatchOutcome:  # fmt: skip
        """Fold and write ``decoded``, each record whose rows Postgres refuses turned into
        poison (dead letter, conversation parked, its later records held), one at a time.
        ``refused``: the refusal of the whole of ``decoded``, known already. With ``fail_fast``
        the first such record raises :class:`~projectors.fold.PoisonRecordError` (naming it)
        unless an operator skipped it before. Raises the refusal itself when it is not one
        record's: the search ended on a dead letter or a held record."""
        # Deferred constraints are checked per statement here, so a savepoint sees their refusal.
        await cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
        batch = list(decoded)
        isolated: set[int] = set()
        while True:
            if refused is None:
                outcome, refused = await self._try_write(cur, batch, parked_override, keep=True)
                if outcome is not None:
                    return outcome
            assert refused is not None

            async def try_prefix(prefix: Sequence[Decoded]) -> RecordRefusedError | None:
                return (await self._try_write(cur, prefix, parked_override, keep=False))[1]

            index, refused = await first_refused(batch, try_prefix, refused)
            d = batch[index]
            if index in isolated or d.event is None:
                raise refused
            isolated.add(index)
            batch[index] = as_refused(d, refused)
            log.warning("store.record_refused", schema=self.schema, partition=d.record.partition,
                        offset=d.record.offset, conversation=d.key, reason=refused.reason)  # fmt: skip
            refused = None

    async def _try_write(
        self, cur: Cursor, decoded: Sequence[Decoded], parked_override: str | None, *, keep: bool
    ) -> tuple[BatchOutcome | None, RecordRefusedError | None]:
        """Fold and write ``decoded`` in a savepoint; rolled back unless ``keep``. The outcome,
        or Postgres' refusal of the data (any other error is raised)."""
        try:
            async with cur.connection.transaction():
                outcome = await self._fold(cur, decoded, parked_override=parked_override)
                await self._writer.write(cur, outcome)
                if not keep:
                    raise psycopg.Rollback()
        except psycopg.Error as e:
            error = convert_pg_error(e, action="applying a record")
            if isinstance(error, RecordRefusedError):
                return None, error
            raise
        return outcome, None

    async def _check_positions(self, cur: Cursor, expected: Mapping[int, int]) -> None:
        # The same statement turns synchronous_commit off for this transaction only (SET LOCAL;
        # no extra round trip): the commit returns without waiting for its WAL flush. A crash can
        # then lose the last batches' commits, but positions commit atomically with their rows
        # and the log is the source of truth, so the projector re-applies exactly that tail from
        # the log (tests/kafka/test_async_commit_crash.py). The API's and ops' writes keep the
        # server's setting.
        await cur.execute(
            self._q(
                "SELECT partition, next_offset, set_config('synchronous_commit', 'off', true) "
                "FROM {s}.positions WHERE partition = ANY(%s) FOR UPDATE"
            ),
            [sorted(expected)],
        )
        stored = {row["partition"]: row["next_offset"] for row in await cur.fetchall()}
        wrong = {p: (o, stored.get(p)) for p, o in expected.items() if stored.get(p) != o}
        if wrong:
            raise PositionConflictError(
                "positions moved under this consumer (expected, stored): "
                + ", ".join(f"p{p}: {e} != {s}" for p, (e, s) in sorted(wrong.items()))
            )

    async def _move_positions(self, cur: Cursor, expected: Mapping[int, int], new: Mapping[int, int]) -> None:
        parts = sorted(new)
        update: LiteralString = (
            "UPDATE {s}.positions AS p SET next_offset = v.next FROM unnest(%s::int[], %s::bigint[], "
            "%s::bigint[]) AS v(partition, next, expected) "
            "WHERE p.partition = v.partition AND p.next_offset = v.expected RETURNING p.partition"
        )
        params: list[Any] = [parts, [new[p] for p in parts], [expected[p] for p in parts]]
        if self._notify:
            # In the same statement, no extra round trip: Postgres delivers one notification for
            # identical ones of a transaction, and only at its commit.
            update = "WITH moved AS (" + update + ") SELECT partition, pg_notify(%s, %s) FROM moved"
            params += [positions_channel(self.schema), positions_payload(new)]
        await cur.execute(self._q(update), params)
        if len(await cur.fetchall()) != len(parts):  # cannot happen under FOR UPDATE; guards a bug
            raise PositionConflictError("a position changed inside the batch transaction")

    async def _fold(self, cur: Cursor, decoded: Sequence[Decoded], *, parked_override: str | None) -> BatchOutcome:
        look = lookups(decoded)
        keys = sorted(look.keys)
        await cur.execute(
            self._q(
                "SELECT c.*, w.start_seq, w.turn_starts FROM {s}.conversations c "
                "LEFT JOIN {s}.windows w USING (conversation_key) WHERE c.conversation_key = ANY(%s)"
            ),
            [keys],
        )
        states: dict[str, ConversationState] = {
            row["conversation_key"]: state_from_row(row) for row in await cur.fetchall()
        }
        # FOR SHARE: a concurrent release of one of these conversations waits for this batch.
        await cur.execute(
            self._q("SELECT conversation_key FROM {s}.parked WHERE conversation_key = ANY(%s) FOR SHARE"),
            [keys],
        )
        parked = {row["conversation_key"] for row in await cur.fetchall()} - {parked_override}
        seen = await self._existing(cur, look.event_ids)
        known = await self._messages_at(cur, look.referenced_messages)
        summaries: dict[str, list[SummaryAt]] = {}
        if look.redacting:
            await cur.execute(self._q(_KEPT_SUMMARIES), [sorted(look.redacting)])
            for row in await cur.fetchall():
                summaries.setdefault(row["conversation_key"], []).append(
                    SummaryAt(row["seq"], row["epoch"], row["covers"])
                )
        redacted: dict[str, list[tuple[str, MessageAt]]] = {}
        if look.listing:
            await cur.execute(self._q(_REDACTED_MESSAGES), [sorted(look.listing)])
            for row in await cur.fetchall():
                at = MessageAt(row["seq"], row["epoch"])
                redacted.setdefault(row["conversation_key"], []).append((row["message_id"], at))
        inputs = BatchInputs(states, frozenset(k for k in parked if k), seen, known, self._skips, summaries, redacted)
        return fold_batch(decoded, inputs, policy=self._policy, fail_fast=self._fail_fast)

    async def _existing(self, cur: Cursor, pairs: frozenset[tuple[str, str]]) -> frozenset[tuple[str, str]]:
        """The (conversation, event id) pairs of ``pairs`` already applied."""
        if not pairs:
            return frozenset()
        keys, values = zip(*pairs, strict=True)
        # A join against the batch's pairs (index probes), not IN (...) with a DISTINCT over it.
        await cur.execute(self._q(_APPLIED_EVENT_IDS), [list(keys), list(values)])
        return frozenset((row["conversation_key"], row["event_id"]) for row in await cur.fetchall())

    async def _messages_at(
        self, cur: Cursor, pairs: frozenset[tuple[str, str]]
    ) -> dict[tuple[str, str], list[MessageAt]]:
        """Where the stored rows of ``pairs`` (conversation, message id) are, in seq order."""
        found: dict[tuple[str, str], list[MessageAt]] = {}
        if not pairs:
            return found
        keys, values = zip(*pairs, strict=True)
        await cur.execute(self._q(_MESSAGES_AT), [list(keys), list(values)])
        for r in await cur.fetchall():
            found.setdefault((r["conversation_key"], r["message_id"]), []).append(MessageAt(r["seq"], r["epoch"]))
        return found

    async def resolve(self, dead_letter_id: int, *, skip_reason: str | None = None) -> BatchReport:
        """Release a parked record (apply it, then the records held behind it, in order) or skip
        it with a recorded reason (then apply the held records). If it still cannot be applied —
        it does not decode, breaks a rule, or Postgres still refuses its rows —, nothing changes
        and a :class:`ProjectionError` says why; a held record that fails now parks the
        conversation again behind itself. Releasing an unreadable batch only marks it: the
        projector reads that partition again by itself once the batch can be read."""
        async with (
            self._pool.connection() as conn,
            conn.transaction(),
            conn.cursor(row_factory=dict_row) as cur,
        ):
            await cur.execute(self._q("SELECT * FROM {s}.dead_letters WHERE id = %s FOR UPDATE"), [dead_letter_id])
            letter = await cur.fetchone()
            if letter is None or letter["status"] != "parked":
                raise ProjectionError(f"dead letter {dead_letter_id} is not parked (unknown or already resolved)")
            if letter["error_code"] == UNREADABLE_BATCH:
                return await self._resolve_unreadable(cur, dead_letter_id, skip_reason=skip_reason)
            key = letter["conversation_key"]
            # The parked row first: a batch that is holding records behind it (FOR SHARE) commits
            # before this goes on, so its records are among the held ones read next.
            await cur.execute(self._q("SELECT FROM {s}.parked WHERE conversation_key = %s FOR UPDATE"), [key])
            await cur.execute(
                self._q('SELECT * FROM {s}.held_records WHERE conversation_key = %s ORDER BY partition, "offset"'),
                [key],
            )
            held = [record_from_row(row) for row in await cur.fetchall()]
            first = [] if skip_reason is not None else [record_from_row(letter)]
            decoded = decode_batch([*first, *held], codec=self._codec, max_event_bytes=self._max_event_bytes)
            if first and decoded[0].poison is not None:
                raise ProjectionError(f"dead letter {dead_letter_id} still fails: {decoded[0].poison.error}")
            await cur.execute(self._q("DELETE FROM {s}.held_records WHERE conversation_key = %s"), [key])
            await cur.execute(self._q("DELETE FROM {s}.parked WHERE conversation_key = %s"), [key])
            await cur.execute(
                self._q("UPDATE {s}.dead_letters SET status = %s, resolution = %s, resolved_at = now() WHERE id = %s"),
                ["skipped" if skip_reason is not None else "released", skip_reason, dead_letter_id],
            )
            # Re-parks and re-holds if a held record fails now; the released one failing undoes all.
            outcome = await self._write_isolating(cur, decoded, parked_override=key, refused=None)
            if first and outcome.poisoned and outcome.poisoned[0].record == first[0]:
                raise ProjectionError(f"dead letter {dead_letter_id} still fails: {outcome.poisoned[0].error}")
        return BatchReport({}, len(outcome.applied_event_ids), outcome.duplicates, len(outcome.poisoned),
                           len(outcome.held))  # fmt: skip

    async def _resolve_unreadable(self, cur: Cursor, dead_letter_id: int, *, skip_reason: str | None) -> BatchReport:
        if skip_reason is not None:
            raise ProjectionError(
                f"dead letter {dead_letter_id} is an unreadable batch: where it ends is not known, so it cannot be "
                "skipped; install the codec it needs (or, if it is corrupt, delete the records up to its end with "
                "kafka-delete-records) and release it"
            )
        await cur.execute(
            self._q("UPDATE {s}.dead_letters SET status = 'released', resolved_at = now() WHERE id = %s"),
            [dead_letter_id],
        )
        return BatchReport({}, 0, 0, 0, 0)

    async def record_unreadable(self, partition: int, offset: int, error: str) -> None:
        """A dead letter for a batch of the log that cannot be read from ``offset`` on (the
        source stopped reading that partition there; its stored position stays at ``offset``).
        Seen again after a restart or a retry, it is the same dead letter, parked again."""
        async with self._pool.connection() as conn:
            await conn.execute(
                self._q(
                    DEAD_LETTER_INSERT + ") VALUES (%s, %s, NULL, '', '', '[]', now(), %s, %s) "
                    "ON CONFLICT (partition, \"offset\") DO UPDATE SET status = 'parked', error = excluded.error, "
                    "resolved_at = NULL, resolution = NULL WHERE dead_letters.error_code = excluded.error_code"
                ),
                (partition, offset, UNREADABLE_BATCH, error.replace("\x00", "\\x00")),
            )
            await conn.commit()


async def skip_decisions(conn: AsyncConnection[Any], schema: str) -> dict[tuple[int, int], str]:
    """The records an operator skipped in ``schema`` ((partition, offset) -> reason), for a
    rebuild or a verify replay to skip too: a skip is a decision the log does not hold."""
    query = sql.SQL("SELECT partition, \"offset\", resolution FROM {}.dead_letters WHERE status = 'skipped'")
    cur = await conn.execute(query.format(sql.Identifier(schema)))
    return {(partition, offset): reason or "" for partition, offset, reason in await cur.fetchall()}
