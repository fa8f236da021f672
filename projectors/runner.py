"""The projector loop: fetch records, apply them in batches, keep going through outages.

Positions come from Postgres on every assignment; the source seeks there. A batch is retried
(with backoff) while Postgres is unavailable — the projector reports itself not ready and
never skips ahead. A position conflict means another consumer owns the partition now: the
projector reloads the stored positions, seeks, and goes on.

While a batch's transaction runs, the next batch is fetched and prepared (decoded, its texts
counted: :mod:`projectors.prepare`), so Python's work for one batch and Postgres' for the other
overlap. The prepared batch is applied only from the positions the transaction left: records
before them are dropped, and after a position conflict it is dropped whole (the source seeks).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import structlog

from events.log import LogRecord, ReadBatch
from projectors.errors import PositionConflictError, StoreUnavailableError
from projectors.ports import BatchReport, ProjectionStore, RecordSource, UnreadableBatch
from projectors.prepare import PreparedBatch
from projectors.retry import retrying

log = structlog.get_logger(__name__)


# Upper bounds (seconds) of the projection latency histogram's buckets; the last is +Inf.
LATENCY_BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, math.inf)


@dataclass(slots=True)
class LatencyHistogram:
    """Projection latency: per committed batch, how long its oldest record had been in the log
    (its timestamp to the commit) — the longest any event of the batch waited to be readable.
    Kept here as plain counts; the metrics layer exposes them (no Prometheus in the core)."""

    counts: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))  # per bucket, not cumulative
    total_s: float = 0.0

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, seconds)  # the producer's clock may run a little ahead of ours
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total_s += seconds


@dataclass(slots=True)
class ProjectorStats:
    applied: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    held: int = 0
    batches: int = 0
    conflicts: int = 0
    store_retries: int = 0
    last_batch_at: float | None = None
    positions: dict[int, int] = field(default_factory=dict)
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)


@dataclass(frozen=True, slots=True)
class _Fetched:
    batch: ReadBatch
    prepared: PreparedBatch  # of batch.records
    unreadable: list[UnreadableBatch]  # found by the source during this fetch


class Projector:
    """Runs one projection version from a :class:`RecordSource` into a :class:`ProjectionStore`."""

    def __init__(
        self,
        source: RecordSource,
        store: ProjectionStore,
        *,
        batch_size: int = 2000,
        fetch_timeout_s: float = 0.5,
        retry_max_delay_s: float = 5.0,
        on_committed: Callable[[Mapping[int, int]], None] | None = None,
        revoke_wait_s: float = 5.0,
    ) -> None:
        """``revoke_wait_s``: how long giving partitions up waits for the batch in flight on them
        (below the group's rebalance timeout, or the broker drops this member)."""
        self._source = source
        # Told each committed batch's new positions (a PositionsWatch wakes read-your-writes waiters).
        self._on_committed = on_committed
        self._store = store
        self._batch_size = batch_size
        self._fetch_timeout_s = fetch_timeout_s
        self._retry_max_delay_s = retry_max_delay_s
        self._expected: dict[int, int] = {}  # owned partitions -> next offset stored in Postgres
        self._revoke_wait_s = revoke_wait_s
        self._in_flight: frozenset[int] = frozenset()  # partitions of the batch being applied
        self._applied = asyncio.Event()  # set while no batch is in flight
        self._applied.set()
        self._ready = False
        self.stats = ProjectorStats(positions=self._expected)

    @property
    def ready(self) -> bool:
        """True once positions are loaded and the last write to Postgres succeeded."""
        return self._ready

    @property
    def positions(self) -> Mapping[int, int]:
        return dict(self._expected)

    async def on_assigned(self, partitions: frozenset[int]) -> Mapping[int, int]:
        stored = await retrying(
            lambda: self._store.positions(sorted(partitions)),
            action="loading positions",
            max_delay_s=self._retry_max_delay_s,
            on_retry=self._not_ready,
        )
        self._expected.update(stored)
        self._ready = True
        log.info("projector.assigned", schema=self._store.schema, positions=stored)
        return stored

    async def on_revoked(self, partitions: frozenset[int]) -> None:
        # Kafka's contract for a revocation: finish the work on those partitions first. The batch
        # in flight commits (or fails) before the next owner loads their positions, so that owner
        # starts where this one stopped, instead of from positions about to move under it (its
        # first batch would be refused by the positions fence, and wait on this one's locks).
        if partitions & self._in_flight:
            try:
                await asyncio.wait_for(self._applied.wait(), self._revoke_wait_s)
            except TimeoutError:  # a Postgres outage: the fence keeps the next owner right anyway
                log.warning("projector.revoked_with_batch_in_flight", partitions=sorted(partitions & self._in_flight))
        for p in partitions:
            self._expected.pop(p, None)
        log.info("projector.revoked", schema=self._store.schema, partitions=sorted(partitions))

    def _not_ready(self, attempt: int, error: Exception, delay: float) -> None:
        self._ready = False
        self.stats.store_retries += 1
        log.warning("projector.store_unavailable", attempt=attempt, retry_in_s=round(delay, 2), error=str(error))

    async def run(self, stop: asyncio.Event, *, until: Mapping[int, int] | None = None) -> None:
        """Project until ``stop`` is set, or — with ``until`` — until every partition reached
        the given offset (a rebuild catching up to the log end it saw when it started)."""
        await self._source.start(self)
        ahead: asyncio.Task[_Fetched] | None = None  # the next batch, fetched during a transaction
        try:
            while not stop.is_set():
                if until is not None and all(self._expected.get(p, 0) >= o for p, o in until.items()):
                    return
                fetched = await (ahead or self._fetch())
                ahead = None
                batch = fetched.batch
                records = self._owned(batch.records)
                # Positions past offsets that hold no record (transaction markers, aborted records)
                # are stored too, or the lag would never reach 0 nor a rebuild its ``until``.
                moved = {p: o for p, o in batch.positions.items() if p in self._expected and o > self._expected[p]}
                if records or moved:
                    if until is None or not all(batch.positions.get(p, 0) >= o for p, o in until.items()):
                        ahead = asyncio.create_task(self._fetch())
                    conflict = await self._apply(records, moved, fetched.prepared.only(records))
                    if conflict:
                        if ahead is not None:  # read from positions another consumer moved: dropped
                            await ahead
                            ahead = None
                        await self._reload(conflict)  # the source seeks: after the fetch ahead, not during it
                for unreadable in fetched.unreadable:
                    await self._unreadable(unreadable)
        finally:
            self._ready = False  # /readyz and the metrics tell a projector that ended
            if ahead is not None:  # its records are not applied: the next run reads from the stored positions
                ahead.cancel()
                with contextlib.suppress(BaseException):
                    await ahead
            await self._source.stop()

    async def _fetch(self) -> _Fetched:
        batch = await self._source.fetch(max_records=self._batch_size, timeout_s=self._fetch_timeout_s)
        unreadable = self._source.take_unreadable()
        prepared = await self._store.prepare(batch.records) if batch.records else PreparedBatch([])
        return _Fetched(batch, prepared, unreadable)

    def _owned(self, records: Sequence[LogRecord]) -> list[LogRecord]:
        """Records of owned partitions at or after the stored position (a prefetch from before a
        seek or a revoke is dropped, never applied twice)."""
        return [r for r in records if r.partition in self._expected and r.offset >= self._expected[r.partition]]

    async def _apply(
        self, records: list[LogRecord], through: Mapping[int, int], prepared: PreparedBatch
    ) -> frozenset[int]:
        """Apply the batch; the partitions whose positions to reload after a position conflict.
        While it runs, a revoke of its partitions waits for it (:meth:`on_revoked`)."""
        self._in_flight = frozenset({*through, *(r.partition for r in records)})
        self._applied.clear()
        try:
            return await self._apply_batch(records, through, prepared)
        finally:
            self._in_flight = frozenset()
            self._applied.set()

    async def _apply_batch(
        self, records: list[LogRecord], through: Mapping[int, int], prepared: PreparedBatch
    ) -> frozenset[int]:
        expected = {p: self._expected[p] for p in {*through, *(r.partition for r in records)}}
        try:
            report: BatchReport = await retrying(
                lambda: self._store.apply(records, expected, through=through, prepared=prepared),
                action="applying a batch",
                max_delay_s=self._retry_max_delay_s,
                on_retry=self._not_ready,
            )
        except PositionConflictError as e:
            self.stats.conflicts += 1
            log.warning("projector.position_conflict", error=str(e))
            return frozenset(expected)
        except StoreUnavailableError:  # only when retrying gives up, i.e. never by default
            raise
        self._ready = True
        for p, o in report.positions.items():
            if p in self._expected:
                self._expected[p] = o
        if self._on_committed is not None:
            self._on_committed({p: o for p, o in report.positions.items() if p in self._expected})
        s = self.stats
        s.applied += report.applied
        s.duplicates += report.duplicates
        s.dead_lettered += report.dead_lettered
        s.held += report.held
        if not records:
            return frozenset()  # only positions moved
        s.batches += 1
        s.last_batch_at = time.monotonic()
        if report.applied:
            s.latency.observe((datetime.now(UTC) - min(r.timestamp for r in records)).total_seconds())
        if report.dead_lettered:
            log.warning("projector.dead_lettered", count=report.dead_lettered, schema=self._store.schema)
        return frozenset()

    async def _unreadable(self, batch: UnreadableBatch) -> None:
        """A dead letter for a batch the source cannot read; that partition waits at it (its
        position stays there), every other goes on."""
        await retrying(
            lambda: self._store.record_unreadable(batch.partition, batch.offset, batch.error),
            action="recording an unreadable batch",
            max_delay_s=self._retry_max_delay_s,
            on_retry=self._not_ready,
        )
        self.stats.dead_lettered += 1
        log.error(
            "projector.unreadable_batch",
            schema=self._store.schema,
            partition=batch.partition,
            offset=batch.offset,
            error=batch.error,
        )

    async def _reload(self, partitions: frozenset[int]) -> None:
        owned = partitions & frozenset(self._expected)
        if not owned:
            return
        stored = await self._store.positions(sorted(owned))
        for p, o in stored.items():
            self._expected[p] = o
            self._source.seek(p, o)
