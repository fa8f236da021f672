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
from psycopg import AsyncCursor
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from events.codec import EventCodec
from events.log import LogRecord
from events.sealing.ports import KeyRing
from pgstore import parked_rows
from pgstore.batch_inputs import POSITIONS_FOR_UPDATE, BatchInputReader, check_positions
from pgstore.batch_statement import MOVE_POSITIONS, BatchStatement, is_plain, move_params, moved_rows
from pgstore.event_index import ensure_event_index, write_event_index
from pgstore.pool import convert_pg_error, pg_errors
from pgstore.positions import claim_positions
from pgstore.read_sql import in_schema
from pgstore.writes import BatchWriter
from projectors.errors import PositionConflictError, ProjectionError, RecordRefusedError
from projectors.fold import BatchOutcome, Decoded, decode_batch, fold_batch, lookups
from projectors.isolation import as_refused, first_refused
from projectors.ports import UNREADABLE_BATCH, BatchReport
from projectors.positions_watch import positions_channel, positions_payload
from projectors.prepare import AheadCounter, PreparedBatch, prepare_batch
from projectors.rows import TokenCounting, index_rows, record_from_row, transcript_copy_rows
from projectors.sealed_rows import RowSealer
from projectors.window import WindowPolicy

Cursor = AsyncCursor[Any]
log = structlog.get_logger(__name__)

# Batches of at most this many records are written with INSERTs in a pipeline, larger ones with
# COPY (which cannot be pipelined, and is cheaper per row once there are a few dozen).
PIPELINED_BATCH = 16


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
        keys: KeyRing | None = None,
    ) -> None:
        """``skips``: (partition, offset) -> reason of poison records an operator skipped in the
        version this one rebuilds or verifies (:func:`skip_decisions`): skipped here too.
        ``notify_positions``: each batch's transaction also ``NOTIFY``s its new positions on the
        channel :func:`positions_channel` names, delivered at its commit (API processes of
        other hosts wake their read-your-writes waits on it); the live projector sets it.
        ``keys``: the data keys rows of sealed records are stored sealed under and read back
        with (projectors/sealed_rows.py); without it, such a row raises ``UnknownKeyError``."""
        self._pool = pool
        self.schema = schema
        self._codec = codec
        self._counter = AheadCounter(counter)  # counts the next batch's texts before its transaction
        self._sealer = None if keys is None else RowSealer(keys)
        self._writer = BatchWriter(schema, self._counter, sealer=self._sealer)
        self._inputs = BatchInputReader(schema, sealer=self._sealer)
        self._one_statement = BatchStatement(schema, sealer=self._sealer)
        self._policy = policy
        self._max_event_bytes = max_event_bytes
        self._fail_fast = fail_fast
        self._skips = dict(skips or {})
        self._notify = notify_positions
        self._indexed = False  # ensure_event_index ran (a version older than the index gets it)

    @property
    def skips(self) -> Mapping[tuple[int, int], str]:
        return self._skips

    # The port's methods: the driver's errors leave as convlog errors (pg_errors), so that the
    # projector's retrying (projectors/retry.py, driver-free) sees what it can retry.
    async def positions(self, partitions: Sequence[int]) -> dict[int, int]:
        """Stored next offsets; partitions never seen start at 0 (and get their row now)."""
        with pg_errors("loading positions"):
            return await self._positions_unconverted(partitions)

    async def apply(
        self,
        records: Sequence[LogRecord],
        expected: Mapping[int, int],
        *,
        through: Mapping[int, int] | None = None,
        prepared: PreparedBatch | None = None,
    ) -> BatchReport:
        """See :meth:`_apply_unconverted`."""
        with pg_errors("applying a batch"):
            return await self._apply_unconverted(records, expected, through=through, prepared=prepared)

    async def resolve(self, dead_letter_id: int, *, skip_reason: str | None = None) -> BatchReport:
        """See :meth:`_resolve_unconverted`."""
        with pg_errors(f"resolving dead letter {dead_letter_id}"):
            return await self._resolve_unconverted(dead_letter_id, skip_reason=skip_reason)

    async def record_unreadable(self, partition: int, offset: int, error: str) -> None:
        """A dead letter for a batch of the log that cannot be read from ``offset`` on (the
        source stopped reading that partition there; its stored position stays at ``offset``)."""
        with pg_errors("recording an unreadable batch"):
            await parked_rows.record_unreadable(self._pool, self.schema, partition, offset, error)

    def _q(self, text: LiteralString) -> bytes:
        return in_schema(self.schema, text)

    async def _positions_unconverted(self, partitions: Sequence[int]) -> dict[int, int]:
        await self._ensure_event_index()
        async with self._pool.connection() as conn:
            return await claim_positions(conn, self.schema, partitions)

    async def prepare(self, records: Sequence[LogRecord]) -> PreparedBatch:
        """Decode ``records`` and count their messages' texts, before the transaction (pure)."""
        return await prepare_batch(
            records, codec=self._codec, max_event_bytes=self._max_event_bytes, counter=self._counter
        )

    async def _apply_unconverted(
        self,
        records: Sequence[LogRecord],
        expected: Mapping[int, int],
        *,
        through: Mapping[int, int] | None = None,
        prepared: PreparedBatch | None = None,
    ) -> BatchReport:
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
        self,
        decoded: Sequence[Decoded],
        expected: Mapping[int, int],
        new_positions: Mapping[int, int],
        *,
        refused: RecordRefusedError | None,
        counter: TokenCounting,
    ) -> BatchOutcome:
        """One transaction: check the positions, fold, write, move the positions. ``refused``:
        Postgres refused this batch in an earlier transaction; find the records it refuses."""
        moved = {p: expected[p] for p in new_positions}
        if refused is None and len(decoded) <= PIPELINED_BATCH:
            return await self._apply_pipelined(decoded, moved, new_positions, counter=counter)
        async with (
            self._pool.connection() as conn,
            conn.transaction(),
            conn.cursor(row_factory=dict_row) as cur,
        ):
            if refused is None:  # the positions checked in the same round trip as the fold's reads
                outcome = await self._fold(cur, decoded, parked_override=None, positions=moved)
                await self._writer.write(cur, outcome, counter=counter)
            else:
                await self._check_positions(cur, moved)
                outcome = await self._write_isolating(cur, decoded, parked_override=None, refused=refused)
            await self._release_superseded(cur, outcome)
            await write_event_index(cur, self.schema, decoded)  # every record, whatever the fold made of it
            await self._move_positions(cur, moved, new_positions)
        return outcome

    async def _apply_pipelined(
        self,
        decoded: Sequence[Decoded],
        moved: Mapping[int, int],
        new_positions: Mapping[int, int],
        *,
        counter: TokenCounting,
    ) -> BatchOutcome:
        """The transaction of a small batch (what a read-your-writes request waits for) in three
        round trips instead of about ten: BEGIN goes with the reads; the rows, as INSERTs, with
        the position move; then the COMMIT. The same statements otherwise, and the same outcome."""
        async with (
            self._pool.connection() as conn,
            conn.pipeline(),
            conn.transaction(),
            conn.cursor(row_factory=dict_row) as cur,
        ):
            outcome = await self._fold(cur, decoded, parked_override=None, positions=moved)
            if is_plain(outcome):  # the common batch: everything in one statement
                statement, params = self._one_statement.compose(
                    outcome,
                    transcript=transcript_copy_rows(outcome.transcript, counter, self._sealer),
                    index=index_rows(decoded),
                    expected=moved,
                    new=new_positions,
                    notify=self._notification(new_positions),
                )
                await cur.execute(statement, params)
                if len(await cur.fetchall()) != len(new_positions):  # cannot happen under FOR UPDATE
                    raise PositionConflictError("a position changed inside the batch transaction")
            else:
                await self._writer.write(cur, outcome, counter=counter, inserts=True)
                await self._release_superseded(cur, outcome, inserts=True)  # no COPY in a pipeline
                await write_event_index(cur, self.schema, decoded, inserts=True)
                await self._move_positions(cur, moved, new_positions)
        return outcome

    async def _write_isolating(
        self,
        cur: Cursor,
        decoded: Sequence[Decoded],
        *,
        parked_override: str | None,
        refused: RecordRefusedError | None,
        inserts: bool = False,
    ) -> BatchOutcome:
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
                outcome, refused = await self._try_write(cur, batch, parked_override, keep=True, inserts=inserts)
                if outcome is not None:
                    return outcome
            assert refused is not None

            async def try_prefix(prefix: Sequence[Decoded]) -> RecordRefusedError | None:
                return (await self._try_write(cur, prefix, parked_override, keep=False, inserts=inserts))[1]

            index, refused = await first_refused(batch, try_prefix, refused)
            d = batch[index]
            if index in isolated or d.event is None:
                raise refused
            isolated.add(index)
            batch[index] = as_refused(d, refused)
            log.warning(
                "store.record_refused",
                schema=self.schema,
                partition=d.record.partition,
                offset=d.record.offset,
                conversation=d.key,
                reason=refused.reason,
            )
            refused = None

    async def _try_write(
        self, cur: Cursor, decoded: Sequence[Decoded], parked_override: str | None, *, keep: bool, inserts: bool
    ) -> tuple[BatchOutcome | None, RecordRefusedError | None]:
        """Fold and write ``decoded`` in a savepoint; rolled back unless ``keep``. The outcome,
        or Postgres' refusal of the data (any other error is raised)."""
        try:
            async with cur.connection.transaction():
                outcome = await self._fold(cur, decoded, parked_override=parked_override)
                await self._writer.write(cur, outcome, inserts=inserts)
                if not keep:
                    raise psycopg.Rollback()
        except psycopg.Error as e:
            error = convert_pg_error(e, action="applying a record")
            if isinstance(error, RecordRefusedError):
                return None, error
            raise
        return outcome, None

    async def _check_positions(self, cur: Cursor, expected: Mapping[int, int]) -> None:
        await cur.execute(self._q(POSITIONS_FOR_UPDATE), [sorted(expected)])
        check_positions(expected, {row["partition"]: row["next_offset"] for row in await cur.fetchall()})

    def _notification(self, new: Mapping[int, int]) -> tuple[str, str] | None:
        """The channel and payload a batch's commit notifies (None: this store does not)."""
        return (positions_channel(self.schema), positions_payload(new)) if self._notify else None

    async def _move_positions(self, cur: Cursor, expected: Mapping[int, int], new: Mapping[int, int]) -> None:
        notify = self._notification(new)
        statement = self._q("WITH " + MOVE_POSITIONS + " " + moved_rows(notify=notify is not None))
        await cur.execute(statement, move_params(expected, new, notify))
        if len(await cur.fetchall()) != len(new):  # cannot happen under FOR UPDATE; guards a bug
            raise PositionConflictError("a position changed inside the batch transaction")

    async def _fold(
        self,
        cur: Cursor,
        decoded: Sequence[Decoded],
        *,
        parked_override: str | None,
        positions: Mapping[int, int] | None = None,
    ) -> BatchOutcome:
        """Read what ``decoded`` needs of the stored rows (one round trip; with ``positions``,
        those are locked and checked first) and fold it."""
        inputs = await self._inputs.read(
            cur.connection, lookups(decoded), skips=self._skips, parked_override=parked_override, positions=positions
        )
        return fold_batch(decoded, inputs, policy=self._policy, fail_fast=self._fail_fast)

    async def _resolve_unconverted(self, dead_letter_id: int, *, skip_reason: str | None = None) -> BatchReport:
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
            letter = await parked_rows.letter_for_update(cur, self.schema, dead_letter_id)
            if letter is None or letter["status"] != "parked":
                raise ProjectionError(f"dead letter {dead_letter_id} is not parked (unknown or already resolved)")
            if letter["error_code"] == UNREADABLE_BATCH:
                await parked_rows.release_unreadable(cur, self.schema, dead_letter_id, skip_reason=skip_reason)
                return BatchReport({}, 0, 0, 0, 0)
            outcome = await self._release(cur, letter, skip_reason=skip_reason)
        return BatchReport(
            {}, len(outcome.applied_event_ids), outcome.duplicates, len(outcome.poisoned), len(outcome.held)
        )

    async def _release(
        self, cur: Cursor, letter: dict[str, Any], *, skip_reason: str | None, inserts: bool = False
    ) -> BatchOutcome:
        """:meth:`resolve`'s work on a parked dead letter (locked), in the caller's transaction."""
        dead_letter_id, key = letter["id"], letter["conversation_key"]
        held = await parked_rows.take_held(cur, self.schema, key)
        first = [] if skip_reason is not None else [record_from_row(letter)]
        decoded = decode_batch([*first, *held], codec=self._codec, max_event_bytes=self._max_event_bytes)
        if first and decoded[0].poison is not None:
            raise ProjectionError(f"dead letter {dead_letter_id} still fails: {decoded[0].poison.error}")
        await parked_rows.mark_resolved(cur, self.schema, dead_letter_id, skip_reason=skip_reason)
        # Re-parks and re-holds if a held record fails now; the released one failing undoes all.
        outcome = await self._write_isolating(cur, decoded, parked_override=key, refused=None, inserts=inserts)
        if first and outcome.poisoned and outcome.poisoned[0].record == first[0]:
            raise ProjectionError(f"dead letter {dead_letter_id} still fails: {outcome.poisoned[0].error}")
        await self._release_superseded(cur, outcome, inserts=inserts)
        return outcome

    async def _release_superseded(self, cur: Cursor, outcome: BatchOutcome, *, inserts: bool = False) -> None:
        """An erase or a clear is never held behind a parked record: for each conversation the
        fold found one held for (``outcome.superseding``), the record that parks it is skipped
        with the fold's reason and the held records applied — the erase or clear among them,
        after the records before it, so that it applies to them too. Run before the batch
        commits: a crash cannot leave it held."""
        for key, reason in outcome.superseding.items():
            letter = await parked_rows.parked_letter_of(cur, self.schema, key)
            if letter is not None and letter["status"] == "parked":
                log.warning(
                    "store.parked_record_skipped",
                    schema=self.schema,
                    conversation=key,
                    dead_letter=letter["id"],
                    reason=reason,
                )
                await self._release(cur, letter, skip_reason=reason, inserts=inserts)
